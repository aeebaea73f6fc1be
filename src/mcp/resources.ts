import { isAscii, isUtf8 } from 'node:buffer';
import { ErrorCode, type ReadResourceResult, type Resource } from '@modelcontextprotocol/sdk/types.js';
import type { ManagerContext } from '../manager/context.js';
import { SubagentError } from '../errors.js';
import { charLength, incompleteTail, isContinuation } from '../utf8-cut.js';
import { listVisible, listVisibleRuns, readMeta, requireRecord, requireVisible } from '../manager/listing.js';
import { readFileBytes } from '../manager/run-files.js';
import { freshStatus } from '../manager/run-status.js';
import { RpcError } from './rpc-error.js';
import { MAX_OUTPUT_BYTES, renderRun } from '../manager/status-view.js';

/** Reads past this are paged with ?offset=&length= (the SDK client drops a connection on a message over 10 MiB). */
export const MAX_READ_BYTES = 4 * 1024 * 1024;
export const PAGE_SIZE = 100;

const URI = /^subagents:\/\/runs\/([^/?#]+)(\/output|\/events|\/steps\/(\d+(?:\.\d+)?)\/(?:output|patch))?(?:\?(.*))?$/;

export const RESOURCE_TEMPLATES = [
  { uriTemplate: 'subagents://runs/{runId}', name: 'run', title: 'Run status', description: 'The full status of a run (JSON)', mimeType: 'application/json' },
  { uriTemplate: 'subagents://runs/{runId}/output', name: 'run-output', title: 'Run output', description: 'The run\'s final output (text; ?offset=&length= for more than 4 MiB; ?encoding=base64 for the exact bytes)', mimeType: 'text/plain' },
  { uriTemplate: 'subagents://runs/{runId}/steps/{index}/output', name: 'step-output', title: 'Step output', description: 'One step\'s output so far (text; member N of parallel step I is I.N)', mimeType: 'text/plain' },
  { uriTemplate: 'subagents://runs/{runId}/steps/{index}/patch', name: 'step-patch', title: 'Step patch', description: 'An isolated step\'s changes as a unified diff from its base to its commit (text; empty for a step that was not isolated)', mimeType: 'text/x-diff' },
  { uriTemplate: 'subagents://runs/{runId}/events', name: 'run-events', title: 'Run events', description: 'The run\'s event log (JSON lines)', mimeType: 'application/x-ndjson' },
];

export function runUri(runId: string): string { return `subagents://runs/${runId}`; }

/** Same answer for "does not exist" and "not yours": the spec's not-found error. */
function notFound(uri: string): RpcError {
  return new RpcError(ErrorCode.InvalidParams, `Resource not found: ${uri.slice(0, 200)}`);
}

interface Cursor { createdAt: string; runId: string }

function encodeCursor(c: Cursor): string { return Buffer.from(JSON.stringify([c.createdAt, c.runId])).toString('base64url'); }
function decodeCursor(text: string): Cursor {
  try {
    const v = JSON.parse(Buffer.from(text, 'base64url').toString('utf8')) as unknown;
    if (Array.isArray(v) && typeof v[0] === 'string' && typeof v[1] === 'string') return { createdAt: v[0], runId: v[1] };
  } catch { /* fall through */ }
  throw new RpcError(ErrorCode.InvalidParams, 'Invalid cursor: pass the nextCursor of the previous resources/list page, or none for the first page.');
}

/** Newest first; the run id breaks ties so that the order is total and a cursor is a position in it. */
function newerFirst(a: Cursor, b: Cursor): number {
  if (a.createdAt !== b.createdAt) return a.createdAt < b.createdAt ? 1 : -1;
  return a.runId < b.runId ? 1 : a.runId > b.runId ? -1 : 0;
}

/**
 * The session's non-dismissed runs, newest first, `pageSize` at a time. The cursor names the last run of the previous
 * page (not an offset), so runs launched between two pages neither repeat nor push others out.
 */
export function listResources(ctx: ManagerContext, cursor?: string, pageSize = PAGE_SIZE): { resources: Resource[]; nextCursor?: string } | Promise<{ resources: Resource[]; nextCursor?: string }> {
  if (ctx.distributed) return listDistributedResources(ctx, ctx.distributed, cursor, pageSize);
  return pageOfRuns(listVisibleRuns(ctx).filter((r) => !r.dismissed).map((r) => r.meta), cursor, pageSize);
}

/** Distributed mode: the session's runs from Redis, paged by the same cursor. */
async function listDistributedResources(ctx: ManagerContext, d: NonNullable<ManagerContext['distributed']>, cursor: string | undefined, pageSize: number): Promise<{ resources: Resource[]; nextCursor?: string }> {
  const answer = await d.status(ctx, {}, { signal: new AbortController().signal });
  return pageOfRuns(answer.kind === 'list' ? answer.runs : [], cursor, pageSize);
}

/** One page of runs as resources, newest first, after the run the cursor names (either mode). */
function pageOfRuns(all: Array<Cursor & { mode: string; agents: string[]; label?: string | null }>, cursor: string | undefined, pageSize: number): { resources: Resource[]; nextCursor?: string } {
  const after = cursor ? decodeCursor(cursor) : null;
  const runs = [...all].sort(newerFirst).filter((m) => after === null || newerFirst(m, after) > 0);
  const page = runs.slice(0, pageSize);
  const last = page.at(-1);
  return {
    resources: page.map((m) => ({
      uri: runUri(m.runId), name: m.runId, title: `${m.mode} run of ${m.agents.join(', ')}${m.label ? ` — ${m.label}` : ''}`.slice(0, 200),
      mimeType: 'application/json',
    })),
    ...(runs.length > pageSize && last ? { nextCursor: encodeCursor(last) } : {}),
  };
}

/**
 * A page of a text file that starts and ends on character boundaries (JSON-lines files: on line boundaries), so
 * pages never carry a broken character and their concatenation is the file. `next` is the offset to continue at.
 */
function readPage(reader: (offset: number, length: number) => { buf: Buffer; size: number }, offset: number, length: number, lines: boolean): { text: string; start: number; next: number; size: number } {
  const read = reader(offset, length + 3);
  const { size } = read;
  let buf = read.buf;
  let start = offset;
  // A caller-chosen offset inside a character moves to the next character.
  while (start > 0 && buf.length > 0 && isContinuation(buf[0]!) && start - offset < 3) { buf = buf.subarray(1); start++; }
  const whole = buf;
  buf = buf.subarray(0, length);
  if (start + buf.length < size) {
    let cut = buf.length;
    if (lines) {
      const nl = buf.lastIndexOf(0x0a);
      if (nl >= 0) cut = nl + 1;
    }
    if (cut === buf.length) cut -= incompleteTail(buf);
    // A page narrower than one character still carries that whole character, so paging always advances.
    if (cut === 0 && whole.length > 0) {
      cut = Math.min(whole.length, charLength(whole[0]!));
      buf = whole;
    }
    buf = buf.subarray(0, cut);
  }
  return { text: decodeText(buf), start, next: start + buf.length, size, ...(!isAscii(buf) && !isUtf8(buf) ? { lossy: true } : {}) };
}

/**
 * UTF-8 bytes as a string. ASCII (most agent output) is decoded as latin1, the same characters: a copy into a one-byte
 * string, where V8's UTF-8 decoder walked every byte (it was most of a 4 MiB read's server time, docs/performance.md).
 */
function decodeText(buf: Buffer): string {
  return isAscii(buf) ? buf.toString('latin1') : buf.toString('utf8');
}

function pagedContent(uri: string, mimeType: string, page: { text: string; start: number; next: number; size: number; lossy?: boolean }, length: number): ReadResourceResult['contents'][number] {
  const base = uri.split('?')[0]!;
  return {
    uri, mimeType, text: page.text,
    _meta: {
      offset: page.start, bytes: page.size, ...(page.next < page.size ? { next: `${base}?offset=${page.next}&length=${length}` } : {}),
      // Bytes that are not UTF-8 (an agent that printed binary) show as U+FFFD in the text: `?encoding=base64` has them.
      ...(page.lossy ? { utf8: false } : {}),
    },
  };
}

/** A page of an output's exact bytes, base64 in `blob` (`?encoding=base64`): no character boundaries, nothing replaced. */
function blobContent(uri: string, read: { buf: Buffer; size: number }, offset: number, length: number): ReadResourceResult['contents'][number] {
  const buf = read.buf.subarray(0, length);
  const next = offset + buf.length;
  const base = uri.split('?')[0]!;
  return {
    uri, mimeType: 'application/octet-stream', blob: buf.toString('base64'),
    _meta: { offset, bytes: read.size, ...(next < read.size ? { next: `${base}?offset=${next}&length=${length}&encoding=base64` } : {}) },
  };
}

/** `?encoding=base64` asks for an output's exact bytes; anything else but text (the default) is refused. */
function wantsBase64(uri: string, q: URLSearchParams): boolean {
  const e = q.get('encoding');
  if (e === null || e === '' || e === 'text') return false;
  if (e === 'base64') return true;
  throw new RpcError(ErrorCode.InvalidParams, `Invalid encoding ${JSON.stringify(e.slice(0, 20))} in ${uri.slice(0, 200)}: use encoding=base64 for the exact bytes, or none for text.`);
}

interface ParsedUri { runId: string; part: 'status' | 'output' | 'events' | 'step' | 'patch'; stepKey?: string; query: URLSearchParams }

function parseUri(uri: string): ParsedUri | null {
  const m = URI.exec(uri);
  if (!m) return null;
  let runId: string;
  try { runId = decodeURIComponent(m[1]!); } catch { return null; }
  const part = !m[2] ? 'status' : m[2] === '/output' ? 'output' : m[2] === '/events' ? 'events' : m[2].endsWith('/patch') ? 'patch' : 'step';
  return { runId, part, ...(m[3] !== undefined ? { stepKey: m[3] } : {}), query: new URLSearchParams(m[4] ?? '') };
}

/** The run a resource URI names, if this session may see it; the not-found error otherwise (subscribe checks this too). */
export function requireResource(ctx: ManagerContext, uri: string): ParsedUri {
  const p = parseUri(uri);
  if (!p) throw notFound(uri);
  try { requireVisible(ctx, p.runId); } catch { throw notFound(uri); }
  return p;
}

function intParam(q: URLSearchParams, name: string, def: number): number {
  const raw = q.get(name);
  if (raw === null || raw === '') return def;
  const n = Number(raw);
  return Number.isFinite(n) && n >= 0 ? Math.floor(n) : def;
}

export async function readResource(ctx: ManagerContext, uri: string): Promise<ReadResourceResult> {
  if (ctx.distributed) return readDistributedResource(ctx, ctx.distributed, uri);
  const p = requireResource(ctx, uri);
  const { runId } = p;
  const offset = intParam(p.query, 'offset', 0);
  const length = Math.max(1, Math.min(MAX_READ_BYTES, intParam(p.query, 'length', MAX_READ_BYTES)));
  const paths = ctx.store.paths(runId);
  if (p.part === 'status') {
    const record = requireRecord(ctx, runId);
    const status = await freshStatus(ctx, runId);
    return { contents: [{ uri, mimeType: 'application/json', text: JSON.stringify(renderRun(ctx, record, status, MAX_OUTPUT_BYTES)) }] };
  }
  if (p.part === 'events') {
    const page = readPage((o, l) => readFileBytes(paths.events, o, l), offset, length, true);
    return { contents: [pagedContent(uri, 'application/x-ndjson', { ...page, text: eventLines(page.text) }, length)] };
  }
  if (p.part === 'step' || p.part === 'patch') {
    const status = await freshStatus(ctx, runId);
    const key = p.stepKey!;
    const exists = status.steps.some((s) => s.key === key || s.members?.some((x) => x.key === key));
    if (!exists) throw notFound(uri);
  }
  const file = p.part === 'step' ? paths.output(p.stepKey!) : p.part === 'patch' ? paths.patch(p.stepKey!) : paths.runOutput;
  if (wantsBase64(uri, p.query)) return { contents: [blobContent(uri, readFileBytes(file, offset, length), offset, length)] };
  return { contents: [pagedContent(uri, p.part === 'patch' ? 'text/x-diff' : 'text/plain', readPage((o, l) => readFileBytes(file, o, l), offset, length, false), length)] };
}

/** A page of events as served: whole JSON objects, one a line; readers skip torn or garbled lines and blank ones (docs/contract.md, invariant 6). */
function eventLines(text: string): string {
  return text.split('\n').filter((line) => {
    if (line.trim() === '') return false;
    try { const v = JSON.parse(line) as unknown; return typeof v === 'object' && v !== null && !Array.isArray(v); } catch { return false; }
  }).join('\n');
}

/** Distributed mode: the same resources, read from Redis (docs/scale-out.md, "What lives in Redis"). */
async function readDistributedResource(ctx: ManagerContext, d: NonNullable<ManagerContext['distributed']>, uri: string): Promise<ReadResourceResult> {
  const p = parseUri(uri);
  if (!p) throw notFound(uri);
  const offset = intParam(p.query, 'offset', 0);
  const length = Math.max(1, Math.min(MAX_READ_BYTES, intParam(p.query, 'length', MAX_READ_BYTES)));
  try {
    if (p.part === 'status') {
      const answer = await d.status(ctx, { runId: p.runId, outputBytes: MAX_OUTPUT_BYTES }, { signal: new AbortController().signal });
      const { kind: _kind, ...view } = answer;
      return { contents: [{ uri, mimeType: 'application/json', text: JSON.stringify(view) }] };
    }
    const part = p.part === 'step' || p.part === 'patch' ? { step: p.stepKey!, patch: p.part === 'patch' } : p.part;
    const got = await d.readBytes(ctx, p.runId, part, offset, length + 3);
    if (p.part !== 'events' && wantsBase64(uri, p.query)) return { contents: [blobContent(uri, got, offset, length)] };
    const page = readPage(() => got, offset, length, p.part === 'events');
    if (p.part === 'events') return { contents: [pagedContent(uri, 'application/x-ndjson', { ...page, text: eventLines(page.text) }, length)] };
    return { contents: [pagedContent(uri, p.part === 'patch' ? 'text/x-diff' : 'text/plain', page, length)] };
  } catch (e) {
    if (e instanceof SubagentError && e.code === 'RUN_NOT_FOUND') throw notFound(uri);
    throw e;
  }
}

/** At most this many completion values per answer (the protocol's limit); `total` says how many matched. */
export const MAX_COMPLETIONS = 100;

/** Template completion: run ids of this session for `runId`, step keys of that run for `index`. */
export async function completeArgument(ctx: ManagerContext, name: string, value: string, context: Record<string, string> = {}): Promise<{ values: string[]; total: number }> {
  if (ctx.distributed) return completeDistributed(ctx, ctx.distributed, name, value, context);
  let all: string[] = [];
  if (name === 'runId') all = listVisible(ctx).map((m) => m.runId).filter((id) => id.startsWith(value));
  else if (name === 'index' && context.runId) {
    try {
      requireVisible(ctx, context.runId);
      const s = ctx.store.readStatus(context.runId);
      all = (s?.steps ?? []).flatMap((st) => [st.key, ...(st.members ?? []).map((m) => m.key)]).filter((k) => k.startsWith(value));
    } catch { all = []; }
  }
  return { values: all.slice(0, MAX_COMPLETIONS), total: all.length };
}

/** Distributed mode's completion: the same answers, from Redis. */
async function completeDistributed(ctx: ManagerContext, d: NonNullable<ManagerContext['distributed']>, name: string, value: string, context: Record<string, string>): Promise<{ values: string[]; total: number }> {
  let all: string[] = [];
  try {
    if (name === 'runId') {
      const answer = await d.status(ctx, { all: true }, { signal: new AbortController().signal });
      all = (answer.kind === 'list' ? answer.runs : []).map((r) => r.runId).filter((id) => id.startsWith(value));
    } else if (name === 'index' && context.runId) {
      const { status } = await d.runState(ctx, context.runId);
      all = status.steps.flatMap((st) => [st.key, ...(st.members ?? []).map((m) => m.key)]).filter((k) => k.startsWith(value));
    }
  } catch { all = []; }
  return { values: all.slice(0, MAX_COMPLETIONS), total: all.length };
}

export { readMeta };
