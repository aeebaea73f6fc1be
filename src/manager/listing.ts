import fs from 'node:fs';
import path from 'node:path';
import { SubagentError } from '../errors.js';
import { isRunId } from '../ids.js';
import { ensurePrivateDir, writeFailure, writeFileAtomic } from '../store/atomic-write.js';
import { fsPort } from '../store/fs-port.js';
import { dirSignature, settledDirSignature, type DirSnapshot } from '../store/dir-snapshot.js';
import { readTextNoFollow } from '../store/json-file.js';
import type { Layout } from '../store/layout.js';
import { isTerminalRun, type RunRecord, type RunMode } from '../store/run-types.js';
import type { ManagerContext } from './context.js';

/** What listings need of a run; run.json never changes, so each is read once per process. */
export interface RunMeta {
  runId: string;
  sessionId: string;
  rootRunId: string;
  parentRunId: string | null;
  createdAt: string;
  mode: RunMode;
  label: string | null;
  agents: string[];
  depth: number;
}

const metaCache = new Map<string, RunMeta | null>();

export function metaOf(record: RunRecord): RunMeta {
  const agents: string[] = [];
  for (const s of record.steps) {
    if (s.kind === 'agent') agents.push(s.agent.name);
    else for (const m of s.members) agents.push(m.agent.name);
  }
  return {
    runId: record.runId, sessionId: record.sessionId, rootRunId: record.rootRunId, parentRunId: record.parentRunId,
    createdAt: record.createdAt, mode: record.mode, label: record.label, agents: [...new Set(agents)], depth: record.depth,
  };
}

/** The run's meta, or null when it does not exist or its record is unreadable. */
export function readMeta(ctx: ManagerContext, runId: string): RunMeta | null {
  if (!isRunId(runId)) return null;
  if (metaCache.has(runId)) return metaCache.get(runId)!;
  let meta: RunMeta | null = null;
  try {
    const rec = ctx.store.readRecord(runId);
    // A record must name its own directory: a copied or planted run.json never speaks for another run.
    meta = rec && rec.runId === runId ? metaOf(rec) : null;
  } catch {
    meta = null;
  }
  // Only cache hits: a run being created right now may not have its record yet.
  if (meta) metaCache.set(runId, meta);
  return meta;
}

/**
 * Caches the meta of a run this process has just created (its record is the one written): the launch's own `status`
 * and the run watcher's listing then read no run.json of it.
 */
export function rememberMeta(record: RunRecord): void {
  metaCache.set(record.runId, metaOf(record));
}

/** Owned by a session of ours (own or adopted), or nested under such a run. */
export function isVisible(ctx: ManagerContext, meta: RunMeta): boolean {
  const sessions = ctx.visibleSessions();
  if (sessions.has(meta.sessionId)) return true;
  if (meta.rootRunId !== meta.runId) {
    const root = readMeta(ctx, meta.rootRunId);
    if (root && sessions.has(root.sessionId)) return true;
  }
  return false;
}

/**
 * The one door to a run by id. A run that does not exist, is not ours, or whose id is malformed all answer the
 * same text, so an id reveals nothing about other sessions' runs.
 */
export function requireVisible(ctx: ManagerContext, runId: string): RunMeta {
  const meta = readMeta(ctx, runId);
  if (!meta || !isVisible(ctx, meta)) throw notFound(runId);
  return meta;
}

/**
 * The record of a run found visible: a run.json gone while the run is still listed (a hand deletion) is damage to
 * that run, STATE_CORRUPT, like a torn one.
 */
export function requireRecord(ctx: ManagerContext, runId: string): RunRecord {
  return ctx.store.readRecord(runId) ?? missingRecord(runId);
}

/** STATE_CORRUPT for a listed run without its run.json. */
export function missingRecord(runId: string): never {
  throw new SubagentError('STATE_CORRUPT', `run.json of ${runId} is missing; the run's files are damaged. Other runs are unaffected; inspect or remove the run's directory.`);
}

export function notFound(runId: string): SubagentError {
  const shown = isRunId(runId) ? runId : JSON.stringify(runId.slice(0, 40));
  return new SubagentError('RUN_NOT_FOUND', `no run ${shown} in this session; list your runs with status {} (after a client restart, use restore with the earlier sessionId).`);
}

