import path from 'node:path';
import type { BackendAdapter, InvocationContext, Invocation, OutputParser, ParsedResult, Permission, Usage } from '../types.js';
import { DELEGATE_SERVER_NAME, TextBuffer, addUsage, compactUsage, explicitModel, isRecord, num, parseJsonLine, shortError, str } from './shared.js';

/**
 * opencode (`opencode-ai`): `opencode run --format json …`, the task on stdin (`run` reads piped stdin when no
 * message is given on argv).
 *
 * - System prompt: `instructions: [<file>]` of a config file named by OPENCODE_CONFIG (instruction files are
 *   appended to opencode's own prompt). The same file carries the delegate MCP server.
 * - Permissions: OPENCODE_PERMISSION, which opencode merges into the permission config after every config file
 *   (project ones included), so a repository's opencode.json cannot widen it. Rules are matched last-one-wins and a
 *   user's key keeps its place in the merge, so every known tool is named explicitly rather than relying on "*".
 * - `run` rejects every permission request that would need a prompt; `--auto` approves them (full only).
 */

/** Permission keys of opencode's built-in tools (write, patch and multiedit are governed by `edit`). */
const KNOWN_TOOLS = [
  'read', 'edit', 'glob', 'grep', 'list', 'bash', 'task', 'todowrite', 'todoread', 'webfetch', 'websearch',
  'codesearch', 'lsp', 'skill', 'external_directory',
] as const;
const READ_ONLY_TOOLS = ['read', 'glob', 'grep', 'list', 'todowrite', 'todoread', 'webfetch', 'websearch', 'codesearch', 'lsp'];
const EDIT_TOOLS = [...READ_ONLY_TOOLS, 'edit'];
const TOOL_ALIASES: Record<string, string> = { write: 'edit', patch: 'edit', multiedit: 'edit', apply_patch: 'edit' };

/** opencode's own default for reads (its build agent asks before reading .env files): kept when reads are allowed. */
const READ_RULE = { '*': 'allow', '*.env': 'deny', '*.env.*': 'deny', '*.env.example': 'allow' };

export const CONFIG_FILE = 'opencode.json';

export const opencodeAdapter: BackendAdapter = {
  backend: 'opencode',
  binName: 'opencode',
  credentialEnv: [
    'ANTHROPIC_API_KEY',
    'OPENAI_API_KEY',
    'GEMINI_API_KEY',
    'GOOGLE_GENERATIVE_AI_API_KEY',
    'GOOGLE_APPLICATION_CREDENTIALS',
    'GOOGLE_CLOUD_PROJECT',
    'VERTEX_LOCATION',
    'OPENROUTER_API_KEY',
    'GROQ_API_KEY',
    'XAI_API_KEY',
    'DEEPSEEK_API_KEY',
    'MISTRAL_API_KEY',
    'GITHUB_TOKEN',
    'AZURE_API_KEY',
    'AZURE_RESOURCE_NAME',
    'AWS_PROFILE',
    'AWS_ACCESS_KEY_ID',
    'AWS_SECRET_ACCESS_KEY',
    'AWS_SESSION_TOKEN',
    'AWS_BEARER_TOKEN_BEDROCK',
    'AWS_REGION',
    'OPENCODE_API_KEY',
    'OPENCODE_AUTH_CONTENT',
    'OPENCODE_CONFIG_DIR',
    'OPENCODE_DISABLE_MODELS_FETCH',
    'OPENCODE_MODELS_PATH',
  ],
  supportsDelegate: true,
  versionArgs: ['--version'],
  buildInvocation: buildOpencodeInvocation,
  createParser: () => new OpencodeParser(),
};

function buildOpencodeInvocation(ctx: InvocationContext): Invocation {
  const { agent } = ctx;
  const argv = [agent.bin, 'run', '--format', 'json'];
  const model = explicitModel(ctx);
  if (model) argv.push('--model', model);
  const permission = permissionConfig(agent.permissions, agent.tools, ctx.delegateServer !== undefined);
  if (agent.permissions === 'full') argv.push('--auto');

  const configPath = path.join(ctx.scratchDir, CONFIG_FILE);
  const env: Record<string, string> = { OPENCODE_CONFIG: configPath };
  if (permission) env.OPENCODE_PERMISSION = JSON.stringify(permission);
  return {
    argv,
    taskVia: 'stdin',
    env,
    files: [{ path: configPath, content: `${JSON.stringify(opencodeConfig(ctx), null, 2)}\n` }],
  };
}

function opencodeConfig(ctx: InvocationContext): Record<string, unknown> {
  const config: Record<string, unknown> = { $schema: 'https://opencode.ai/config.json' };
  if (ctx.agent.body.trim() !== '') config.instructions = [ctx.systemPromptFile];
  if (ctx.delegateServer) {
    const { command, args, env } = ctx.delegateServer;
    config.mcp = { [DELEGATE_SERVER_NAME]: { type: 'local', command: [command, ...args], environment: env, enabled: true } };
  }
  return config;
}

