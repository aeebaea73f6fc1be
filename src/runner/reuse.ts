import fs from 'node:fs';
import { deferredFreesSettled } from '../store/deferred-free.js';

/**
 * Whether a warm runner whose run has ended may serve another (docs/architecture.md, "Warm runners"): only when the
 * process is as it was before its first run — no file descriptor, handle or process-wide listener more, the same
 * umask, no child process, and its memory within a bound of what it held then. Anything a run left behind (a timer, a
 * watcher, an open file, a signal handler) fails the check, and the runner exits as a runner of one run does.
 */

/** A runner that grew past its first idle RSS by more than this exits after its run instead (memory cannot creep). */
export const REUSE_RSS_SLACK_BYTES = 16 * 1024 * 1024;

/** Process-wide events a run installs listeners for; each must be back to its count before the first run. */
const EVENTS = ['SIGTERM', 'SIGINT', 'SIGHUP', 'uncaughtException', 'unhandledRejection', 'exit', 'beforeExit'] as const;

/** Requests in flight are not state: a file operation under way is not something the next run could trip on. */
const TRANSIENT = new Set(['FSReqCallback', 'FSReqPromise', 'FileHandleCloseReq', 'TTYWrap']);

export interface ReuseBaseline {
  fds: number;
  rssBytes: number;
  umask: number;
  listeners: Record<string, number>;
  handles: Map<string, number>;
}

/**
 * Handles closed by code that ran without yielding (a run's end can go from its agent's exit to its last write in one
 * turn of the event loop) finish closing at the end of a loop iteration: two `setImmediate` turns get past it.
 */
async function closesSettled(): Promise<void> {
  for (let i = 0; i < 2; i++) await new Promise((r) => setImmediate(r));
  await deferredFreesSettled(); // replaced state files and released locks, freed on the thread pool
}

/** The runner as it is idle before its first run (after its rehearsal). */
export async function reuseBaseline(): Promise<ReuseBaseline> {
  await closesSettled();
  return { fds: openFds(), rssBytes: process.memoryUsage.rss(), umask: currentUmask(), listeners: listenerCounts(), handles: handleCounts() };
}

/** Why this runner may not serve another run ('' when it may), judged against its baseline. */
export async function leftFromRun(b: ReuseBaseline): Promise<string> {
  await closesSettled();
  if (childPids().length > 0) return 'a child process is alive';
  if (currentUmask() !== b.umask) return 'its umask changed';
  const listeners = listenerCounts();
  for (const e of EVENTS) if (listeners[e] !== b.listeners[e]) return `a ${e} listener is left`;
  for (const [type, n] of handleCounts()) if (n > (b.handles.get(type) ?? 0)) return `a ${type} handle is left`;
  if (openFds() > b.fds) return 'a file descriptor is left open';
  if (process.memoryUsage.rss() > b.rssBytes + REUSE_RSS_SLACK_BYTES) return 'its memory grew';
  return '';
}

function openFds(): number {
  try { return fs.readdirSync('/proc/self/fd').length; } catch { return 0; }
}

function currentUmask(): number {
  const u = process.umask(0o077);
  process.umask(u);
  return u;
}

function listenerCounts(): Record<string, number> {
  return Object.fromEntries(EVENTS.map((e) => [e, process.listenerCount(e)]));
}

function handleCounts(): Map<string, number> {
  const counts = new Map<string, number>();
  for (const t of process.getActiveResourcesInfo()) if (!TRANSIENT.has(t)) counts.set(t, (counts.get(t) ?? 0) + 1);
  return counts;
}

/** This process's live children (Linux: /proc/<pid>/task/<tid>/children, one file per thread); [] where unreadable. */
function childPids(): number[] {
  const out: number[] = [];
  let tids: string[];
  try { tids = fs.readdirSync('/proc/self/task'); } catch { return out; }
  for (const tid of tids) {
    try {
      for (const p of fs.readFileSync(`/proc/self/task/${tid}/children`, 'utf8').split(/\s+/)) if (p) out.push(Number(p));
    } catch { /* not available here: the sweep before the run's end found none of the run's processes */ }
  }
  return out;
}
