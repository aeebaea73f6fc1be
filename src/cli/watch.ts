import type { FeedSince, ManagerContext } from '../manager/context.js';
import { isSubagentError } from '../errors.js';
import { HomeFeed, parseCursor, type Cursor, type HomeEvent } from '../manager/home-feed.js';
import { readMeta } from '../manager/listing.js';
import { CliError, EXIT_USAGE } from './context.js';
import { oneLine, parseAge } from '../format.js';

export interface WatchOptions { session?: string; since?: string; json?: boolean }

/** The lowest run id in the cursor order: a cursor made from a time alone sorts before every event of that time. */
const LOWEST_RUN_ID = `r-${'-'.repeat(24)}`;

/** `--since`: a cursor from an earlier line, `start` (the whole history), or an age (`10m`: events of the last ten minutes). */
export function parseSince(text: string | undefined, nowMs = Date.now()): Cursor | 'start' | null {
  if (text === undefined) return null;
  if (text === 'start' || text === '0') return 'start';
  const c = parseCursor(text);
  if (c) return c;
  const age = parseAge(text);
  if (age !== null && /[a-z]$/i.test(text.trim())) return { tsMs: nowMs - age, runId: LOWEST_RUN_ID, offset: -1 };
  throw new CliError(`--since ${JSON.stringify(text.slice(0, 60))} is not a cursor (copy one from an earlier line), "start", or an age such as 10m`, EXIT_USAGE);
}

/** A run's agent by step key (`0`, `2.1`), from its record, for lines that name only the step. */
const agentsByRun = new Map<string, Map<string, string>>();

function stepAgent(ctx: ManagerContext, runId: string, key: string): string | undefined {
  let m = agentsByRun.get(runId);
  if (!m) {
    m = new Map();
    try {
      ctx.store.readRecord(runId)?.steps.forEach((s, i) => {
        if (s.kind === 'agent') m!.set(String(i), s.agent.name);
        else s.members.forEach((x, j) => m!.set(`${i}.${j}`, x.agent.name));
      });
    } catch { /* unreadable: the line names the step only */ }
    agentsByRun.set(runId, m);
  }
  return m.get(key);
}

/** What a line says about the event, for people: the step, the agent, the state, the exit, the error. */
function details(e: HomeEvent, ctx?: ManagerContext): string {
  const f = e.fields;
  const parts: string[] = [];
  // Every field is shown through oneLine: a log line is the runner's, but the file is plain text anyone of the user
  // could append to, and a terminal must not take a field for a newline or an escape sequence.
  if (typeof f.step === 'string') parts.push(`step ${oneLine(f.step, 20)}`);
  const agent = typeof f.agent === 'string' ? f.agent : typeof f.step === 'string' && ctx ? stepAgent(ctx, e.runId, f.step) : undefined;
  if (agent) parts.push(oneLine(agent, 40));
  if (typeof f.state === 'string') parts.push(oneLine(f.state, 20));
  if (typeof f.error === 'string' && f.error) parts.push(oneLine(f.error, 40));
  if (typeof f.exitCode === 'number') parts.push(`exit ${f.exitCode}`);
  if (typeof f.signal === 'string' && f.signal) parts.push(oneLine(f.signal, 20));
  if (typeof f.mode === 'string') parts.push(oneLine(f.mode, 20));
  if (typeof f.phase === 'string') parts.push(`phase ${oneLine(f.phase, 20)}`);
  if (typeof f.reason === 'string') parts.push(oneLine(f.reason, 40));
  // Over Redis: the machine a worker ran the run on.
  if (typeof f.host === 'string') parts.push(`on ${oneLine(f.host, 60)}`);
  return parts.join(' ');
}

export function humanLine(e: HomeEvent, ctx?: ManagerContext): string {
  const time = e.ts.replace('T', ' ').replace('Z', '');
  const where = e.depth > 0 ? ` (nested in ${e.parentRunId ?? '?'})` : '';
  return `${oneLine(time, 40)}  ${e.runId}  ${oneLine(e.type, 40).padEnd(12)} ${details(e, ctx)}${where}  @${e.cursor}`;
}

