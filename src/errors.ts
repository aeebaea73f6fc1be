/** The closed set of refusal codes a tool call can answer with (docs/contract.md, "Tools"). */
export const ERROR_CODES = [
  'INVALID_INPUT', 'UNKNOWN_AGENT', 'AGENT_UNAVAILABLE', 'CWD_NOT_ALLOWED', 'CAPACITY_EXHAUSTED', 'FANOUT_EXHAUSTED',
  'DEPTH_EXCEEDED', 'HANDSHAKE_FAILED', 'RUN_NOT_FOUND', 'NOT_A_CHAIN', 'RUN_NOT_ACTIVE', 'RUN_ACTIVE', 'BUSY',
  'STATE_CORRUPT', 'PLATFORM_UNSUPPORTED', 'INTERNAL',
] as const;
export type ErrorCode = (typeof ERROR_CODES)[number];

/** Codes a run that ended badly carries in its `error`. */
export const RUN_ERROR_CODES = ['STEP_FAILED', 'TIMEOUT', 'CANCELLED', 'PARENT_ENDED', 'RUNNER_LOST', 'HANDSHAKE_FAILED', 'QUEUE_TIMEOUT'] as const;
export type RunErrorCode = (typeof RUN_ERROR_CODES)[number];

/**
 * The one error class of the project. Its message is shown to the model as is, so it must never contain a prompt,
 * an environment value, agent output or a stack: say what was wrong, with numbers, and what to do next.
 */
/**
 * Marks a SubagentError in the global symbol registry, so that `instanceof` holds for one made by another copy of this
 * module: distributed mode's executor is bundled apart from the server (dist/distributed.js, scripts/bundle.mjs).
 */
const BRAND = Symbol.for('subagents-mcp.SubagentError');

export class SubagentError extends Error {
  override readonly name = 'SubagentError';
  constructor(readonly code: ErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    Object.defineProperty(this, BRAND, { value: true });
  }

  static override [Symbol.hasInstance](value: unknown): boolean {
    return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[BRAND] === true;
  }

  /** The text a refusal carries: the code first, so clients and models can branch on it. */
  get text(): string {
    return `${this.code}: ${this.message}`;
  }
}

export function isSubagentError(e: unknown, code?: ErrorCode): e is SubagentError {
  return e instanceof SubagentError && (code === undefined || e.code === code);
}

/** The errno code of a Node system error, if any. */
export function errnoCode(e: unknown): string | undefined {
  return typeof e === 'object' && e !== null && 'code' in e && typeof (e as { code: unknown }).code === 'string'
    ? (e as { code: string }).code
    : undefined;
}
