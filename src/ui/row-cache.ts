import fs from 'node:fs';
import path from 'node:path';
import * as z from 'zod';
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
/** A row as the model makes it: one that is not (a damaged file, another build's) is read from its run instead. */
const cachedRow = z.object({
  runId: z.string().refine(isRunId),
  sessionId: z.string(),
  rootRunId: z.string(),
  parentRunId: z.string().nullable(),
  parentStepKey: z.string().nullable(),
  depth: z.number().int().nonnegative(),
  mode: z.string(),
  agents: z.array(z.string()),
  label: z.string().nullable(),
  state: z.string(),
  error: z.object({ code: z.string(), message: z.string() }).nullable(),
  createdAt: z.string(),
  startedAt: z.string().nullable(),
  endedAt: z.string().nullable(),
  costUsd: z.number().nullable(),
  dismissed: z.boolean(),
});

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
      for (const r of v.rows) {
        const row = cachedRow.safeParse(r);
        if (row.success) rows.set(row.data.runId, row.data satisfies RunRow);
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
