import fs from 'node:fs';
import path from 'node:path';
import { createFileExclusive, writeFileAtomic, ensureDurablePrivateDir, ensurePrivateDir, fsyncDir } from './atomic-write.js';
import { readJsonFile } from './json-file.js';
import { readStateFile, SessionRecordFile } from './state-files.js';
import type { SessionRegistry } from './ports.js';

/**
 * One session's record. Servers sharing a session id (SUBAGENTS_SESSION_ID) write the same file: every
 * read-merge-write of it goes through `withRecord` (a cross-process lock per session).
 */
export interface SessionRecord {
  v: 1;
  sessionId: string;
  startedAt: string;
  client: { name: string; version: string } | null;
  /** Sessions this one adopted (restore), directly; their own ancestors follow transitively. */
  ancestors: string[];
}

const SAFE_ID = /^[A-Za-z0-9_.:-]{1,128}$/;
/** How long a rebuilt (record-less) session's ancestors are reused before the markers are read again. */
const REBUILD_CACHE_MS = 5000;

/** A file-name form of a session id that is never `.`/`..` nor hidden: ids may contain dots. */
const nameOf = (id: string): string => encodeURIComponent(id).replace(/\./g, '%2E');

/**
 * The session registry: `sessions/<id>.json` per session, and each ancestor link also as its own durable file,
 * `lineage/<id>/<ancestor>.json`, written once and never rewritten, so no link depends on one session file surviving.
 * A session whose file is lost or damaged keeps its links; restores made before the links existed are rebuilt from
 * the adoption markers restore leaves in the adopted sessions' run directories (`adopted-by/<id>`).
 */
export class FileSessionRegistry implements SessionRegistry {
  readonly dir: string;
  readonly linksDir: string;
  constructor(private readonly home: string) {
    this.dir = path.join(home, 'sessions');
    this.linksDir = path.join(home, 'lineage');
  }

  /**
   * Runs `fn` (a read-merge-write of `id`'s record) under that session's cross-process lock: servers sharing a
   * session id would otherwise drop each other's ancestors.
   */
  async withRecord<T>(id: string, fn: () => T | Promise<T>): Promise<T> {
    const locks = path.join(this.home, 'locks');
    ensurePrivateDir(locks);
    // Loaded here, not with this module: the server registers its session while it starts, and the lock library is
    // not needed to answer initialize (cold start).
    const { withLock } = await import('./lock.js');
    return withLock(path.join(locks, `session-${nameOf(id)}`), fn, { what: 'session registry' });
  }

  /** The ancestors linked to `id` by link files (one readdir). */
  links(id: string): string[] {
    if (!SAFE_ID.test(id)) return [];
    try {
      return fs.readdirSync(path.join(this.linksDir, nameOf(id)))
        .filter((n) => n.endsWith('.json') && !n.startsWith('.'))
        .map((n) => decodeURIComponent(n.slice(0, -5)))
        .filter((a) => SAFE_ID.test(a) && a !== id);
    } catch {
      return [];
    }
  }

  /**
   * Records each of `ancestors` as a link of `id`, durably (file and every new directory on the way fsynced).
   * Returns the link files it created, for `unlink` if what they go with fails.
   */
  link(id: string, ancestors: string[]): string[] {
    const have = new Set(this.links(id));
    const todo = [...new Set(ancestors)].filter((a) => a !== id && SAFE_ID.test(a) && !have.has(a));
    if (!SAFE_ID.test(id) || todo.length === 0) return [];
    const dir = path.join(this.linksDir, nameOf(id));
    ensureDurablePrivateDir(this.linksDir);
    ensureDurablePrivateDir(dir);
    const made: string[] = [];
    try {
      for (const a of todo) {
        const f = path.join(dir, `${nameOf(a)}.json`);
        if (createFileExclusive(f, JSON.stringify({ v: 1, session: id, ancestor: a, at: new Date().toISOString() }))) made.push(f);
      }
    } catch (e) {
      this.unlink(made);
      throw e;
    }
    return made;
  }

