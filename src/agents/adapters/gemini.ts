import path from 'node:path';
import type { BackendAdapter, InvocationContext, Invocation, OutputParser, ParsedResult, Permission, Usage } from '../types.js';
import {
  DELEGATE_SERVER_NAME,
  TextBuffer,
  allowedTools,
  compactUsage,
  dedupe,
  explicitModel,
  firstInsecureAncestor,
  isRecord,
  num,
  parseJsonLine,
  shortError,
  str,
} from './shared.js';

/**
 * Gemini CLI (`@google/gemini-cli`): `gemini --output-format stream-json … -p ""`, headless; the task on stdin
 * (the CLI reads piped stdin and appends the empty `-p` prompt to it).
 *
 * Gemini has no flag that appends to its system prompt (GEMINI_SYSTEM_MD replaces it). The body is delivered as a
 * context file (`GEMINI.md`, the CLI's documented memory mechanism, rendered into the system instruction) in the
 * step's scratch directory, loaded through `context.includeDirectories` + `loadMemoryFromIncludeDirectories` of a
 * settings file named by GEMINI_CLI_SYSTEM_SETTINGS_PATH. That settings layer wins over user and workspace
 * settings and also carries the tool restrictions and the delegate MCP server.
 */

const READ_ONLY_TOOLS = ['read_file', 'read_many_files', 'list_directory', 'glob', 'grep_search', 'google_web_search', 'web_fetch'] as const;
const EDIT_TOOLS = [...READ_ONLY_TOOLS, 'write_file', 'replace'] as const;
/** Tools that change the machine. Excluded (a deny rule above user allow rules) whenever the level or list forbids them. */
const WRITE_CAPABLE_TOOLS = ['run_shell_command', 'write_file', 'replace', 'save_memory', 'invoke_agent'] as const;

const APPROVAL_MODE: Record<Permission, string> = {
  // Headless Gemini refuses any call that would need confirmation; `plan` is not used because headless plan mode
  // leaves itself and goes on to implement.
  'read-only': 'default',
  'edit': 'auto_edit',
  'full': 'yolo',
};

export const SETTINGS_FILE = 'gemini-settings.json';
export const CONTEXT_FILE = 'GEMINI.md';

export const geminiAdapter: BackendAdapter = {
  backend: 'gemini',
  binName: 'gemini',
  credentialEnv: [
    'GEMINI_API_KEY',
    'GOOGLE_API_KEY',
    'GOOGLE_GENAI_USE_VERTEXAI',
    'GOOGLE_GENAI_USE_GCA',
    'GOOGLE_CLOUD_PROJECT',
    'GOOGLE_CLOUD_PROJECT_ID',
    'GOOGLE_CLOUD_LOCATION',
    'GOOGLE_CLOUD_QUOTA_PROJECT',
    'GOOGLE_CLOUD_ACCESS_TOKEN',
    'GOOGLE_APPLICATION_CREDENTIALS',
    'GOOGLE_GEMINI_BASE_URL',
    'GOOGLE_VERTEX_BASE_URL',
    'GEMINI_MODEL',
    'GEMINI_CLI_HOME',
    'CLOUD_SHELL',
  ],
  supportsDelegate: true,
  versionArgs: ['--version'],
  buildInvocation: buildGeminiInvocation,
  createParser: () => new GeminiParser(),
};

function buildGeminiInvocation(ctx: InvocationContext): Invocation {
  const { agent } = ctx;
  const insecure = firstInsecureAncestor(ctx.scratchDir);
  if (insecure !== undefined) {
    // Gemini silently skips a settings file below a group/world-writable directory; the agent would then run
    // without its system prompt and tool restrictions. Refuse rather than run it unrestricted.
    throw new Error(
      `gemini ignores settings below the group/world-writable directory ${insecure}; put SUBAGENTS_HOME in a private directory`,
    );
  }
  const settingsPath = path.join(ctx.scratchDir, SETTINGS_FILE);
  const files: NonNullable<Invocation['files']> = [
    { path: settingsPath, content: `${JSON.stringify(geminiSettings(ctx), null, 2)}\n` },
  ];
  if (agent.body.trim() !== '') files.push({ path: path.join(ctx.scratchDir, CONTEXT_FILE), content: agent.body });

  const argv = [
    agent.bin,
    '--output-format',
    'stream-json',
    // Headless runs refuse untrusted folders outright; the run's cwd was already checked against the roots.
    '--skip-trust',
    '--approval-mode',
    APPROVAL_MODE[agent.permissions],
  ];
  const model = explicitModel(ctx);
  if (model) argv.push('--model', model);
  // `-p ""` forces headless mode; the task comes from stdin, to which the (empty) prompt is appended.
  argv.push('--prompt', '');
  return { argv, taskVia: 'stdin', env: { GEMINI_CLI_SYSTEM_SETTINGS_PATH: settingsPath }, files };
}