/**
 * Every run visible to this session, newest first. Reads the run index of the visible sessions (runs of other
 * sessions are never touched, however many there are), then each run's meta (cached) and the same visibility rule.
 * `checked`: runs the caller found visible and present a moment ago, taken as they are (no file looked at).
 */
export function listVisible(ctx: ManagerContext, checked?: ReadonlyMap<string, { meta: RunMeta }>): RunMeta[] {
  const out: RunMeta[] = [];
  const ids = indexedRunIds(ctx.layout, ctx.visibleSessions());
  for (const id of appearedRunIds(ctx.layout)) ids.add(id);
  for (const id of ids) {
    const known = checked?.get(id);
    if (known) { out.push(known.meta); continue; }
    const m = readMeta(ctx, id);
    // A removed run (gc) stays in the index: its directory is the truth.
    if (m && isVisible(ctx, m) && fs.existsSync(ctx.store.paths(id).dir)) out.push(m);
  }
  return out.sort((a, b) => (a.createdAt < b.createdAt ? 1 : a.createdAt > b.createdAt ? -1 : 0));
}

/** A run as this process last checked it, with its directory's signature then (`settledDirSignature`). */
interface CheckedRun { meta: RunMeta; dismissed: boolean; dir: string; sig: string }
/** Per context, by run id: which runs are visible is the context's session's to say, not the state home's. */
const checkedRuns = new WeakMap<ManagerContext, Map<string, CheckedRun>>();

export interface VisibleRun { meta: RunMeta; dismissed: boolean }

/**
 * `listVisible` with each run's dismissal. A dismissal (a file made in the run's directory) and a removal (gc) both
 * change the run's directory, so a run whose directory has the signature this process recorded at its last check is
 * taken as it was then, for one stat; the directory and its dismissal took two, per run of the session, on every
 * list, every resources/list and every 5 s audit of the run watcher. A directory changed under a second ago is
 * checked in full (a second change within the same mtime tick would not show).
 */
export function listVisibleRuns(ctx: ManagerContext): VisibleRun[] {
  let cache = checkedRuns.get(ctx);
  if (!cache) checkedRuns.set(ctx, (cache = new Map()));
  const unchanged = new Map<string, CheckedRun>();
  for (const [runId, c] of cache) {
    if (dirSignature(c.dir) === c.sig) unchanged.set(runId, c);
    else cache.delete(runId);
  }
  return listVisible(ctx, unchanged).map((meta) => {
    const hit = unchanged.get(meta.runId);
    if (hit) return { meta, dismissed: hit.dismissed };
    const dir = ctx.store.paths(meta.runId).dir;
    // The signature before the look at the dismissal: a dismissal after it changes the directory.
    const sig = settledDirSignature(dir);
    const dismissed = ctx.store.isDismissed(meta.runId);
    if (sig !== null) cache.set(meta.runId, { meta, dismissed, dir, sig });
    return { meta, dismissed };
  });
}

/*
 * The run index: `<home>/index/<session>.runs`, one run id per line, for every session that sees the run by owning it
 * or its tree's root. A launch appends (fdatasync'ed) beside its reservation and before it publishes the run's
 * directory, so the index may name a run that never came to be (skipped: it has no record) but never misses one.
 * `index/complete` says that every run made before the index existed was indexed (by one full scan, the first time a
 * server of this version lists runs).
 */
const indexReady = new Set<string>();

function indexFile(layout: Layout, sessionId: string): string {
  return path.join(layout.home, 'index', `${encodeURIComponent(sessionId)}.runs`);
}

/**
 * Records `runId` under each session (durably: an acknowledged run must stay listable). Through the fs port, so the
 * fault suite can refuse it: a launch whose index line could not be written is refused before anything starts.
 */
