import type { BackendAdapter, InvocationContext, Invocation, OutputParser, ParsedResult, Permission, Usage } from '../types.js';
import { TextBuffer, addUsage, allowedTools, compactUsage, explicitModel, isRecord, num, parseJsonLine, shortError, str } from './shared.js';

/**
 * pi (`@mariozechner/pi-coding-agent`): `pi --mode json … -p`, the task on stdin (print mode reads piped stdin),
 * the body through `--append-system-prompt <file>` (pi reads the file when the argument names one).
 *
 * pi has no approval prompts and no MCP client: the permission level is enforced by the tool set alone
 * (`--tools` is an allowlist over built-in, extension and custom tools).
 */

const LEVEL_TOOLS: Record<Permission, readonly string[] | undefined> = {
  'read-only': ['read', 'grep', 'find', 'ls'],
  'edit': ['read', 'grep', 'find', 'ls', 'edit', 'write'],
  // The CLI's default set (read, bash, edit, write) plus whatever extensions add.
  'full': undefined,
};

export const piAdapter: BackendAdapter = {
  backend: 'pi',
  binName: 'pi',
  // The variables `pi --help` documents (provider keys, cloud credentials, config locations).
  credentialEnv: [
    'ANTHROPIC_API_KEY',
    'ANTHROPIC_OAUTH_TOKEN',
    'OPENAI_API_KEY',
    'AZURE_OPENAI_API_KEY',
    'AZURE_OPENAI_BASE_URL',
    'AZURE_OPENAI_RESOURCE_NAME',
    'AZURE_OPENAI_API_VERSION',
    'AZURE_OPENAI_DEPLOYMENT_NAME_MAP',
    'DEEPSEEK_API_KEY',
    'GEMINI_API_KEY',
    'GROQ_API_KEY',
    'CEREBRAS_API_KEY',
    'XAI_API_KEY',
    'FIREWORKS_API_KEY',
    'OPENROUTER_API_KEY',
    'AI_GATEWAY_API_KEY',
    'ZAI_API_KEY',
    'MISTRAL_API_KEY',
    'MINIMAX_API_KEY',
    'MOONSHOT_API_KEY',
    'OPENCODE_API_KEY',
    'KIMI_API_KEY',
    'CLOUDFLARE_API_KEY',
    'CLOUDFLARE_ACCOUNT_ID',
    'CLOUDFLARE_GATEWAY_ID',
    'XIAOMI_API_KEY',
    'XIAOMI_TOKEN_PLAN_CN_API_KEY',
    'XIAOMI_TOKEN_PLAN_AMS_API_KEY',
    'XIAOMI_TOKEN_PLAN_SGP_API_KEY',
    'AWS_PROFILE',
    'AWS_ACCESS_KEY_ID',
    'AWS_SECRET_ACCESS_KEY',
    'AWS_SESSION_TOKEN',
    'AWS_BEARER_TOKEN_BEDROCK',
    'AWS_REGION',
    'PI_CODING_AGENT_DIR',
    'PI_CODING_AGENT_SESSION_DIR',
    'PI_OFFLINE',
  ],
  supportsDelegate: false,
  versionArgs: ['--version'],
  buildInvocation: buildPiInvocation,
  createParser: () => new PiParser(),
};

function buildPiInvocation(ctx: InvocationContext): Invocation {
  const { agent } = ctx;
  const argv = [agent.bin, '--mode', 'json', '--append-system-prompt', ctx.systemPromptFile];
  const model = explicitModel(ctx);
  if (model) argv.push('--model', model);
  const tools = allowedTools(agent.tools?.map((t) => t.toLowerCase()), LEVEL_TOOLS[agent.permissions]);
  if (tools !== undefined) {
    // An empty list must mean "no tools", not "defaults": pi ignores an empty --tools value.
    if (tools.length === 0) argv.push('--no-tools');
    else argv.push('--tools', tools.join(','));
  }
  // `-p` last: pi takes the argument after -p as a message when it does not start with "-"; there is none.
  argv.push('-p');
  return { argv, taskVia: 'stdin' };
}

/**
 * JSON mode streams every session event; `message_end` of an assistant message carries its content, usage (with
 * cost) and stop reason. pi exits 0 even when the last message ended with `stopReason: "error"`, so that decides.
 * Usage is summed over all assistant messages (one per model call); only the last message's text is kept.
 */
class PiParser implements OutputParser {
  private readonly text = new TextBuffer();
  private usage: Usage | undefined;
  private cost: number | undefined;
  private sawAssistant = false;
  private stopReason: string | undefined;
  private errorMessage: string | undefined;
  private retryError: string | undefined;

  onLine(line: string): void {
    const event = parseJsonLine(line);
    if (!event) return;
    if (event.type === 'auto_retry_end' && event.success === false) {
      this.retryError = str(event.finalError);
      return;
    }
    if (event.type !== 'message_end' || !isRecord(event.message) || event.message.role !== 'assistant') return;
    const message = event.message;
    this.sawAssistant = true;
    this.stopReason = str(message.stopReason);
    this.errorMessage = str(message.errorMessage);
    this.text.set(textOf(message.content));
    if (isRecord(message.usage)) {
      const u = message.usage;
      this.usage = addUsage(
        this.usage,
        compactUsage({
          inputTokens: num(u.input),
          outputTokens: num(u.output),
          cacheReadTokens: num(u.cacheRead),
          cacheWriteTokens: num(u.cacheWrite),
        }),
      );
      const cost = isRecord(u.cost) ? num(u.cost.total) : undefined;
      if (cost !== undefined) this.cost = (this.cost ?? 0) + cost;
    }
  }

  finish(exitCode: number | null): ParsedResult {
    const result: ParsedResult = { text: this.text.value(), isError: false };
    if (!this.sawAssistant) {
      result.isError = true;
      result.errorMessage = shortError(this.retryError ?? `pi ended without an answer (exit ${exitCode})`);
      if (this.retryError === undefined) result.reasonUnknown = true;
    } else if (this.stopReason === 'error' || this.stopReason === 'aborted') {
      result.isError = true;
      result.errorMessage = shortError(this.errorMessage ?? this.retryError ?? `pi request ${this.stopReason}`);
      if (this.errorMessage === undefined && this.retryError === undefined) result.reasonUnknown = true;
    }
    if (this.usage) result.usage = this.usage;
    if (this.cost !== undefined) result.costUsd = this.cost;
    return result;
  }
}

function textOf(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content
    .filter((part): part is Record<string, unknown> => isRecord(part) && part.type === 'text')
    .map((part) => str(part.text) ?? '')
    .join('');
}
