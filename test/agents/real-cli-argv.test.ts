/**
 * Runs the exact argv each adapter builds against the real CLI (installed from the npm registry into a cache
 * folder), with no credentials, an empty HOME, no network and a bounded time. Every run must fail — there is nothing
 * to log in with — and the failure must be about credentials, the network or the time limit, never about an option
 * or argument the CLI did not accept. A negative control per CLI proves the check would notice one.
 *
 * opencode offline only ever waits (for a provider it cannot reach) until the time limit, which proves little, and it
 * accepts any OPENCODE_PERMISSION value without a word (unknown actions, even invalid JSON). So opencode's variants
 * run against test/fixtures/cli-output/mock-provider.mjs, started inside the run's network namespace: each must end
 * with exit 0 and the mock's answer, and the tools opencode offered the model (logged by the mock) must be exactly
 * what the variant's permissions allow. The negative control there is a broken permission config, which shows up as
 * tools offered that should not be. The other CLIs run offline and against the mock too. Scripted tool calls
 * (claude, opencode) show a `Bash(git *)` entry enforced at run time: a git command runs, another is refused, and a
 * plain `Bash` (the control) runs it.
 *
 * Cold cache: the install runs first (top-level await; ≈ 1.3 GB, about a minute here). A CLI whose package cannot
 * be installed is skipped with the reason printed; the rest still run.
 */
import { spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { claudeRefusesAsRoot } from '../../src/agents/adapters/claude.js';
import { adapterFor } from '../../src/agents/adapters/index.js';
import type { Backend, FrozenAgent, Invocation, InvocationContext } from '../../src/agents/types.js';
import { type CliName, cliCacheDir, installClis } from '../helpers/install-clis.js';
import { networkNamespacePrefix } from '../helpers/netns.js';
import { privateTestDir } from '../helpers/private-dir.js';

/** A run that has not ended by then is stopped; opencode and codex wait for a network forever. */
const RUN_TIMEOUT_MS = Number(process.env.SUBAGENTS_REAL_CLI_TIMEOUT_MS ?? 30_000);
/** The negative control must end on its own (a CLI rejecting its argv exits at once, load permitting). */
const CONTROL_TIMEOUT_MS = 2 * RUN_TIMEOUT_MS;
/**
 * A run against the mock provider ends on its own, but a real CLI's speed is not what is checked: alone, opencode
 * answers in ~7 s, with the whole suite running beside it in 10–25 s, and once it passed 30 s.
 */
const MOCK_RUN_TIMEOUT_MS = 2 * RUN_TIMEOUT_MS;
const TEST_TIMEOUT_MS = CONTROL_TIMEOUT_MS + 30_000;
const KILL_GRACE_MS = 2_000;
const TASK = '--help --version; a task that starts with dashes must never be read as a flag';
const MOCK_PROVIDER = fileURLToPath(new URL('../fixtures/cli-output/mock-provider.mjs', import.meta.url));
const MOCK_ANSWER = 'Hello from the mock provider.';

const installs = await installClis();
for (const cli of Object.values(installs)) {
  const what = cli.problem ? `SKIPPED: ${cli.problem}` : `${cli.installed ? 'installed' : 'cached'} in ${cli.ms} ms`;
  process.stderr.write(`[real-cli] ${cli.name} ${cli.version}: ${what}\n`);
}

/**
 * Wraps argv in a fresh network namespace when this machine allows one (root, or unprivileged user namespaces), with
 * only loopback up: opencode talks to its own in-process server over it and stalls without it.
 */
const NO_NETWORK_PREFIX = networkNamespacePrefix('real-cli');

// This run's own folder: another test run on the machine must not remove it under us, nor we its.
const runsDir = mkdtempSync(path.join(privateTestDir('subagents-real-cli-runs'), 'run-'));
afterAll(() => rmSync(runsDir, { recursive: true, force: true }));

/** Output that means the CLI rejected its command line (or a config value the adapter passed). */
const ARGV_COMPLAINTS = [
  /unknown option/i,
  /unknown argument/i,
  /unexpected argument/i,
  /error: option/i,
  /invalid value/i,
  /invalid values:/i,
  /not enough arguments/i,
  /missing required argument/i,
  /unrecognized/i,
  /^Usage:/m,
  /^Positionals:/m,
  /error loading config/i,
  /invalid configuration/i,
  /Security Warning: Skipping/i,
  /system prompt file not found/i,
];

/** Output that means the run got past its command line and stopped for want of credentials or a network. */
const EXPECTED_FAILURE =
  /not logged in|\/login|auth method|api key|apikey|credential|unauthori[sz]ed|network|connect|reconnecting|fetch failed|ENOTFOUND|EAI_AGAIN|does not resolve|root\/sudo/i;

interface Variant {
  name: string;
  agent: Partial<FrozenAgent>;
  model?: string;
  delegate?: boolean;
  /** Against the mock provider: tools the CLI must offer the model, and (when set) the only ones it may offer. */
  offers?: string[];
  offersOnly?: string[];
  /** Tools the CLI must not offer (when the level forbids a few tools of an open-ended set). */
  withholds?: string[];
}

const BODY = 'You review diffs.\n"Quotes", back\\slashes, $VARS and a line starting with --dashes.';

const VARIANTS: Record<CliName, Variant[]> = {
  claude: [
    { name: 'read-only, tools, model, delegate', agent: { permissions: 'read-only', tools: ['Read', 'Grep'] }, model: 'sonnet', delegate: true, offers: ['Read', 'Grep'], offersOnly: ['Read', 'Grep'] },
    { name: 'edit, narrowed Bash', agent: { permissions: 'edit', tools: ['Read', 'Edit', 'Bash(git *)'] }, offers: ['Read', 'Edit', 'Bash'], offersOnly: ['Read', 'Edit', 'Bash'] },
    { name: 'edit, no tools', agent: { permissions: 'edit', tools: [] }, offers: [], offersOnly: [] },
    { name: 'full', agent: { permissions: 'full' }, offers: ['Bash', 'Edit', 'Write', 'Read'] },
    { name: 'full, narrowed Bash', agent: { permissions: 'full', tools: ['Read', 'Bash(git *)'] }, offers: ['Read', 'Bash'], offersOnly: ['Read', 'Bash'] },
  ],
  codex: [
    { name: 'read-only, model, delegate', agent: { permissions: 'read-only' }, model: 'gpt-5.5', delegate: true },
    { name: 'edit', agent: { permissions: 'edit' } },
    { name: 'full', agent: { permissions: 'full' } },
  ],
  gemini: [
    { name: 'read-only, tools, model, delegate', agent: { permissions: 'read-only', tools: ['read_file', 'glob'] }, model: 'gemini-2.5-pro', delegate: true, offers: ['read_file', 'glob'], offersOnly: ['read_file', 'glob'] },
    { name: 'edit', agent: { permissions: 'edit' }, offers: ['read_file', 'write_file', 'replace'], withholds: ['run_shell_command', 'invoke_agent', 'save_memory'] },
    // The level narrows the list: the shell is dropped at edit.
    { name: 'edit, tools', agent: { permissions: 'edit', tools: ['read_file', 'write_file', 'run_shell_command'] }, offers: ['read_file', 'write_file'], offersOnly: ['read_file', 'write_file'] },
    { name: 'full', agent: { permissions: 'full' }, offers: ['run_shell_command', 'write_file', 'replace', 'read_file'] },
  ],
  pi: [
    { name: 'read-only, model', agent: { permissions: 'read-only' }, model: 'anthropic/claude-sonnet-4-5', offers: ['read', 'grep', 'find', 'ls'], offersOnly: ['read', 'grep', 'find', 'ls'] },
    { name: 'edit, no tools', agent: { permissions: 'edit', tools: [] }, offers: [], offersOnly: [] },
    // The level narrows the list: bash is dropped at edit.
    { name: 'edit, tools', agent: { permissions: 'edit', tools: ['read', 'edit', 'bash'] }, offers: ['read', 'edit'], offersOnly: ['read', 'edit'] },
    { name: 'full', agent: { permissions: 'full' }, offers: ['read', 'bash', 'edit', 'write'] },
  ],
  opencode: [
    {
      name: 'read-only, model, delegate',
      agent: { permissions: 'read-only' },
      model: 'anthropic/claude-sonnet-4-5',
      delegate: true,
      offers: ['read', 'grep', 'glob'],
      offersOnly: ['read', 'glob', 'grep', 'list', 'todowrite', 'todoread', 'webfetch', 'websearch', 'codesearch', 'lsp'],
    },
    { name: 'edit, tools', agent: { permissions: 'edit', tools: ['read', 'grep', 'write'] }, offers: ['read', 'grep', 'edit', 'write'], offersOnly: ['read', 'grep', 'edit', 'write', 'patch', 'multiedit', 'apply_patch'] },
    { name: 'edit, no tools', agent: { permissions: 'edit', tools: [] }, offers: [], offersOnly: [] },
    { name: 'full', agent: { permissions: 'full' }, offers: ['bash', 'edit', 'write', 'read', 'task'] },
  ],
};

/** Where a bad flag goes to be seen by the CLI's parser: after the subcommand for codex and opencode. */
const FLAG_SLOT: Record<CliName, number> = { claude: 1, codex: 2, gemini: 1, pi: 1, opencode: 2 };

/**
 * CLIs whose runs only end at the time limit (waiting for a network) run their variants side by side; the others
 * exit by themselves within seconds and run one at a time, so a 2-core machine is not swamped by parallel starts.
 */
const CONCURRENT: Record<CliName, boolean> = { claude: false, codex: true, gemini: false, pi: false, opencode: true };

/** Output that shows the run was past its command line and config; the run is stopped there to save time. */
const PAST_ARGV: Partial<Record<CliName, RegExp>> = { codex: /"type":"turn\.started"/ };

/**
 * How each CLI is pointed at the mock provider: a fake credential, and the provider's base URL, which is only known
 * once the mock listens — through a variable the wrapper sets (MOCK_URL_VARS; `{env:…}` is opencode's own config
 * substitution) or a config file it fills in (MOCK_TEMPLATES).
 */
const MOCK_SETUP: Partial<Record<CliName, (home: string) => Record<string, string>>> = {
  opencode: (home) => {
    const dir = path.join(home, '.config', 'opencode');
    mkdirSync(dir, { recursive: true });
    const config = { provider: { anthropic: { options: { baseURL: '{env:MOCK_PROVIDER_URL}/v1' } } } };
    writeFileSync(path.join(dir, 'opencode.json'), JSON.stringify(config));
    return { ANTHROPIC_API_KEY: 'sk-ant-fake-for-the-mock-provider' };
  },
  claude: () => ({ ANTHROPIC_API_KEY: 'sk-ant-fake-for-the-mock-provider', MOCK_URL_VARS: 'ANTHROPIC_BASE_URL' }),
  gemini: (home) => {
    // The API-key auth method is chosen in the user's settings; the adapter's system settings layer leaves it alone.
    mkdirSync(path.join(home, '.gemini'), { recursive: true });
    writeFileSync(path.join(home, '.gemini', 'settings.json'), JSON.stringify({ security: { auth: { selectedType: 'gemini-api-key' } } }));
    // A fixed default model: "auto" first asks a router model for a classification the mock does not give.
    return { GEMINI_API_KEY: 'fake-for-the-mock-provider', GEMINI_MODEL: 'gemini-2.5-flash', MOCK_URL_VARS: 'GOOGLE_GEMINI_BASE_URL' };
  },
  pi: (home) => {
    // pi's models.json overrides a built-in provider's base URL; it has no variable substitution, so the wrapper
    // writes the port in once the mock listens.
    const models = path.join(home, '.pi', 'agent', 'models.json');
    mkdirSync(path.dirname(models), { recursive: true });
    writeFileSync(models, JSON.stringify({ providers: { anthropic: { baseUrl: '@MOCK_PROVIDER_URL@' } } }));
    return { ANTHROPIC_API_KEY: 'sk-ant-fake-for-the-mock-provider', MOCK_TEMPLATES: models };
  },
  codex: (home) => {
    const config = path.join(home, '.codex', 'config.toml');
    mkdirSync(path.dirname(config), { recursive: true });
    writeFileSync(config, 'openai_base_url = "@MOCK_PROVIDER_URL@/v1"\n');
    return { OPENAI_API_KEY: 'sk-fake-for-the-mock-provider', MOCK_TEMPLATES: config };
  },
};

/** CLIs whose offline runs prove nothing (they only wait for the time limit): they run against the mock alone. */
const MOCK_ONLY: Partial<Record<CliName, boolean>> = { opencode: true };

/** Under uid 0, Claude refuses bypassPermissions: such a variant must fail saying so (docs/troubleshooting.md). */
const refusedAsRoot = (cli: CliName, variant: Variant): boolean =>
  cli === 'claude' && process.getuid?.() === 0 && claudeRefusesAsRoot(variant.agent.permissions ?? 'edit', variant.agent.tools);

interface ToolCheck {
  name: string;
  agent: Partial<FrozenAgent>;
  /** The one tool call the mock makes; `{cwd}` is the run's working directory, `{outside}` a directory outside it. */
  call: { name: string; input: Record<string, unknown> };
  runs: boolean;
  /** What the tool's result must say (when it ran). */
  result?: RegExp;
  /** A file the call creates: it must exist exactly when the call ran. */
  creates?: string;
}

const TOUCH = { name: 'Bash', input: { command: 'touch marker', description: 'marker' } };

/**
 * A pattern in `tools` is enforced by the CLI at run time, which only a tool call shows: the mock asks for one and
 * the test looks at what happened (the marker file, the tool result the CLI sent back).
 */
const TOOL_CHECKS: Partial<Record<CliName, ToolCheck[]>> = {
  claude: [
    { name: 'full, Bash(git *): a git command runs', agent: { permissions: 'full', tools: ['Read', 'Bash(git *)'] }, call: { name: 'Bash', input: { command: 'git --version', description: 'version' } }, runs: true, result: /git version/ },
    { name: 'full, Bash(git *): another command is refused', agent: { permissions: 'full', tools: ['Read', 'Bash(git *)'] }, call: TOUCH, runs: false, creates: '{cwd}/marker' },
    // acceptEdits would run it: it approves file commands (touch, mkdir, rm, cp) in the working directory.
    { name: 'edit, Bash(git *): another command is refused', agent: { permissions: 'edit', tools: ['Read', 'Edit', 'Bash(git *)'] }, call: TOUCH, runs: false, creates: '{cwd}/marker' },
    { name: 'edit, Bash(git *): a git command runs', agent: { permissions: 'edit', tools: ['Read', 'Bash(git *)'] }, call: { name: 'Bash', input: { command: 'git --version', description: 'version' } }, runs: true, result: /git version/ },
    // The control: the same call does run when the list grants the whole tool.
    { name: 'full, Bash: any command runs', agent: { permissions: 'full', tools: ['Read', 'Bash'] }, call: TOUCH, runs: true, creates: '{cwd}/marker' },
    // Edits at edit with a list: in the working directory, as acceptEdits would, and not outside it.
    { name: 'edit, Write: a file in the working directory is written', agent: { permissions: 'edit', tools: ['Read', 'Write'] }, call: { name: 'Write', input: { file_path: '{cwd}/written.txt', content: 'x' } }, runs: true, creates: '{cwd}/written.txt' },
    { name: 'edit, Write: a file outside the working directory is refused', agent: { permissions: 'edit', tools: ['Read', 'Write'] }, call: { name: 'Write', input: { file_path: '{outside}/written.txt', content: 'x' } }, runs: false, creates: '{outside}/written.txt' },
  ],
  opencode: [
    { name: 'full, bash(git *): a git command runs', agent: { permissions: 'full', tools: ['read', 'bash(git *)'] }, call: { name: 'bash', input: { command: 'git --version', description: 'version' } }, runs: true, result: /git version/ },
    { name: 'full, bash(git *): another command is refused', agent: { permissions: 'full', tools: ['read', 'bash(git *)'] }, call: { ...TOUCH, name: 'bash' }, runs: false, creates: '{cwd}/marker' },
    { name: 'full, bash: any command runs', agent: { permissions: 'full', tools: ['read', 'bash'] }, call: { ...TOUCH, name: 'bash' }, runs: true, creates: '{cwd}/marker' },
  ],
};

/**
 * Starts the mock next to the CLI (same network namespace), waits for its port, runs the CLI as a child — not by
 * exec, which would leave the mock a child of the CLI and keep opencode from exiting — and stops the mock after.
 */
function withMockProvider(argv: string[]): string[] {
  const script = [
    `"$MOCK_NODE" "$MOCK_SCRIPT" 0 "$MOCK_READY" </dev/null 2>"$MOCK_LOG" & mock=$!`,
    'while [ ! -s "$MOCK_READY" ]; do sleep 0.05; done',
    'MOCK_PROVIDER_URL="http://127.0.0.1:$(cat "$MOCK_READY")"; export MOCK_PROVIDER_URL',
    'for v in $MOCK_URL_VARS; do export "$v=$MOCK_PROVIDER_URL"; done',
    'for f in $MOCK_TEMPLATES; do sed -i "s|@MOCK_PROVIDER_URL@|$MOCK_PROVIDER_URL|g" "$f"; done',
    'unset MOCK_NODE MOCK_SCRIPT MOCK_READY MOCK_LOG MOCK_URL_VARS MOCK_TEMPLATES',
    '"$@"; rc=$?; kill $mock; exit $rc',
  ].join('\n');
  return ['sh', '-c', script, 'sh', ...argv];
}

/** The tool names the CLI offered the model, over every request the mock logged (title requests offer none). */
function offeredTools(logFile: string): MockLog {
  let text = '';
  try {
    text = readFileSync(logFile, 'utf8');
  } catch {
    return { requests: 0, tools: new Set(), toolResults: [] };
  }
  // Model requests only: claude first sends a HEAD to see whether the API is reachable.
  const lines = text.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as { method: string; tools: string[]; toolResults: MockLog['toolResults'] });
  const requests = lines.filter((l) => l.method === 'POST');
  const tools = new Set<string>();
  for (const r of requests) for (const t of r.tools) tools.add(t);
  return { requests: requests.length, tools, toolResults: requests.flatMap((r) => r.toolResults) };
}

