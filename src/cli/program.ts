import { Command, CommanderError, Option } from 'commander';
import { flagName } from '../config.js';
import { isSubagentError } from '../errors.js';
import { CliError, EXIT_FAILURE, EXIT_USAGE, cliSettings, operatorContext, resolveRunId } from './context.js';
import { SETTING_ENV_NAMES } from '../serve-flags.js';
import { distributedRuns } from '../manager/distributed/index.js';

type Flags = Record<string, string | string[] | undefined>;

const out = (s: string): void => { process.stdout.write(`${s}\n`); };

const SETTING_HELP: Record<string, string> = {
  SUBAGENTS_HOME: 'the state home shared by every server and runner of the user',
  SUBAGENTS_ROOTS: `directories a run's cwd must resolve inside (${process.platform === 'win32' ? ';' : ':'}-separated)`,
  SUBAGENTS_TRUST: 'extra project directories whose agent files are trusted',
  SUBAGENTS_MAX_ACTIVE_RUNS: 'active top-level runs per state home; 0 = unlimited (default 8)',
  SUBAGENTS_MAX_AGENTS: 'live agent processes per state home, nested included (default 16)',
  SUBAGENTS_MAX_SPAWNS_PER_RUN: 'agent processes one run tree may start in total (default 64)',
  SUBAGENTS_MAX_DEPTH: 'how deep agents may delegate (default 3)',
  SUBAGENTS_DEFAULT_TIMEOUT_MS: "a step's time limit when none is given (default 3600000)",
  SUBAGENTS_MAX_TIMEOUT_MS: 'the most any call or agent file may ask for (default 14400000)',
  SUBAGENTS_KILL_GRACE_MS: 'SIGTERM → SIGKILL grace (default 5000)',
  SUBAGENTS_SESSION_ID: "fixes this server's session id (at least 16 characters)",
  SUBAGENTS_AGENTS_PATH: 'extra directories of operator agent files',
  SUBAGENTS_PASS_ENV: 'extra variable names or globs passed to agents',
  SUBAGENTS_MAX_WAIT_MS: 'ceiling for status long-polls (default 45000)',
  SUBAGENTS_HANDSHAKE_TIMEOUT_MS: 'how long a launch waits for its runner to report ready (default 10000)',
  SUBAGENTS_MAX_OUTPUT_BYTES: "bytes of one step's output kept on disk (default 64 MiB)",
  SUBAGENTS_MAX_QUEUED: 'launches that may wait for a slot per state home; 0 = refuse at capacity (default 64)',
  SUBAGENTS_QUEUE_TIMEOUT_MS: 'how long a queued run waits for a slot before it ends QUEUE_TIMEOUT (default 3600000)',
  SUBAGENTS_REDIS_URL: 'distributed mode: the Redis (redis:// or rediss://) runs are queued in; a credential (also --redis)',
  SUBAGENTS_POOL: 'distributed mode: the queue a server submits to and a worker takes from (default "default")',
  SUBAGENTS_STALL_INTERVAL_MS: "distributed mode: a worker's lock and stall check period (default 30000)",
};

/** Adds every setting's flag (`--max-active-runs <value>`, env SUBAGENTS_MAX_ACTIVE_RUNS) to a command. */
function withSettingFlags(cmd: Command): Command {
  for (const env of SETTING_ENV_NAMES) {
    cmd.addOption(new Option(`${flagName(env)} <value>`, `${SETTING_HELP[env] ?? ''} [env ${env}]`));
  }
  cmd.addOption(new Option('--root <dir>', 'a root directory (repeatable; same as SUBAGENTS_ROOTS)').argParser((v: string, prev: string[] | undefined) => [...(prev ?? []), v]));
  cmd.addOption(new Option('--redis <url>', 'same as --redis-url'));
  return cmd;
}

function settingsHelp(): string {
  const rows = SETTING_ENV_NAMES.map((env) => `  ${`${flagName(env)} <value>`.padEnd(34)}${env}`);
  rows.push(`  ${'--root <dir>'.padEnd(34)}repeatable; same as SUBAGENTS_ROOTS`);
  rows.push(`  ${''.padEnd(34)}SUBAGENTS_BIN_<BACKEND>: absolute path of a backend's CLI (environment only)`);
  return rows.join('\n');
}

function withHome(cmd: Command): Command {
  return cmd.addOption(new Option('--home <dir>', 'the state home (default: $SUBAGENTS_HOME, else $XDG_STATE_HOME/subagents-mcp or ~/.local/state/subagents-mcp)'));
}

