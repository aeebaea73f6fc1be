import fs from 'node:fs';
import { McpError, ErrorCode, type ReadResourceResult, type Resource } from '@modelcontextprotocol/sdk/types.js';
import type { ManagerContext } from '../manager/context.js';
import { listVisible, readMeta, requireVisible } from '../manager/listing.js';
import { freshStatus } from '../manager/run-status.js';
import { MAX_OUTPUT_BYTES, renderRun } from '../manager/status-view.js';
import { readEvents } from '../store/event-log.js';

/** Reads past this are paged with ?offset=&length= (the SDK client drops a connection on a message over 10 MiB). */
export const MAX_READ_BYTES = 4 * 1024 * 1024;
export const PAGE_SIZE = 100;

const URI = /^subagents:\/\/runs\/([^/?#]+)(\/output|\/events|\/steps\/(\d+(?:\.\d+)?)\/output)?(?:\?(.*))?$/;

export const RESOURCE_TEMPLATES = [
  { uriTemplate: 'subagents://runs/{runId}', name: 'run', title: 'Run status', description: 'The full status of a run (JSON)', mimeType: 'application/json' },
  { uriTemplate: 'subagents://runs/{runId}/output', name: 'run-output', title: 'Run output', description: 'The run\'s final output (text; ?offset=&length= for more than 4 MiB)', mimeType: 'text/plain' },
  { uriTemplate: 'subagents://runs/{runId}/steps/{index}/output', name: 'step-output', title: 'Step output', description: 'One step\'s output so far (text; member N of parallel step I is I.N)', mimeType: 'text/plain' },
  { uriTemplate: 'subagents://runs/{runId}/events', name: 'run-events', title: 'Run events', description: 'The run\'s event log (JSON lines)', mimeType: 'application/x-ndjson' },
];

export function runUri(runId: string): string { return `subagents://runs/${runId}`; }

/** Same answer for "does not exist" and "not yours": the spec's not-found error. */
function notFound(uri: string): McpError {
  return new McpError(ErrorCode.InvalidParams, `Resource not found: ${uri.slice(0, 200)}`);
}

export function listResources(ctx: ManagerContext, cursor?: string): { resources: Resource[]; nextCursor?: string } {
  const runs = listVisible(ctx).filter((m) => !ctx.store.isDismissed(m.runId));
  const start = cursor && /^\d+$/.test(cursor) ? Number(cursor) : 0;
  const page = runs.slice(start, start + PAGE_SIZE);
  return {
    resources: page.map((m) => ({
      uri: runUri(m.runId), name: m.runId, title: `${m.mode} run of ${m.agents.join(', ')}${m.label ? ` — ${m.label}` : ''}`.slice(0, 200),
      mimeType: 'application/json',
    })),
    ...(start + PAGE_SIZE < runs.length ? { nextCursor: String(start + PAGE_SIZE) } : {}),
  };
}

function readSlice(file: string, offset: number, length: number): { text: string; size: number } {
  let fd: number;
  try { fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW); } catch { return { text: '', size: 0 }; }
  try {
    const size = fs.fstatSync(fd).size;
    const len = Math.max(0, Math.min(length, size - offset));
    const buf = Buffer.alloc(len);
    if (len > 0) fs.readSync(fd, buf, 0, len, offset);
    return { text: buf.toString('utf8'), size };
  } finally {
    fs.closeSync(fd);
  }
}

export async function readResource(ctx: ManagerContext, uri: string): Promise<ReadResourceResult> {
  const m = URI.exec(uri);
  if (!m) throw notFound(uri);
  const runId = decodeURIComponent(m[1]!);
  try { requireVisible(ctx, runId); } catch { throw notFound(uri); }
  const query = new URLSearchParams(m[4] ?? '');
  const offset = Math.max(0, Number(query.get('offset') ?? 0) || 0);
  const length = Math.min(MAX_READ_BYTES, Math.max(0, Number(query.get('length') ?? MAX_READ_BYTES) || MAX_READ_BYTES));
  const paths = ctx.store.paths(runId);
  if (!m[2]) {
    const record = ctx.store.readRecord(runId)!;
    const status = await freshStatus(ctx, runId);
    return { contents: [{ uri, mimeType: 'application/json', text: JSON.stringify(renderRun(ctx, record, status, MAX_OUTPUT_BYTES)) }] };
  }
  if (m[2] === '/events') {
    const { events } = readEvents(paths.events);
    return { contents: [{ uri, mimeType: 'application/x-ndjson', text: events.map((e) => JSON.stringify(e)).join('\n') }] };
  }
  const key = m[3];
  if (key !== undefined) {
    const status = await freshStatus(ctx, runId);
    const exists = status.steps.some((s) => s.key === key || s.members?.some((x) => x.key === key));
    if (!exists) throw notFound(uri);
  }
  const file = key !== undefined ? paths.output(key) : paths.runOutput;
  const { text, size } = readSlice(file, offset, length);
  const end = offset + Buffer.byteLength(text);
  return {
    contents: [{ uri, mimeType: 'text/plain', text, _meta: { offset, bytes: size, ...(end < size ? { next: `${uri.split('?')[0]}?offset=${end}&length=${length}` } : {}) } }],
  };
}

/** Run ids of this session starting with `prefix` (template completion). */
export function completeRunIds(ctx: ManagerContext, prefix: string): string[] {
  return listVisible(ctx).map((m) => m.runId).filter((id) => id.startsWith(prefix)).slice(0, 100);
}

export { readMeta };
