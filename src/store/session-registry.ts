import fs from 'node:fs';
import path from 'node:path';
import { writeFileAtomic, ensurePrivateDir } from './atomic-write.js';
import { readJsonFile } from './json-file.js';

/** One session's record. Each file has a single writer (its own server), so no lock is needed. */
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

/**
 * The session registry: `sessions/<id>.json` per session. If one is lost or damaged, its ancestors are rebuilt from
 * the adoption markers restore leaves in the adopted sessions' run directories (`adopted-by/<id>`).
 */
export class SessionRegistry {
  readonly dir: string;
  constructor(private readonly home: string) {
    this.dir = path.join(home, 'sessions');
  }

  private file(id: string): string | null {
    return SAFE_ID.test(id) ? path.join(this.dir, `${encodeURIComponent(id)}.json`) : null;
  }

  read(id: string): SessionRecord | null {
    const f = this.file(id);
    if (!f) return null;
    try {
      const rec = readJsonFile<SessionRecord>(f);
      // Parses but is not a record (e.g. `null` or `[]` written over it): as damaged.
      return rec && typeof rec === 'object' && Array.isArray(rec.ancestors) ? rec : null;
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
   * around them silently (SPEC §8.6), so `doctor` names them here.
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

  /** The ancestors of `id`: from its record, else rebuilt from adoption markers under the runs. */
  ancestorsOf(id: string, runsDir: string): string[] {
    const rec = this.read(id);
    if (rec) return Array.isArray(rec.ancestors) ? rec.ancestors.filter((a) => typeof a === 'string') : [];
    const hit = this.rebuilt.get(id);
    if (hit && performance.now() - hit.at < REBUILD_CACHE_MS) return hit.ids;
    const ids = rebuildAncestors(id, runsDir);
    this.rebuilt.set(id, { at: performance.now(), ids });
    return ids;
  }

  /** True when the session left a trace: its record, or adoption markers it wrote (its record may have been lost). */
  knows(id: string, runsDir: string): boolean {
    if (this.exists(id)) return true;
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