export function jsonLine(e: HomeEvent): string {
  return JSON.stringify({ cursor: e.cursor, ts: e.ts, type: e.type, runId: e.runId, sessionId: e.sessionId, rootRunId: e.rootRunId, parentRunId: e.parentRunId, depth: e.depth, ...e.fields });
}

/**
 * Over Redis (docs/watch-and-ui.md, "`watch` over Redis"): the same lines from the feed stream of every run's events, whose
 * entry ids are the cursors. Distributed runs have no nesting in Redis: each is its own root.
 */
export async function watchRedis(ctx: ManagerContext, o: WatchOptions, out: (s: string) => void): Promise<number> {
  const d = ctx.distributed!;
  const text = o.since?.trim();
  let since: FeedSince = null;
  if (text === 'start' || text === '0') since = 'start';
  else if (text !== undefined) {
    const age = parseAge(text);
    since = age !== null && /[a-z]$/i.test(text) ? { sinceMs: Date.now() - age } : { cursor: text };
  }
  const want = o.session?.trim();
  const ac = new AbortController();
  const end = () => ac.abort();
  // `on`, not `once`: signal-exit (loaded by the Redis client's dependencies) re-raises a signal when it finds only
  // its own listeners left, and a `once` listener is gone by the time its later copy looks.
  process.on('SIGINT', end);
  process.on('SIGTERM', end);
  process.on('SIGHUP', end);
  try {
    await d.follow(since, ac.signal, (entries) => {
      for (const x of entries) {
        if (want && !x.sessionId.startsWith(want)) continue;
        const { ts, type, ...fields } = x.event;
        const e: HomeEvent = {
          cursor: x.id, ts: String(ts ?? ''), type: String(type ?? ''), runId: x.runId, sessionId: x.sessionId,
          rootRunId: x.runId, parentRunId: null, depth: 0, fields,
        };
        out(o.json ? jsonLine(e) : humanLine(e));
      }
    }, undefined, (reason) => {
      // On stderr: stdout carries event lines only, which a script may parse.
      ctx.log(reason === null ? 'Redis answers again; watching' : `Redis does not answer: ${reason}; watching resumes when it is back (Ctrl-C to stop)`);
    });
  } catch (e) {
    if (isSubagentError(e) && e.code === 'INVALID_INPUT') throw new CliError(`--since: ${e.message}`, EXIT_USAGE);
    throw e;
  } finally {
    process.off('SIGINT', end);
    process.off('SIGTERM', end);
    process.off('SIGHUP', end);
  }
  return 0;
}

/**
 * Prints one line per run event across the home, as they happen, until interrupted. Follows the home through the
 * run directories' own logs (docs/watch-and-ui.md): a cursor names one line of one run's log, so `--since` resumes
 * exactly after it.
 */
export async function watchCommand(ctx: ManagerContext, o: WatchOptions, out: (s: string) => void): Promise<number> {
  const since = parseSince(o.since);
  const want = o.session?.trim();
  const inSession = (e: HomeEvent): boolean => {
    if (!want) return true;
    if (e.sessionId.startsWith(want)) return true;
    const root = e.rootRunId !== e.runId ? readMeta(ctx, e.rootRunId) : null;
    return root !== null && root.sessionId.startsWith(want);
  };
  const feed = new HomeFeed(ctx, {
    since,
    holdsProcess: true, // a home without runs yet has nothing else that keeps `watch` up until Ctrl-C
    onEvents: (events) => {
      for (const e of events) if (inSession(e)) out(o.json ? jsonLine(e) : humanLine(e, ctx));
    },
  });
  await feed.start();
  return new Promise<number>((resolve) => {
    const end = () => { feed.stop(); resolve(0); };
    process.once('SIGINT', end);
    process.once('SIGTERM', end);
    process.once('SIGHUP', end);
  });
}
