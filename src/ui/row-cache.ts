import fs from 'node:fs';
import path from 'node:path';
import { isRunId } from '../ids.js';
import { ensurePrivateDir, writeFileAtomicAsync } from '../store/atomic-write.js';
import { readTextNoFollow } from '../store/json-file.js';
import type { RunRow } from './model.js';

/**
 * The dashboard's rows of ended runs, kept between its starts in `<home>/cache/ui-rows.json`: terminal is final, so an
 * ended run's row never goes stale, and a start with 10 000 runs in the home reads one file instead of 20 000 (each
 * run's record and status). Only what can change is looked at again: whether the run still exists (the names in
 * `runs/`) and whether it was dismissed. Losing or damaging the file costs one slow start, nothing else.
 */
export class RowCache {
  readonly file: string;

  constructor(home: string) {
    this.file = path.join(home, 'cache', 'ui-rows.json');
  }

  read(): Map<string, RunRow> {
    const rows = new Map<string, RunRow>();
    try {
      const v = JSON.parse(readTextNoFollow(this.file) ?? '') as { v?: number; rows?: unknown };
      if (v.v !== 1 || !Array.isArray(v.rows)) return rows;
      for (const r of v.rows as RunRow[]) {
        if (r && typeof r === 'object' && typeof r.runId === 'string' && isRunId(r.runId) && typeof r.state === 'string' && typeof r.createdAt === 'string') rows.set(r.runId, r);
      }
    } catch { /* absent or damaged: rebuilt from the runs */ }
    return rows;
  }

  async write(rows: RunRow[]): Promise<void> {
    ensurePrivateDir(path.dirname(this.file));
    await writeFileAtomicAsync(this.file, JSON.stringify({ v: 1, rows: rows.map((r) => ({ ...r, dismissed: false })) }), { durable: false });
  }

  exists(): boolean {
    return fs.existsSync(this.file);
  }
}