interface MockLog {
  requests: number;
  tools: Set<string>;
  toolResults: Array<{ isError: boolean; text: string }>;
}

/** What is wrong with the offered tools for a variant, or nothing. */
function toolComplaints(variant: Variant, offered: Set<string>): string[] {
  const complaints: string[] = [];
  for (const t of variant.offers ?? []) if (!offered.has(t)) complaints.push(`${t} not offered`);
  if (variant.offersOnly) for (const t of offered) if (!variant.offersOnly.includes(t)) complaints.push(`${t} offered but not granted`);
  for (const t of variant.withholds ?? []) if (offered.has(t)) complaints.push(`${t} offered but not granted`);
  return complaints;
}

interface RunResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  timedOut: boolean;
  stoppedEarly: boolean;
  stdout: string;
  stderr: string;
  ms: number;
  /** Against the mock provider: what the CLI asked it. */
  mock?: MockLog;
}

function contextFor(cli: CliName, variant: Variant): InvocationContext {
  mkdirSync(runsDir, { recursive: true, mode: 0o700 });
  // Private (0700) and below no world-writable directory: Gemini ignores settings files anywhere else.
  const scratchDir = mkdtempSync(path.join(runsDir, `${cli}-`));
  const systemPromptFile = path.join(scratchDir, 'system-prompt.md');
  writeFileSync(systemPromptFile, BODY, { mode: 0o600 });
  const agent: FrozenAgent = {
    name: 'argv-check',
    description: 'real CLI argv check',
    backend: cli as Backend,
    permissions: 'edit',
    env: [],
    delegate: variant.delegate ?? false,
    body: BODY,
    source: 'operator',
    path: '/agents/argv-check.md',
    sha256: '0'.repeat(64),
    trusted: true,
    bin: installs[cli].bin!,
    ...variant.agent,
  };
  return {
    agent,
    ...(variant.model ? { model: variant.model } : {}),
    systemPromptFile,
    taskFile: path.join(scratchDir, 'task.txt'),
    scratchDir,
    ...(variant.delegate
      ? { delegateServer: { command: process.execPath, args: ['-e', 'setTimeout(() => {}, 1000)'], env: { SUBAGENTS_DEPTH: '1', SUBAGENTS_BUDGET: 'x'.repeat(32) } } }
      : {}),
  };
}

