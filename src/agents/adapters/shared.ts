import fs from 'node:fs';
import path from 'node:path';
import type { InvocationContext, Usage } from '../types.js';

/** The name this server takes in a child CLI's MCP configuration (docs/contract.md, "What it is": MCP server name `subagents`). */
export const DELEGATE_SERVER_NAME = 'subagents';

/**
 * Most characters of final text a parser keeps. The answer is the one thing a parser must hold whole; past this the
 * rest is dropped with a marker, so a runaway agent cannot grow the runner's memory without bound.
 */
export const MAX_TEXT_CHARS = 8 * 1024 * 1024;

const MAX_ERROR_CHARS = 300;

/** A JSON object from one stdout line, or undefined for anything else (banners, blank lines, broken JSON). */
export function parseJsonLine(line: string): Record<string, unknown> | undefined {
  const trimmed = line.trim();
  if (!trimmed.startsWith('{')) return undefined;
  try {
    const value: unknown = JSON.parse(trimmed);
    return isRecord(value) ? value : undefined;
  } catch {
    return undefined;
  }
}

export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

export function str(value: unknown): string | undefined {
  return typeof value === 'string' ? value : undefined;
}

/** A finite, non-negative number, else undefined (CLIs sometimes print null or strings for counters). */
export function num(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isFinite(value) && value >= 0 ? value : undefined;
}

/** Drops undefined counters; undefined when nothing is left, so `usage` is absent rather than `{}`. */
export function compactUsage(usage: Usage): Usage | undefined {
  const out: Usage = {};
  for (const [k, v] of Object.entries(usage) as Array<[keyof Usage, number | undefined]>) {
    if (v !== undefined) out[k] = v;
  }
  return Object.keys(out).length > 0 ? out : undefined;
}

/** Adds counters field by field; a field stays undefined only when both sides lack it. */
export function addUsage(a: Usage | undefined, b: Usage | undefined): Usage | undefined {
  if (!a) return b;
  if (!b) return a;
  const sum = (x?: number, y?: number) => (x === undefined && y === undefined ? undefined : (x ?? 0) + (y ?? 0));
  return compactUsage({
    inputTokens: sum(a.inputTokens, b.inputTokens),
    outputTokens: sum(a.outputTokens, b.outputTokens),
    cacheReadTokens: sum(a.cacheReadTokens, b.cacheReadTokens),
    cacheWriteTokens: sum(a.cacheWriteTokens, b.cacheWriteTokens),
  });
}

/** Accumulates answer text up to MAX_TEXT_CHARS; what does not fit is counted, not kept. */
export class TextBuffer {
  private parts: string[] = [];
  private length = 0;
  private dropped = 0;

  append(text: string): void {
    const room = MAX_TEXT_CHARS - this.length;
    if (room <= 0) {
      this.dropped += text.length;
      return;
    }
    const kept = text.length > room ? text.slice(0, room) : text;
    this.parts.push(kept);
    this.length += kept.length;
    this.dropped += text.length - kept.length;
  }

  set(text: string): void {
    this.reset();
    this.append(text);
  }

  reset(): void {
    this.parts = [];
    this.length = 0;
    this.dropped = 0;
  }

  get empty(): boolean {
    return this.length === 0 && this.dropped === 0;
  }

  value(): string {
    const text = this.parts.join('');
    // Join once and keep the joined string, so repeated reads do not re-join many small parts.
    this.parts = [text];
    return this.dropped > 0 ? `${text}\n[subagents-mcp: ${this.dropped} more characters of output dropped]` : text;
  }
}

/** Keeps text bounded as a plain string (for one-shot values such as a result line). */
export function capText(text: string): string {
  if (text.length <= MAX_TEXT_CHARS) return text;
  return `${text.slice(0, MAX_TEXT_CHARS)}\n[subagents-mcp: ${text.length - MAX_TEXT_CHARS} more characters of output dropped]`;
}