/** Commands that also work over Redis (docs/scale-out.md): `--redis` (or SUBAGENTS_REDIS_URL) switches them. */
function withRedis(cmd: Command): Command {
  return withHome(cmd).addOption(new Option('--redis <url>', 'distributed mode: read the runs in this Redis (SUBAGENTS_REDIS_URL)'));
}

/**
 * In distributed mode, runs `fn` with a context whose use cases go to Redis (and closes its connections after);
 * null in local mode.
 */
async function overRedis(cmd: Command, fn: (ctx: ReturnType<typeof operatorContext>) => Promise<number>): Promise<number | null> {
  const settings = cliSettings(settingFlags(cmd));
  if (!settings.redisUrl) return null;
  const ctx = { ...operatorContext(settings, process.env, { requireSafeHome: false }), distributed: distributedRuns(settings) };
  try {
    return await fn(ctx);
  } finally {
    await ctx.distributed?.close();
  }
}

/** Commander's parsed options back to the `{ '--max-active-runs': '4' }` shape loadSettings reads. */
function settingFlags(cmd: Command): Flags {
  const flags: Flags = {};
  for (const opt of cmd.options) {
    const v = cmd.getOptionValue(opt.attributeName()) as unknown;
    if (opt.long && (typeof v === 'string' || Array.isArray(v))) flags[opt.long] = v as string | string[];
  }
  return flags;
}

function operator(cmd: Command) {
  return operatorContext(cliSettings(settingFlags(cmd)));
}

const EXIT_HELP = `
Exit codes: 0 success; 1 failure (not found, refused, a followed run that did not complete); 2 usage error.
Every setting is read from its SUBAGENTS_* environment variable; a flag of the same name wins over it.
Human output goes to stdout, errors to stderr; --json output is stable for scripts.`;

/** Wraps an action so its returned number becomes the exit code. */
type Action = (...args: any[]) => Promise<number | 'serving'>;