/** The OPENCODE_PERMISSION value, or undefined when opencode's defaults (everything allowed) are what `full` means. */
export function permissionConfig(
  level: Permission,
  tools: string[] | undefined,
  delegate: boolean,
): Record<string, unknown> | undefined {
  const levelTools = level === 'read-only' ? READ_ONLY_TOOLS : level === 'edit' ? EDIT_TOOLS : undefined;
  let allowed: Set<string> | undefined;
  // `bash(git *)`: the tool allowed only where its pattern matches (opencode's object form of a rule).
  const patterns = new Map<string, string[]>();
  if (tools !== undefined) {
    allowed = new Set();
    for (const entry of tools) {
      const { name, pattern } = splitEntry(entry);
      if (levelTools && !levelTools.includes(name)) continue;
      if (pattern === undefined) allowed.add(name);
      else patterns.set(name, [...(patterns.get(name) ?? []), pattern]);
    }
  } else if (levelTools) {
    allowed = new Set(levelTools);
  }
  if (!allowed) return undefined;

  // "*" first: rules are matched last-one-wins, so the named tools below override it.
  const rules: Record<string, unknown> = { '*': 'deny' };
  const ruleFor = (tool: string): unknown => {
    if (allowed.has(tool)) return tool === 'read' ? READ_RULE : 'allow';
    const only = patterns.get(tool);
    return only ? Object.fromEntries([['*', 'deny'], ...only.map((p) => [p, 'allow'])]) : 'deny';
  };
  for (const tool of KNOWN_TOOLS) rules[tool] = ruleFor(tool);
  for (const tool of [...allowed, ...patterns.keys()]) if (!(tool in rules)) rules[tool] = ruleFor(tool);
  // Never wait on a question nobody can answer; leaving the working directory stays with the level's rules.
  rules.doom_loop = 'deny';
  if (delegate) rules[`${DELEGATE_SERVER_NAME}_*`] = 'allow';
  return rules;
}

/** `Bash(git *)` → bash with pattern `git *`; `write` → edit. */
function splitEntry(entry: string): { name: string; pattern?: string } {
  const m = /^([^(]+)\((.*)\)$/s.exec(entry.trim());
  const raw = (m ? m[1]! : entry).trim().toLowerCase();
  const name = TOOL_ALIASES[raw] ?? raw;
  return m ? { name, pattern: m[2]!.trim() } : { name };
}

/**
 * JSON events: `text` (a finished text part), `tool_use`, `step_start`, `step_finish` (per model step, with
 * tokens and cost) and `error` (a session error, which also makes opencode exit 1). The answer is the text parts
 * of the last step that produced text.
 */
class OpencodeParser implements OutputParser {
  private readonly text = new TextBuffer();
  private stepHasText = false;
  private usage: Usage | undefined;
  private cost: number | undefined;
  private error: string | undefined;

  onLine(line: string): void {
    const event = parseJsonLine(line);
    if (!event) return;
    const part = isRecord(event.part) ? event.part : undefined;
    switch (event.type) {
      case 'step_start':
        this.stepHasText = false;
        break;
      case 'text': {
        const content = part ? str(part.text) : undefined;
        if (content === undefined) break;
        // A new step that speaks replaces the previous step's words; parts within one step are joined.
        if (!this.stepHasText) this.text.reset();
        else this.text.append('\n');
        this.text.append(content);
        this.stepHasText = true;
        break;
      }
      case 'step_finish':
        if (part) this.addStep(part);
        break;
      case 'error':
        this.error = errorText(event.error);
        break;
    }
  }

  private addStep(part: Record<string, unknown>): void {
    const tokens = isRecord(part.tokens) ? part.tokens : undefined;
    if (tokens) {
      const cache = isRecord(tokens.cache) ? tokens.cache : {};
      this.usage = addUsage(
        this.usage,
        compactUsage({
          inputTokens: num(tokens.input),
          // Reasoning tokens are billed as output.
          outputTokens: sumDefined(num(tokens.output), num(tokens.reasoning)),
          cacheReadTokens: num(cache.read),
          cacheWriteTokens: num(cache.write),
        }),
      );
    }
    const cost = num(part.cost);
    if (cost !== undefined) this.cost = (this.cost ?? 0) + cost;
  }

  finish(exitCode: number | null): ParsedResult {
    const result: ParsedResult = { text: this.text.value(), isError: false };
    if (this.error !== undefined) {
      result.isError = true;
      result.errorMessage = shortError(this.error);
    } else if (this.text.empty && this.usage === undefined) {
      result.isError = true;
      result.errorMessage = `opencode ended without an answer (exit ${exitCode})`;
      result.reasonUnknown = true;
    }
    if (this.usage) result.usage = this.usage;
    if (this.cost !== undefined) result.costUsd = this.cost;
    return result;
  }
}

function sumDefined(a: number | undefined, b: number | undefined): number | undefined {
  return a === undefined && b === undefined ? undefined : (a ?? 0) + (b ?? 0);
}

/** `{ name, data: { message } }` as opencode prints session errors. */
function errorText(error: unknown): string {
  if (!isRecord(error)) return 'opencode reported an error';
  const data = isRecord(error.data) ? error.data : undefined;
  const message = data ? str(data.message) : undefined;
  const name = str(error.name);
  if (message && name && name !== 'UnknownError') return `${name}: ${message}`;
  return message ?? name ?? 'opencode reported an error';
}