export async function indexRun(layout: Layout, sessionIds: Array<string | null | undefined>, runId: string): Promise<void> {
  await Promise.all([...new Set(sessionIds)].filter((sid): sid is string => !!sid).map(async (sid) => {
    const file = indexFile(layout, sid);
    let fd: number | undefined;
    try {
      ensurePrivateDir(path.dirname(file));
      dropIfNotRegular(layout, file);
      fd = fsPort.openSync(file, fs.constants.O_APPEND | fs.constants.O_CREAT | fs.constants.O_WRONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK, 0o600);
      fsPort.writeSync(fd, Buffer.from(`${runId}\n`));
      await fsPort.fdatasync(fd);
    } catch (e) {
      throw writeFailure(file, e);
    } finally {
      if (fd !== undefined) try { fsPort.closeSync(fd); } catch { /* already failing */ }
    }
  }));
}

/**
 * Run directories that appeared in `runs/` while this process lives, indexed or not (copied in, or made by an older
 * version): the directory is re-read only when its size, link count or mtime changed, and only new names are kept.
 * The names present at the first look are the index's business. At most one re-read per `appearedRescanMs`: every
 * launch on the home changes `runs/`, and reading 10 000 names took ~7.5 ms, up to three times per launch (the run
 * watcher's scans); a run made by these means alone shows within that delay instead.
 */
const appeared = new Map<string, { sig: string; names: Set<string>; added: Set<string>; readAtMs: number }>();
export const listingTiming = {
  /** The least time between two reads of `runs/` for appeared names (a test sets it to 0 instead of sleeping it out). */
  appearedRescanMs: 2000,
};

function appearedRunIds(layout: Layout): Set<string> {
  const sig = dirSignature(layout.runsDir);
  if (sig === null) return new Set();
  let a = appeared.get(layout.home);
  if (a && (a.sig === sig || performance.now() - a.readAtMs < listingTiming.appearedRescanMs)) return a.added;
  let names: string[] = [];
  try { names = fs.readdirSync(layout.runsDir).filter(isRunId); } catch { /* none */ }
  if (!a) {
    a = { sig, names: new Set(names), added: new Set(), readAtMs: performance.now() };
    appeared.set(layout.home, a);
    return a.added;
  }
  const now = new Set(names);
  for (const n of names) if (!a.names.has(n)) a.added.add(n);
  for (const n of a.added) if (!now.has(n)) a.added.delete(n);
  a.names = now;
  a.sig = sig;
  a.readAtMs = performance.now();
  return a.added;
}

/**
 * Takes `runs/` as the server read it at its start (openStateHome) for the first look above: a new server's first
 * listing then does not read 10 000 names a second time. Ignored once this process has looked for itself.
 */
export function seedAppearedRunIds(layout: Layout, runs: DirSnapshot): void {
  if (appeared.has(layout.home)) return;
  appeared.set(layout.home, { sig: runs.sig, names: new Set(runs.names.filter(isRunId)), added: new Set(), readAtMs: performance.now() });
}

/** The run ids indexed under any of `sessions` (building the index once from a full scan if it is not there yet). */
function indexedRunIds(layout: Layout, sessions: ReadonlySet<string>): Set<string> {
  if (!indexReady.has(layout.home)) buildIndex(layout);
  const ids = new Set<string>();
  for (const sid of sessions) {
    let text = '';
    try {
      text = readTextNoFollow(indexFile(layout, sid), `index of session ${sid}`) ?? '';
    } catch {
      // Not a regular file (a FIFO, a directory) or absurdly large: the index is derived, so it is dropped and
      // rebuilt from the runs by a full scan.
      dropIfNotRegular(layout, indexFile(layout, sid), true);
      buildIndex(layout);
      try { text = readTextNoFollow(indexFile(layout, sid), `index of session ${sid}`) ?? ''; } catch { continue; }
    }
    for (const line of text.split('\n')) if (isRunId(line)) ids.add(line);
  }
  return ids;
}

/**
 * Removes a session index that is not a regular file (or, with `always`, one that could not be read), and the
 * marker that says the index is complete: the next listing rebuilds every session's index from the runs.
 */
function dropIfNotRegular(layout: Layout, file: string, always = false): void {
  let st: fs.Stats;
  try { st = fs.lstatSync(file); } catch { return; }
  if (st.isFile() && !always) return;
  try { fs.rmSync(file, { recursive: true, force: true }); } catch { /* the open after this says why */ }
  try { fs.unlinkSync(path.join(layout.home, 'index', 'complete')); } catch { /* none */ }
  indexReady.delete(layout.home);
}

