import path from 'node:path';
import type { BackendAdapter, InvocationContext, Invocation, OutputParser, ParsedResult, Permission } from '../types.js';
import {
  DELEGATE_SERVER_NAME,
  allowedTools,
  capText,
  compactUsage,
  dedupe,
  explicitModel,
  isRecord,
  num,
  parseJsonLine,
  shortError,
  str,
} from './shared.js';

/**
 * Claude Code (`@anthropic-ai/claude-code`), print mode with the stream-json protocol:
 * `claude -p --output-format stream-json --verbose …`, the task on stdin, the body through
 * `--append-system-prompt-file` (accepted by 2.1.x though not listed in `--help`; `--bare` names it).
 */

/** Built-in tools that cannot change the workspace. Grep and Glob exist in 2.1.x only when asked for by name. */
const READ_ONLY_TOOLS = ['Read', 'Grep', 'Glob', 'WebFetch', 'WebSearch'] as const;
/** Tools that write files or run commands: denied outright at read-only, so a user's allow rule cannot re-enable them. */
const WRITE_TOOLS = ['Bash', 'Edit', 'Write', 'NotebookEdit'] as const;

const PERMISSION_MODE: Record<Permission, string> = {
  // dontAsk: anything not pre-approved is refused instead of waiting for a prompt nobody can answer.
  'read-only': 'dontAsk',
  'edit': 'acceptEdits',
  // Claude refuses this mode when run as root (unless IS_SANDBOX=1, which this server never sets).
  'full': 'bypassPermissions',
};

/** Built-in tools that edit files: one `Edit(…)` rule governs them all. */
const EDIT_TOOLS = ['Edit', 'Write', 'NotebookEdit', 'MultiEdit'];
/** An edit rule for the working directory and below: what acceptEdits approves, as an allow rule. */
const EDIT_IN_CWD = 'Edit(./**)';

/**
 * The `--permission-mode` of a run. With a `tools` list, every level uses dontAsk and approves exactly what the list
 * and level allow (see buildClaudeInvocation): bypassPermissions (full) would approve every use of a listed tool,
 * turning `Bash(git *)` into any command, and acceptEdits (edit) also approves file commands such as `rm`, `mkdir`
 * and `cp` in the working directory, whatever the list says.
 */
export function claudePermissionMode(permissions: Permission, tools: string[] | undefined): string {
  return tools !== undefined ? 'dontAsk' : PERMISSION_MODE[permissions];
}

/** Whether Claude would refuse this agent's runs when started as root (bypassPermissions under uid 0). */
export function claudeRefusesAsRoot(permissions: Permission, tools: string[] | undefined): boolean {
  return claudePermissionMode(permissions, tools) === 'bypassPermissions';
}

export const claudeAdapter: BackendAdapter = {
  backend: 'claude',
  binName: 'claude',
  credentialEnv: [
    'ANTHROPIC_API_KEY',
    'ANTHROPIC_AUTH_TOKEN',
    'CLAUDE_CODE_OAUTH_TOKEN',
    'ANTHROPIC_BASE_URL',
    'ANTHROPIC_CUSTOM_HEADERS',
    'ANTHROPIC_MODEL',
    'ANTHROPIC_SMALL_FAST_MODEL',
    'ANTHROPIC_DEFAULT_OPUS_MODEL',
    'ANTHROPIC_DEFAULT_SONNET_MODEL',
    'ANTHROPIC_DEFAULT_HAIKU_MODEL',
    'CLAUDE_CONFIG_DIR',
    'CLAUDE_CODE_USE_BEDROCK',
    'CLAUDE_CODE_USE_VERTEX',
    'CLAUDE_CODE_USE_FOUNDRY',
    'CLAUDE_CODE_SKIP_BEDROCK_AUTH',
    'CLAUDE_CODE_SKIP_VERTEX_AUTH',
    'CLAUDE_CODE_SKIP_FOUNDRY_AUTH',
    'ANTHROPIC_BEDROCK_BASE_URL',
    'AWS_REGION',
    'AWS_PROFILE',
    'AWS_ACCESS_KEY_ID',
    'AWS_SECRET_ACCESS_KEY',
    'AWS_SESSION_TOKEN',
    'AWS_BEARER_TOKEN_BEDROCK',
    'ANTHROPIC_VERTEX_PROJECT_ID',
    'ANTHROPIC_VERTEX_BASE_URL',
    'CLOUD_ML_REGION',
    'GOOGLE_APPLICATION_CREDENTIALS',
    'GOOGLE_CLOUD_PROJECT',
    'ANTHROPIC_FOUNDRY_API_KEY',
    'ANTHROPIC_FOUNDRY_RESOURCE',
    'ANTHROPIC_FOUNDRY_BASE_URL',
  ],
  supportsDelegate: true,
  versionArgs: ['--version'],
  buildInvocation: buildClaudeInvocation,
  createParser: () => new ClaudeParser(),
};