export function geminiSettings(ctx: InvocationContext): Record<string, unknown> {
  const { agent } = ctx;
  const levelTools = agent.permissions === 'read-only' ? READ_ONLY_TOOLS : agent.permissions === 'edit' && agent.tools ? EDIT_TOOLS : undefined;
  const core = allowedTools(agent.tools, levelTools);
  const exclude = excludedTools(agent.permissions, core);
  const tools: Record<string, unknown> = { exclude };
  if (core !== undefined) {
    // tools.core is an allowlist (everything else is denied by policy); the delegate server's tools must be on it.
    tools.core = ctx.delegateServer ? [...core, `mcp_${DELEGATE_SERVER_NAME}_*`] : core;
  }
  const settings: Record<string, unknown> = {
    context: { includeDirectories: [ctx.scratchDir], loadMemoryFromIncludeDirectories: true },
    tools,
  };
  if (ctx.delegateServer) {
    const { command, args, env } = ctx.delegateServer;
    // trust: its tools run without confirmation (headless cannot confirm).
    settings.mcpServers = { [DELEGATE_SERVER_NAME]: { command, args, env, trust: true } };
  }
  return settings;
}

function excludedTools(permission: Permission, core: string[] | undefined): string[] {
  const forbidden: string[] =
    permission === 'read-only' ? [...WRITE_CAPABLE_TOOLS] : permission === 'edit' ? ['run_shell_command', 'invoke_agent'] : [];
  // A user's `tools.allowed` outranks the core allowlist; an exclude outranks both.
  if (core !== undefined) forbidden.push(...WRITE_CAPABLE_TOOLS.filter((t) => !core.includes(t)));
  return dedupe(forbidden);
}

/**
 * Stream-json: assistant `message` deltas, `tool_use`, non-fatal `error` events and one final `result` with
 * `status` and `stats`. Like Gemini's own JSON mode, the answer is the text after the last tool call (falling back
 * to the text before it when the model said nothing after).
 */
class GeminiParser implements OutputParser {
  private readonly current = new TextBuffer();
  private readonly beforeTool = new TextBuffer();
  private result: Record<string, unknown> | undefined;
  private lastError: string | undefined;

  onLine(line: string): void {
    const event = parseJsonLine(line);
    if (!event) return;
    switch (event.type) {
      case 'message':
        if (event.role === 'assistant') {
          const content = str(event.content) ?? '';
          if (event.delta === true) this.current.append(content);
          else this.current.set(content);
        }
        break;
      case 'tool_use':
        if (!this.current.empty) {
          this.beforeTool.set(this.current.value());
          this.current.reset();
        }
        break;
      case 'error':
        if (event.severity !== 'warning') this.lastError = str(event.message) ?? this.lastError;
        break;
      case 'result':
        this.result = { status: event.status, error: event.error, stats: event.stats };
        break;
    }
  }

  finish(exitCode: number | null): ParsedResult {
    const text = this.current.empty ? this.beforeTool.value() : this.current.value();
    const result = this.result;
    if (!result) {
      return {
        text,
        isError: true,
        errorMessage: shortError(this.lastError ?? `gemini ended without a result (exit ${exitCode})`),
        ...(this.lastError === undefined ? { reasonUnknown: true } : {}),
      };
    }
    const parsed: ParsedResult = { text, isError: result.status !== 'success' };
    if (parsed.isError) {
      const reason = isRecord(result.error) ? str(result.error.message) : undefined;
      parsed.errorMessage = shortError(reason ?? this.lastError ?? `gemini reported status ${String(result.status)}`);
      if (reason === undefined && this.lastError === undefined) parsed.reasonUnknown = true;
    }
    const usage = geminiUsage(result.stats);
    if (usage) parsed.usage = usage;
    return parsed;
  }
}

function geminiUsage(stats: unknown): Usage | undefined {
  if (!isRecord(stats)) return undefined;
  // input_tokens is the prompt size including cached tokens, `cached` the part served from cache and `input`
  // the rest (Gemini computes it as prompt − cached).
  const prompt = num(stats.input_tokens);
  const cached = num(stats.cached);
  const uncached = num(stats.input) ?? (prompt !== undefined && cached !== undefined ? Math.max(0, prompt - cached) : prompt);
  return compactUsage({
    inputTokens: uncached,
    outputTokens: num(stats.output_tokens),
    cacheReadTokens: cached,
  });
}