/** Starts the invocation as the runner would (files, env, stdin), minus credentials, and bounds it. */
function runInvocation(
  cli: CliName,
  ctx: InvocationContext,
  inv: Invocation,
  { mock = false, timeoutMs = mock ? MOCK_RUN_TIMEOUT_MS : RUN_TIMEOUT_MS, toolCall, workDir }: { timeoutMs?: number; mock?: boolean; toolCall?: ToolCheck['call']; workDir?: string } = {},
): Promise<RunResult> {
  for (const file of inv.files ?? []) {
    mkdirSync(path.dirname(file.path), { recursive: true, mode: 0o700 });
    writeFileSync(file.path, file.content, { mode: 0o600 });
  }
  if (inv.taskVia === 'file') writeFileSync(ctx.taskFile, TASK, { mode: 0o600 });
  const home = mkdtempSync(path.join(os.tmpdir(), `real-cli-home-${cli}-`));
  // A given working directory is the caller's to look into afterwards (and to remove).
  const cwd = workDir ?? mkdtempSync(path.join(os.tmpdir(), `real-cli-cwd-${cli}-`));
  const tmp = mkdtempSync(path.join(os.tmpdir(), `real-cli-tmp-${cli}-`));
  chmodSync(tmp, 0o700);
  const env: Record<string, string> = {
    HOME: home,
    PATH: `${path.dirname(process.execPath)}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin`,
    LANG: 'C.UTF-8',
    TERM: 'dumb',
    TMPDIR: tmp,
    NO_COLOR: '1',
    SUBAGENTS_SYSTEM_PROMPT_FILE: ctx.systemPromptFile,
    ...inv.env,
  };
  let argv = inv.argv;
  const mockLog = path.join(ctx.scratchDir, 'mock-provider.log');
  if (mock) {
    Object.assign(env, MOCK_SETUP[cli]!(home), {
      MOCK_NODE: process.execPath,
      MOCK_SCRIPT: MOCK_PROVIDER,
      MOCK_READY: path.join(ctx.scratchDir, 'mock-provider.port'),
      MOCK_LOG: mockLog,
      ...(toolCall ? { MOCK_TOOL_CALL: JSON.stringify(toolCall) } : {}),
    });
    argv = withMockProvider(argv);
  }
  const [command, ...args] = [...NO_NETWORK_PREFIX, ...argv];
  const started = Date.now();
  return new Promise((resolve) => {
    const child = spawn(command!, args, { cwd, env, detached: true, stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    let timedOut = false;
    let stoppedEarly = false;
    const killGroup = (signal: NodeJS.Signals) => {
      try {
        process.kill(-child.pid!, signal);
      } catch {
        // Already gone.
      }
    };
    const stop = () => {
      killGroup('SIGTERM');
      setTimeout(() => killGroup('SIGKILL'), KILL_GRACE_MS).unref();
    };
    const onData = () => {
      // Against the mock the run goes to its end: the answer is what is checked.
      const marker = mock ? undefined : PAST_ARGV[cli];
      if (marker && !stoppedEarly && marker.test(stdout)) {
        stoppedEarly = true;
        stop();
      }
    };
    child.stdout.on('data', (c: Buffer) => {
      stdout = (stdout + c.toString('utf8')).slice(-256 * 1024);
      onData();
    });
    child.stderr.on('data', (c: Buffer) => {
      stderr = (stderr + c.toString('utf8')).slice(-256 * 1024);
    });
    child.stdin.on('error', () => {}); // The CLI may exit before reading its task.
    child.stdin.end(inv.taskVia === 'stdin' ? TASK : '');
    const timer = setTimeout(() => {
      timedOut = true;
      stop();
    }, timeoutMs);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      killGroup('SIGKILL'); // Nothing of the run outlives it.
      for (const dir of workDir ? [home, tmp] : [home, cwd, tmp]) rmSync(dir, { recursive: true, force: true });
      resolve({ code, signal, timedOut, stoppedEarly, stdout, stderr, ms: Date.now() - started, ...(mock ? { mock: offeredTools(mockLog) } : {}) });
    });
  });
}