function buildClaudeInvocation(ctx: InvocationContext): Invocation {
  const { agent } = ctx;
  // `=` joins every value to its flag: a value can never be read as a flag, and Claude's variadic options
  // (--tools, --allowedTools, --mcp-config) cannot swallow the next argument.
  const argv = [
    agent.bin,
    '-p',
    '--output-format=stream-json',
    '--verbose',
    `--append-system-prompt-file=${ctx.systemPromptFile}`,
    `--permission-mode=${claudePermissionMode(agent.permissions, agent.tools)}`,
  ];
  const model = explicitModel(ctx);
  if (model) argv.push(`--model=${model}`);

  const readOnly = agent.permissions === 'read-only';
  const tools = allowedTools(agent.tools, readOnly ? READ_ONLY_TOOLS : undefined, baseToolName);
  const approve: string[] = [];
  if (tools !== undefined) {
    const builtins = dedupe(tools.filter((t) => !t.startsWith('mcp__')).map(baseToolName));
    argv.push(`--tools=${builtins.join(',')}`);
    // dontAsk refuses whatever is not approved here. At full every listed entry is approved, standing in for
    // bypassPermissions; at edit, a listed edit tool is approved in the working directory (standing in for
    // acceptEdits) and a narrowed entry such as `Bash(git *)` as written, so the tool stays restricted to it.
    if (agent.permissions === 'full') approve.push(...tools);
    else if (!readOnly) {
      for (const t of tools) {
        if (t.includes('(')) approve.push(t);
        else if (EDIT_TOOLS.includes(t)) approve.push(EDIT_IN_CWD);
      }
    }
    // An allowlist also covers MCP tools: load no MCP server but the delegate one.
    argv.push('--strict-mcp-config');
  }
  if (readOnly) argv.push(`--disallowedTools=${WRITE_TOOLS.join(',')}`);

  const files: Invocation['files'] = [];
  if (ctx.delegateServer) {
    const configPath = path.join(ctx.scratchDir, 'claude-mcp.json');
    files.push({ path: configPath, content: mcpConfigJson(ctx.delegateServer) });
    argv.push(`--mcp-config=${configPath}`);
    // Print mode cannot ask for approval: the delegate tools must be pre-approved or every call is refused.
    approve.push(`mcp__${DELEGATE_SERVER_NAME}`);
  }
  if (approve.length > 0) argv.push(`--allowedTools=${dedupe(approve).join(',')}`);
  return { argv, taskVia: 'stdin', ...(files.length > 0 ? { files } : {}) };
}

/** `Bash(git *)` → `Bash`: `--tools` takes plain names. */
function baseToolName(tool: string): string {
  const paren = tool.indexOf('(');
  return (paren === -1 ? tool : tool.slice(0, paren)).trim();
}

function mcpConfigJson(server: NonNullable<InvocationContext['delegateServer']>): string {
  return `${JSON.stringify(
    { mcpServers: { [DELEGATE_SERVER_NAME]: { type: 'stdio', command: server.command, args: server.args, env: server.env } } },
    null,
    2,
  )}\n`;
}

/**
 * Keeps only the last `result` line (the stream's final summary: answer, error flag, usage, cost) and the first
 * assistant error seen, for a stream that ends without a result.
 */
class ClaudeParser implements OutputParser {
  private result: Record<string, unknown> | undefined;
  private assistantError: string | undefined;

  onLine(line: string): void {
    const event = parseJsonLine(line);
    if (!event) return;
    if (event.type === 'result') {
      this.result = event;
    } else if (event.type === 'assistant' && this.assistantError === undefined && typeof event.error === 'string') {
      this.assistantError = event.error;
    }
  }

  finish(exitCode: number | null): ParsedResult {
    const result = this.result;
    if (!result) {
      const why = this.assistantError ? `: ${this.assistantError}` : '';
      return { text: '', isError: true, errorMessage: shortError(`claude ended without a result (exit ${exitCode})${why}`), ...(why ? {} : { reasonUnknown: true }) };
    }
    const text = capText(str(result.result) ?? '');
    const subtype = str(result.subtype);
    const isError = result.is_error === true || (subtype !== undefined && subtype !== 'success');
    const usage = isRecord(result.usage)
      ? compactUsage({
          inputTokens: num(result.usage.input_tokens),
          outputTokens: num(result.usage.output_tokens),
          cacheReadTokens: num(result.usage.cache_read_input_tokens),
          cacheWriteTokens: num(result.usage.cache_creation_input_tokens),
        })
      : undefined;
    const costUsd = num(result.total_cost_usd);
    const parsed: ParsedResult = { text, isError };
    if (isError) parsed.errorMessage = shortError(errorReason(result, text, subtype));
    if (usage) parsed.usage = usage;
    if (costUsd !== undefined) parsed.costUsd = costUsd;
    return parsed;
  }
}

function errorReason(result: Record<string, unknown>, text: string, subtype: string | undefined): string {
  if (text.trim() !== '') return text;
  const errors = Array.isArray(result.errors) ? result.errors.filter((e): e is string => typeof e === 'string') : [];
  if (errors.length > 0) return errors.join('; ');
  return `claude reported ${subtype ?? 'an error'}`;
}