export function buildProgram(version: string, setExit: (code: number | 'serving') => void): Command {
  const act = (fn: Action) => async (...args: unknown[]) => { setExit(await fn(...args)); };
  const program = new Command();
  program
    .name('subagents-mcp')
    .description('An MCP stdio server that runs agent CLIs as durable background runs. With no command (or `serve`) '
      + 'it speaks MCP on stdio; the other commands are for people at a terminal, over the same state home, and see '
      + 'the runs of every session.')
    .version(version, '-V, --version', 'print the version')
    .helpOption('-h, --help', 'show help for a command')
    .showHelpAfterError('(run with --help for usage)')
    .exitOverride()
    .configureOutput({ writeOut: (s) => process.stdout.write(s), writeErr: (s) => process.stderr.write(s) })
    .addHelpText('after', `
Settings (flags of serve and doctor; each flag wins over its environment variable):
${settingsHelp()}
${EXIT_HELP}

Examples:
  subagents-mcp demo                       a real MCP session with a bundled agent (no agent CLI needed)
  subagents-mcp doctor                     check the state home, limits, backends and agent files
  subagents-mcp runs --state active        what is running now, in every session
  subagents-mcp logs r-Ab3 --follow        the output of a run as it is written (a unique id prefix is enough)
  subagents-mcp gc --older-than 7d         remove runs that ended more than a week ago
  subagents-mcp watch --json               follow every run's events as JSON lines (resume with --since <cursor>)
  subagents-mcp ui                         open the live dashboard in a browser`);

  withSettingFlags(program.command('serve').description('speak MCP on stdio (the default when no command is given)'))
    .action(act(async (_o: unknown, cmd: Command) => {
      const { serve } = await import('../server-entry.js');
      await serve(settingFlags(cmd), version);
      return 'serving';
    }));

  withHome(program.command('demo').description('a real MCP client session against this server with a bundled example agent: launch, wait, output'))
    .action(act(async (_o: unknown, cmd: Command) => {
      const { runDemo } = await import('./demo.js');
      return runDemo(cliSettings(settingFlags(cmd)));
    }));

  withSettingFlags(program.command('doctor').description('state home safety, limits in force and their sources, backends, refused agent files, pass-through variables, runs that need attention'))
    .option('--json', 'machine-readable output')
    .action(act(async (o: { json?: boolean }, cmd: Command) => {
      const { doctorCommand } = await import('./doctor.js');
      const settings = cliSettings(settingFlags(cmd));
      const ctx = { ...operatorContext(settings, process.env, { requireSafeHome: false }), distributed: distributedRuns(settings) };
      try {
        return await doctorCommand(ctx, version, o, out);
      } finally {
        await ctx.distributed?.close();
      }
    }));

  withRedis(program.command('runs').description("every session's runs in the state home, newest first"))
    .option('--json', 'machine-readable output')
    .option('--state <states>', 'only these states (comma list of queued, starting, running, completed, failed, cancelled, active, terminal)')
    .option('--session <id>', 'only runs of this session (a prefix is enough)')
    .option('-a, --all', 'include dismissed runs')
    .action(act(async (o: { json?: boolean; state?: string; session?: string; all?: boolean }, cmd: Command) => {
      const remote = await overRedis(cmd, async (ctx) => (await import('./distributed.js')).distributedRuns(ctx, o, out));
      if (remote !== null) return remote;
      const { runsCommand } = await import('./runs.js');
      return runsCommand(operator(cmd), o, out);
    }));

  withRedis(program.command('show').description('the whole run: steps, children, evidence (pids, exit codes, byte counts) and the paths of its files'))
    .argument('<runId>', 'a run id, or a unique prefix of one')
    .option('--json', 'machine-readable output')
    .action(act(async (id: string, o: { json?: boolean }, cmd: Command) => {
      const remote = await overRedis(cmd, async (ctx) => (await import('./distributed.js')).distributedShow(ctx, id, out));
      if (remote !== null) return remote;
      const { runDetail, renderDetail } = await import('./show.js');
      const ctx = operator(cmd);
      const d = await runDetail(ctx, resolveRunId(ctx, id));
      if (o.json) out(JSON.stringify(d, null, 2));
      else renderDetail(d, out);
      return 0;
    }));

  withRedis(program.command('logs').description("a run's output; with --follow, as it is written until the run ends"))
    .argument('<runId>', 'a run id, or a unique prefix of one')
    .option('-f, --follow', 'keep printing until the run ends; the exit code is then 0 only if it completed')
    .option('--raw', "for CLIs whose output is parsed (claude, codex …): their raw machine-readable stream, which grows while they run")
    .action(act(async (id: string, o: { follow?: boolean; raw?: boolean }, cmd: Command) => {
      const remote = await overRedis(cmd, async (ctx) => (await import('./distributed.js')).distributedLogs(ctx, id, o, (s) => process.stdout.write(s)));
      if (remote !== null) return remote;
      const { logsCommand } = await import('./logs.js');
      const ctx = operator(cmd);
      return logsCommand(ctx, resolveRunId(ctx, id), o);
    }));

  withRedis(program.command('cancel').description('stop a run and its whole tree (SIGTERM, then SIGKILL after the grace), verified gone'))
    .argument('<runId>', 'a run id, or a unique prefix of one')
    .action(act(async (id: string, _o: unknown, cmd: Command) => {
      const remote = await overRedis(cmd, async (ctx) => (await import('./distributed.js')).distributedCancel(ctx, id, out));
      if (remote !== null) return remote;
      const { cancelCommand } = await import('./control.js');
      const ctx = operator(cmd);
      return cancelCommand(ctx, resolveRunId(ctx, id), out);
    }));

  withRedis(program.command('dismiss').description('hide an ended run from listings (it stays readable with show)'))
    .argument('<runId>', 'a run id, or a unique prefix of one')
    .option('--cancel', 'cancel the run first if it is still active')
    .action(act(async (id: string, o: { cancel?: boolean }, cmd: Command) => {
      const remote = await overRedis(cmd, async (ctx) => (await import('./distributed.js')).distributedDismiss(ctx, id, o, out));
      if (remote !== null) return remote;
      const { dismissCommand } = await import('./control.js');
      const ctx = operator(cmd);
      return dismissCommand(ctx, resolveRunId(ctx, id), o, out);
    }));

  withRedis(program.command('watch').description('one line per run event across the home, or across Redis with --redis (created, started, step ended, run ended …), as they happen, until interrupted; each line ends with a cursor to resume from'))
    .option('--session <id>', 'only runs of this session (a prefix is enough; nested runs count with their root)')
    .option('--since <cursor>', 'first replay the events after this cursor (from an earlier line), "start" for the whole history, or an age such as 10m')
    .option('--json', 'one JSON object per line')
    .action(act(async (o: { session?: string; since?: string; json?: boolean }, cmd: Command) => {
      const remote = await overRedis(cmd, async (ctx) => (await import('./watch.js')).watchRedis(ctx, o, out));
      if (remote !== null) return remote;
      const { watchCommand } = await import('./watch.js');
      return watchCommand(operator(cmd), o, out);
    }));

  withSettingFlags(program.command('ui').description('a live web dashboard of every run of the home (or, with --redis, of the Redis), on 127.0.0.1, reached through the printed URL (it carries a secret token)'))
    .option('--port <n>', 'the port to listen on (default: any free port)')
    .option('--no-open', 'print the URL only; do not open a browser')
    .action(act(async (o: { port?: string; open: boolean }, cmd: Command) => {
      const { uiCommand } = await import('./ui.js');
      const remote = await overRedis(cmd, (ctx) => uiCommand(ctx, o, out));
      if (remote !== null) return remote;
      return uiCommand(operator(cmd), o, out);
    }));

  withSettingFlags(program.command('worker').description('distributed mode: take runs from the pool\'s queue in Redis and run them on this machine (docs/scale-out.md); needs --redis'))
    .option('--concurrency <n>', 'runs at once on this machine (default 2)', '2')
    .option('--drain-timeout <ms>', 'on SIGTERM: how long running runs may finish before they are cancelled (default 60000)', '60000')
    .action(act(async (o: { concurrency: string; drainTimeout: string }, cmd: Command) => {
      const settings = cliSettings(settingFlags(cmd));
      if (!settings.redisUrl) throw new CliError('worker needs --redis <url> (or SUBAGENTS_REDIS_URL)', EXIT_USAGE);
      const concurrency = Number(o.concurrency);
      const drainTimeoutMs = Number(o.drainTimeout);
      if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > 256) throw new CliError('--concurrency must be a whole number from 1 to 256', EXIT_USAGE);
      if (!Number.isInteger(drainTimeoutMs) || drainTimeoutMs < 0) throw new CliError('--drain-timeout must be a whole number of ms', EXIT_USAGE);
      const { runWorker } = await import('../worker/worker.js');
      const roots = settings.explicitRoots ?? [];
      const home = settings.sources.home === 'default' ? null : settings.home;
      const code = await runWorker(settings, { concurrency, roots, home, drainTimeoutMs }, (line) => process.stderr.write(`subagents-mcp worker: ${line}\n`));
      // Drained and disconnected: what is left (file watches of the worker's home) must not keep it alive.
      process.exit(code);
    }));

  withRedis(program.command('gc').description('remove dismissed or ended runs past retention, with their files; never an active run'))
    .option('--older-than <age>', 'retention: runs that ended longer ago than this (30d, 12h, 90m, 2w)', '30d')
    .option('--dry-run', 'report what would be removed, remove nothing')
    .option('--branches', 'also delete the git branches (subagents/<runId>/…) of the isolated runs removed')
    .option('--json', 'machine-readable output')
    .action(act(async (o: { olderThan: string; dryRun?: boolean; json?: boolean; branches?: boolean }, cmd: Command) => {
      const remote = await overRedis(cmd, async (ctx) => (await import('./distributed.js')).distributedGc(ctx, o, out));
      if (remote !== null) return remote;
      const { gcCommand } = await import('./gc.js');
      return gcCommand(operator(cmd), o, out);
    }));

  return program;
}

/** Runs one command line; returns the process exit code. */
export async function runCli(argv: string[], version: string): Promise<number> {
  process.umask(0o077);
  process.stdout.on('error', (e: NodeJS.ErrnoException) => { if (e.code === 'EPIPE') process.exit(0); });
  let result = 0 as number | 'serving';
  const program = buildProgram(version, (code) => { result = code; });
  try {
    await program.parseAsync(argv, { from: 'user' });
  } catch (e) {
    if (e instanceof CommanderError) {
      if (e.code === 'commander.helpDisplayed' || e.code === 'commander.version' || e.code === 'commander.help') return 0;
      // Commander has already printed its message to stderr.
      return EXIT_USAGE;
    }
    if (e instanceof CliError) {
      process.stderr.write(`subagents-mcp: ${e.message}\n`);
      return e.exitCode;
    }
    if (isSubagentError(e)) {
      process.stderr.write(`subagents-mcp: ${e.text}\n`);
      return EXIT_FAILURE;
    }
    process.stderr.write(`subagents-mcp: ${(e as Error).message ?? String(e)}\n`);
    return EXIT_FAILURE;
  }
  if (result === 'serving') return typeof process.exitCode === 'number' ? process.exitCode : 0;
  return result;
}