function summary(r: RunResult): string {
  const tail = `${r.stdout}\n${r.stderr}`.replace(/\s+/g, ' ').trim().slice(-300);
  const offered = r.mock ? ` offered=[${[...r.mock.tools].sort().join(' ')}] requests=${r.mock.requests}` : '';
  return `exit=${r.code} signal=${r.signal} timedOut=${r.timedOut} early=${r.stoppedEarly} ${r.ms}ms${offered} :: ${tail}`;
}

for (const cli of Object.keys(VARIANTS) as CliName[]) {
  const install = installs[cli];
  describe.skipIf(!install.bin)(`real ${cli} ${install.version} accepts the argv its adapter builds`, () => {
    const adapter = adapterFor(cli as Backend)!;

    describe.runIf(MOCK_SETUP[cli])('against a mock provider', { timeout: TEST_TIMEOUT_MS }, () => {
      for (const variant of VARIANTS[cli]) {
        it(`${variant.name}: answers, offering the model exactly the granted tools`, async () => {
          const ctx = contextFor(cli, variant);
          const inv = adapter.buildInvocation(ctx);
          expect(inv.argv.join('\n')).not.toContain(TASK);
          const result = await runInvocation(cli, ctx, inv, { mock: true });
          process.stderr.write(`[real-cli] ${cli} / ${variant.name} (mock): ${summary(result)}\n`);
          const output = `${result.stdout}\n${result.stderr}`;
          for (const complaint of ARGV_COMPLAINTS) expect(output, summary(result)).not.toMatch(complaint);
          expect(result.timedOut, summary(result)).toBe(false);
          if (refusedAsRoot(cli, variant)) {
            // The documented limit (agents and doctor warn about it): nothing reaches the provider.
            expect(result.code, summary(result)).not.toBe(0);
            expect(output).toMatch(/root\/sudo/);
            return;
          }
          expect(result.code, summary(result)).toBe(0);
          const parser = adapter.createParser!();
          for (const line of result.stdout.split('\n')) parser.onLine(line);
          const parsed = parser.finish(result.code);
          expect(parsed, summary(result)).toMatchObject({ isError: false, text: MOCK_ANSWER });
          expect(parsed.usage?.outputTokens).toBeGreaterThan(0);
          expect(result.mock!.requests).toBeGreaterThan(0);
          expect(toolComplaints(variant, result.mock!.tools), [...result.mock!.tools].join(' ')).toEqual([]);
        });
      }

      for (const check of TOOL_CHECKS[cli] ?? []) {
        it(`tool call: ${check.name}`, async () => {
          const variant: Variant = { name: check.name, agent: check.agent };
          const ctx = contextFor(cli, variant);
          // Commands work inside the working directory: opencode refuses paths outside it whenever there is a list.
          const workDir = mkdtempSync(path.join(ctx.scratchDir, 'cwd-'));
          const outside = mkdtempSync(path.join(ctx.scratchDir, 'outside-'));
          const fill = (text: string) => text.replaceAll('{cwd}', workDir).replaceAll('{outside}', outside);
          const call = JSON.parse(fill(JSON.stringify(check.call))) as ToolCheck['call'];
          const result = await runInvocation(cli, ctx, adapter.buildInvocation(ctx), { mock: true, toolCall: call, workDir });
          process.stderr.write(`[real-cli] ${cli} / tool call ${check.name} (mock): ${summary(result)} results=${JSON.stringify(result.mock!.toolResults).slice(0, 300)}\n`);
          expect(result.code, summary(result)).toBe(0);
          // The CLI answered the call (ran it or refused it) and went on to the final answer.
          expect(result.mock!.toolResults, summary(result)).toHaveLength(1);
          const [toolResult] = result.mock!.toolResults;
          expect(toolResult!.isError, toolResult!.text).toBe(!check.runs);
          if (check.result) expect(toolResult!.text).toMatch(check.result);
          if (check.creates) expect(existsSync(fill(check.creates)), toolResult!.text).toBe(check.runs);
        });
      }

      // Only opencode takes its permissions from a config value that could be broken without a word.
      if (cli === 'opencode') it('negative control: a broken permission config is accepted silently, but shows in the tools offered', async () => {
        const variant = VARIANTS[cli][0]!;
        const ctx = contextFor(cli, variant);
        const inv = adapter.buildInvocation(ctx);
        // An unknown action: opencode neither complains nor fails (nor for invalid JSON) — it falls back to its defaults.
        inv.env = { ...inv.env, OPENCODE_PERMISSION: '{"bash":"bogus"}' };
        const result = await runInvocation(cli, ctx, inv, { mock: true });
        process.stderr.write(`[real-cli] ${cli} / broken permission control (mock): ${summary(result)}\n`);
        expect(result.code, summary(result)).toBe(0);
        expect(toolComplaints(variant, result.mock!.tools)).toContain('bash offered but not granted');
      });
    });

    (CONCURRENT[cli] ? describe.concurrent : describe)('without credentials or network', { timeout: TEST_TIMEOUT_MS }, () => {
      // A CLI that runs against the mock provider gets only the unknown-flag control offline.
      for (const variant of MOCK_ONLY[cli] ? [] : VARIANTS[cli]) {
        it(variant.name, async () => {
          const ctx = contextFor(cli, variant);
          const inv = adapter.buildInvocation(ctx);
          expect(inv.argv.join('\n')).not.toContain(TASK);
          const result = await runInvocation(cli, ctx, inv);
          process.stderr.write(`[real-cli] ${cli} / ${variant.name}: ${summary(result)}\n`);
          const output = `${result.stdout}\n${result.stderr}`;
          for (const complaint of ARGV_COMPLAINTS) expect(output, summary(result)).not.toMatch(complaint);
          if (!result.timedOut && !result.stoppedEarly) {
            expect(result.code, summary(result)).not.toBe(0);
            expect(output, summary(result)).toMatch(EXPECTED_FAILURE);
          }
          // The parser turns whatever the CLI printed into a failed step.
          const parser = adapter.createParser!();
          for (const line of result.stdout.split('\n')) parser.onLine(line);
          const parsed = parser.finish(result.code);
          expect(parsed.isError).toBe(true);
          expect(parsed.errorMessage).toBeTruthy();
        });
      }

      it('negative control: an unknown flag is reported as such', async () => {
        const ctx = contextFor(cli, VARIANTS[cli][0]!);
        const inv = adapter.buildInvocation(ctx);
        inv.argv.splice(FLAG_SLOT[cli], 0, '--definitely-not-a-flag');
        const result = await runInvocation(cli, ctx, inv, { timeoutMs: CONTROL_TIMEOUT_MS });
        process.stderr.write(`[real-cli] ${cli} / negative control: ${summary(result)}\n`);
        expect(result.timedOut, summary(result)).toBe(false);
        expect(ARGV_COMPLAINTS.some((re) => re.test(`${result.stdout}\n${result.stderr}`)), summary(result)).toBe(true);
      });
    });
  });
}