  /** Takes back link files `link` created (a refused restore leaves nothing behind). */
  unlink(files: string[]): void {
    for (const f of files) try { fs.unlinkSync(f); } catch { /* already gone */ }
    if (files.length > 0) try { fsyncDir(path.dirname(files[0]!)); } catch { /* best effort */ }
  }

  private file(id: string): string | null {
    return SAFE_ID.test(id) ? path.join(this.dir, `${encodeURIComponent(id)}.json`) : null;
  }

  read(id: string): SessionRecord | null {
    const f = this.file(id);
    if (!f) return null;
    try {
      // Parses but is not a record (e.g. `[]` written over it): as damaged.
      return readStateFile<SessionRecord>(f, SessionRecordFile);
    } catch {
      return null; // damaged: callers rebuild what they need from the run records
    }
  }

  /** `durable: false` for what is not an acknowledgement (client info, a record written back): no fsync wait. */
  write(rec: SessionRecord, options: { durable?: boolean } = {}): void {
    ensurePrivateDir(this.dir);
    const f = this.file(rec.sessionId);
    if (f) writeFileAtomic(f, JSON.stringify(rec), { durable: options.durable ?? true });
  }

  exists(id: string): boolean {
    const f = this.file(id);
    return f !== null && fs.existsSync(f);
  }

  /** Every session id with a record file. */
  list(): string[] {
    try {
      return fs.readdirSync(this.dir).filter((n) => n.endsWith('.json')).map((n) => decodeURIComponent(n.slice(0, -5)));
    } catch {
      return [];
    }
  }

  /**
   * Record files that exist but do not parse as a session record: read() treats them as lost and callers rebuild
   * around them silently (docs/contract.md, invariant 6), so `doctor` names them here.
   */
  damaged(): string[] {
    const out: string[] = [];
    for (const id of this.list()) {
      const f = this.file(id);
      if (f && fs.existsSync(f) && this.read(id) === null) out.push(f);
    }
    return out;
  }

  /** Rebuilt ancestors of sessions whose record is gone, briefly cached: a rebuild reads every run directory. */
  private readonly rebuilt = new Map<string, { at: number; ids: string[] }>();

  /**
   * The ancestors of `id`: its record's and its link files'; with no record, its links and those rebuilt from adoption
   * markers under the runs (restores older than the link files; a scan of every run, so briefly cached), unless the
   * caller knows there is nothing to rebuild (`rebuild: false`).
   */
  ancestorsOf(id: string, runsDir: string, o: { rebuild?: boolean } = {}): string[] {
    const links = this.links(id);
    const rec = this.read(id);
    if (rec) return [...new Set([...rec.ancestors.filter((a) => typeof a === 'string'), ...links])];
    if (o.rebuild === false) return links;
    const hit = this.rebuilt.get(id);
    if (hit && performance.now() - hit.at < REBUILD_CACHE_MS) return [...new Set([...links, ...hit.ids])];
    const ids = rebuildAncestors(id, runsDir);
    this.rebuilt.set(id, { at: performance.now(), ids });
    return [...new Set([...links, ...ids])];
  }

  /** True when the session left a trace: its record, its link files or adoption markers it wrote (its record may have been lost). */
  knows(id: string, runsDir: string): boolean {
    if (this.exists(id) || this.links(id).length > 0) return true;
    return markerOwners(id, runsDir, true).size > 0;
  }
}

function rebuildAncestors(id: string, runsDir: string): string[] {
  return [...markerOwners(id, runsDir, false)];
}

/** Owners of the runs `id` adopted, from `runs/<run>/adopted-by/<id>.json`; `first` stops at the first one. */
function markerOwners(id: string, runsDir: string, first: boolean): Set<string> {
  const out = new Set<string>();
  if (!SAFE_ID.test(id)) return out;
  let runs: string[] = [];
  try { runs = fs.readdirSync(runsDir); } catch { return out; }
  for (const r of runs) {
    const marker = path.join(runsDir, r, 'adopted-by', `${encodeURIComponent(id)}.json`);
    const m = (() => { try { return readJsonFile<{ owner: string }>(marker); } catch { return null; } })();
    if (m?.owner && m.owner !== id) {
      out.add(m.owner);
      if (first) break;
    }
  }
  return out;
}