/** Indexes every existing run (state homes made before the index, or whose index was removed). Idempotent. */
function buildIndex(layout: Layout): void {
  const marker = path.join(layout.home, 'index', 'complete');
  if (fs.existsSync(marker)) { indexReady.add(layout.home); return; }
  const bySession = new Map<string, string[]>();
  const sessionOf = new Map<string, string>();
  const readOwner = (runId: string): { sessionId: string; rootRunId: string } | null => {
    try {
      const text = readTextNoFollow(path.join(layout.runsDir, runId, 'run.json'), `run.json of ${runId}`);
      if (text === null) return null;
      const r = JSON.parse(text) as { runId?: string; sessionId?: string; rootRunId?: string };
      return r.runId === runId && typeof r.sessionId === 'string' ? { sessionId: r.sessionId, rootRunId: r.rootRunId ?? runId } : null;
    } catch {
      return null;
    }
  };
  let names: string[] = [];
  try { names = fs.readdirSync(layout.runsDir).filter(isRunId); } catch { /* no runs yet */ }
  const owners = new Map<string, { sessionId: string; rootRunId: string }>();
  for (const id of names) { const o = readOwner(id); if (o) { owners.set(id, o); sessionOf.set(id, o.sessionId); } }
  for (const [id, o] of owners) {
    const root = o.rootRunId !== id ? (sessionOf.get(o.rootRunId) ?? readOwner(o.rootRunId)?.sessionId) : undefined;
    for (const sid of new Set([o.sessionId, root])) {
      if (!sid) continue;
      const list = bySession.get(sid) ?? [];
      list.push(id);
      bySession.set(sid, list);
    }
  }
  ensurePrivateDir(path.join(layout.home, 'index'));
  for (const [sid, ids] of bySession) {
    const fd = fs.openSync(indexFile(layout, sid), fs.constants.O_APPEND | fs.constants.O_CREAT | fs.constants.O_WRONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK, 0o600);
    try {
      fs.writeSync(fd, ids.map((id) => `${id}\n`).join(''));
      fs.fdatasyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
  }
  writeFileAtomic(marker, JSON.stringify({ v: 1, at: new Date().toISOString(), runs: owners.size }));
  indexReady.add(layout.home);
}

/** Every run in the state home (the command line for people sees all sessions). */
export function listAll(ctx: ManagerContext): RunMeta[] {
  const out: RunMeta[] = [];
  for (const id of ctx.store.listRunIds()) {
    const m = readMeta(ctx, id);
    if (m) out.push(m);
  }
  return out.sort((a, b) => (a.createdAt < b.createdAt ? 1 : a.createdAt > b.createdAt ? -1 : 0));
}

/**
 * Runs of the home whose record cannot be read (torn, gone, or naming another run), with why. `listAll` cannot place
 * them (their session, shape and age are in the record), so a listing of every run adds them from here: a run is
 * renamed into runs/ whole, record first, so a directory there without a readable record is damage, never a run
 * being created.
 */
export function damagedRecords(ctx: ManagerContext): Array<{ runId: string; problem: string; changedAt: number }> {
  const out: Array<{ runId: string; problem: string; changedAt: number }> = [];
  for (const id of ctx.store.listRunIds()) {
    if (readMeta(ctx, id)) continue;
    let problem: string;
    try {
      const rec = ctx.store.readRecord(id);
      problem = rec === null ? `run.json of ${id} is missing; the run's files are damaged` : `run.json of ${id} names another run (${String(rec.runId).slice(0, 40)})`;
    } catch (e) {
      problem = (e as Error).message;
    }
    let changedAt = Date.now();
    try { changedAt = fs.statSync(ctx.store.paths(id).dir).mtimeMs; } catch { continue; /* gone meanwhile */ }
    out.push({ runId: id, problem, changedAt });
  }
  return out;
}

/** This session's own top-level runs that are still active (named in CAPACITY_EXHAUSTED). */
export function ownActiveRuns(ctx: ManagerContext): string[] {
  return listVisible(ctx).filter((m) => m.depth === 0).filter((m) => {
    try {
      const s = ctx.store.readStatus(m.runId);
      return s !== null && !isTerminalRun(s.state);
    } catch {
      return false;
    }
  }).map((m) => m.runId);
}
