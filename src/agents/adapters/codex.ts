import type { BackendAdapter, InvocationContext, Invocation, OutputParser, ParsedResult, Permission, Usage } from '../types.js';
import { DELEGATE_SERVER_NAME, TextBuffer, addUsage, compactUsage, explicitModel, isRecord, num, parseJsonLine, shortError, str } from './shared.js';

/**
 * OpenAI Codex CLI (`@openai/codex`): `codex exec --json … -`, the task on stdin (`-`), JSONL thread events on stdout.
 * Config keys go through `-c key=<TOML value>` (the CLI's documented override of `~/.codex/config.toml`).
 */

const SANDBOX: Record<Permission, string> = {
  'read-only': 'read-only',
  // Writes inside the working directory (and temp dirs); no network for commands.
  'edit': 'workspace-write',
  'full': 'danger-full-access',
};

export const codexAdapter: BackendAdapter = {
  backend: 'codex',
  binName: 'codex',
  credentialEnv: [
    'OPENAI_API_KEY',
    'CODEX_API_KEY',
    'CODEX_HOME',
    'OPENAI_BASE_URL',
    'CODEX_CA_CERTIFICATE',
    'CODEX_SQLITE_HOME',
    'AZURE_OPENAI_API_KEY',
  ],
  supportsDelegate: true,
  versionArgs: ['--version'],
  buildInvocation: buildCodexInvocation,
  unsupported: (agent) => (agent.tools !== undefined ? CODEX_TOOLS_UNSUPPORTED : null),
  createParser: () => new CodexParser(),
};

const CODEX_TOOLS_UNSUPPORTED = 'codex cannot restrict tools: remove `tools` from the agent file and use `permissions` (read-only | edit | full)';

function buildCodexInvocation(ctx: InvocationContext): Invocation {
  const { agent } = ctx;
  if (agent.tools !== undefined) {
    // Codex has no per-tool allowlist for its built-in tools; honouring `tools` by ignoring it would leave the
    // agent unrestricted, so the step is refused instead (permissions map onto the sandbox).
    throw new Error(CODEX_TOOLS_UNSUPPORTED);
  }
  const argv = [
    agent.bin,
    'exec',
    '--json',
    '--color',
    'never',
    // Runs may target any directory under the roots, git repository or not.
    '--skip-git-repo-check',
    '--sandbox',
    SANDBOX[agent.permissions],
    // Nobody can answer an approval prompt: a command the sandbox refuses fails instead of waiting.
    '-c',
    'approval_policy="never"',
  ];
  if (agent.body.trim() !== '') {
    // Codex has no instructions-file option that appends (model_instructions_file replaces the base prompt);
    // developer_instructions is added as a developer message on top of Codex's own prompt.
    argv.push('-c', `developer_instructions=${tomlString(agent.body)}`);
  }
  const model = explicitModel(ctx);
  if (model) argv.push('--model', model);
  if (ctx.delegateServer) argv.push(...delegateConfig(ctx.delegateServer));
  // `-` last: read the task from stdin. Nothing after it, so no value can be taken for the prompt.
  argv.push('-');
  return { argv, taskVia: 'stdin' };
}

/**
 * The delegate server as `mcp_servers.subagents.*` overrides. Its environment is passed by name (`env_vars`), not by
 * value: the nesting variables hold a step secret, and argv is readable by every local user. The runner gives the
 * agent the same variables (docs/contract.md, "Nesting and isolation"), so Codex forwards them from its own environment.
 */
function delegateConfig(server: NonNullable<InvocationContext['delegateServer']>): string[] {
  const key = `mcp_servers.${DELEGATE_SERVER_NAME}`;
  const out = ['-c', `${key}.command=${tomlString(server.command)}`, '-c', `${key}.args=${tomlArray(server.args)}`];
  const names = Object.keys(server.env);
  if (names.length > 0) out.push('-c', `${key}.env_vars=${tomlArray(names)}`);
  return out;
}

/** A TOML basic string. JSON escapes are valid TOML except DEL and lone surrogates, which TOML forbids raw or escaped. */
export function tomlString(value: string): string {
  const wellFormed = value.replace(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, '\ufffd');
  return JSON.stringify(wellFormed).replace(/\u007f/g, '\\u007F');
}

function tomlArray(values: string[]): string {
  return `[${values.map(tomlString).join(', ')}]`;
}

/**
 * Codex prints `error` events for transient trouble too ("Reconnecting... 2/5"), so only `turn.failed` decides
 * failure; a stream that ends with neither `turn.completed` nor `turn.failed` is an error carrying the last message.
 */
class CodexParser implements OutputParser {
  private readonly text = new TextBuffer();
  private usage: Usage | undefined;
  private completed = false;
  private failure: string | undefined;
  private lastError: string | undefined;

  onLine(line: string): void {
    const event = parseJsonLine(line);
    if (!event) return;
    switch (event.type) {
      case 'item.completed': {
        const item = event.item;
        if (isRecord(item) && item.type === 'agent_message') this.text.set(str(item.text) ?? '');
        break;
      }
      case 'turn.completed':
        this.completed = true;
        this.usage = addUsage(this.usage, codexUsage(event.usage));
        break;
      case 'turn.failed':
        this.failure = (isRecord(event.error) ? str(event.error.message) : undefined) ?? 'turn failed';
        break;
      case 'error':
        this.lastError = str(event.message) ?? this.lastError;
        break;
    }
  }

  finish(exitCode: number | null): ParsedResult {
    const result: ParsedResult = { text: this.text.value(), isError: false };
    if (this.failure !== undefined) {
      result.isError = true;
      result.errorMessage = shortError(this.failure);
    } else if (!this.completed) {
      result.isError = true;
      result.errorMessage = shortError(this.lastError ?? `codex ended without completing its turn (exit ${exitCode})`);
      if (this.lastError === undefined) result.reasonUnknown = true;
    }
    if (this.usage) result.usage = this.usage;
    return result;
  }
}

function codexUsage(value: unknown): Usage | undefined {
  if (!isRecord(value)) return undefined;
  // input_tokens includes the cached ones; report them apart like the other backends do.
  const input = num(value.input_tokens);
  const cached = num(value.cached_input_tokens);
  return compactUsage({
    inputTokens: input !== undefined && cached !== undefined ? Math.max(0, input - cached) : input,
    outputTokens: num(value.output_tokens),
    cacheReadTokens: cached,
    cacheWriteTokens: num(value.cache_write_input_tokens),
  });
}