// Shapes of credentials that CLIs sometimes echo in error texts (API keys, bearer tokens, key=value pairs).
const SECRET_PATTERNS: RegExp[] = [
  /\b(sk|pk|rk)-[A-Za-z0-9_-]{8,}/g,
  /\bsk-ant-[A-Za-z0-9_-]{8,}/g,
  /\bAIza[0-9A-Za-z_-]{20,}/g,
  /\bya29\.[0-9A-Za-z_-]{10,}/g,
  /\b(gh[pousr]_[A-Za-z0-9]{20,})/g,
  /\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]{8,}/gi,
  /\b([A-Za-z_]*(?:api[_-]?key|token|secret|password)[A-Za-z_]*)\s*[=:]\s*["']?[^\s"',;]{6,}/gi,
];

/** Replaces anything shaped like a credential in `text` (layout kept: usable on multi-line tails too). */
export function redactSecrets(text: string): string {
  for (const pattern of SECRET_PATTERNS) {
    text = text.replace(pattern, (match, name: string | undefined) =>
      name && /[=:]/.test(match) ? `${name}=[redacted]` : '[redacted]',
    );
  }
  return text;
}

/** A CLI's own error reason made short (one line, ≤ 300 chars) and stripped of anything shaped like a secret. */
export function shortError(message: string): string {
  const text = redactSecrets(message.replace(/\u001b\[[0-9;]*[A-Za-z]/g, '').replace(/\s+/g, ' ').trim());
  return text.length > MAX_ERROR_CHARS ? `${text.slice(0, MAX_ERROR_CHARS - 1)}…` : text;
}

const MAX_STDERR_REASON_CHARS = 200;

/**
 * The last non-empty line of a stderr tail as a short, redacted reason (≤ 200 chars), or undefined. Several CLIs
 * (gemini without auth, pi without a key) say why they failed only there, as their last words.
 */
export function stderrReason(tail: string): string | undefined {
  const line = tail.split(/\r?\n/).map((l) => l.replace(/\u001b\[[0-9;]*[A-Za-z]/g, '').trim()).filter((l) => l !== '').at(-1);
  if (line === undefined) return undefined;
  const text = shortError(line);
  return text.length > MAX_STDERR_REASON_CHARS ? `${text.slice(0, MAX_STDERR_REASON_CHARS - 1)}…` : text;
}

/** The model to name on argv: undefined for 'inherit' or nothing (the CLI picks its default). */
export function explicitModel(ctx: InvocationContext): string | undefined {
  const model = ctx.model ?? ctx.agent.model;
  if (model === undefined) return undefined;
  const trimmed = model.trim();
  return trimmed === '' || trimmed === 'inherit' ? undefined : trimmed;
}

/**
 * The tool names an agent may use: its `tools` list narrowed to what its permission level allows. `undefined` for
 * the level's own set (`levelTools`), or no restriction at all when that is undefined too.
 */
export function allowedTools(
  requested: string[] | undefined,
  levelTools: readonly string[] | undefined,
  normalize: (tool: string) => string = (t) => t,
): string[] | undefined {
  if (requested === undefined) return levelTools ? [...levelTools] : undefined;
  const names = requested.map((t) => t.trim()).filter((t) => t !== '');
  if (!levelTools) return dedupe(names);
  const allowed = new Set(levelTools.map(normalize));
  return dedupe(names.filter((t) => allowed.has(normalize(t))));
}

export function dedupe<T>(items: T[]): T[] {
  return [...new Set(items)];
}

/**
 * The first ancestor of `dir` (itself included) that group or others may write to, else undefined. Gemini CLI
 * silently ignores settings and policy files below such a directory (it checks every ancestor), so an adapter that
 * relies on one must know beforehand.
 */
export function firstInsecureAncestor(dir: string): string | undefined {
  let current = path.resolve(dir);
  for (;;) {
    try {
      const st = fs.statSync(current);
      if ((st.mode & 0o022) !== 0) return current;
    } catch {
      // Not created yet: only existing ancestors can be checked; the step's own dir is made 0700.
    }
    const parent = path.dirname(current);
    if (parent === current) return undefined;
    current = parent;
  }
}
