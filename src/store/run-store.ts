import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { SubagentError } from '../errors.js';
import { isRunId } from '../ids.js';
import { beginDurableReplace, createNewFile, ensureDurablePrivateDir, fsyncAndClose, fsyncDirAsync, writeFileAtomic, type PendingReplace } from './atomic-write.js';
import { fsPort } from './fs-port.js';
import { appendEvent } from './event-log.js';
import { AppendFile, ChildMarkerFile, readStateFile, RunRecordFile, RunStatusFile } from './state-files.js';
import { Layout, RunPaths } from './layout.js';
import { withLock } from './lock.js';
import { isTerminalRun, type AppendRecord, type RunRecord, type RunStatus } from './run-types.js';
import type { RunStore } from './ports.js';

/** A run's directory written under a hidden name, its fsyncs under way (`RunStore.prepare`). */
export interface PreparedRun {
  runId: string;
  tmp: RunPaths;
  synced: Promise<void>;
  /** The run's first log line, written as it is published. */
  created: { mode: RunRecord['mode']; steps: number };
}

/** A run in `runs/`; `durable` settles once its name there is on disk. */
export interface PublishedRun {
  paths: RunPaths;
  durable: Promise<void>;
}

function removeTree(dir: string): void {
  try { fs.rmSync(dir, { recursive: true, force: true }); } catch { /* best effort */ }
}

export interface UpdateOptions {
  durable?: boolean;
  /** Only the live runner passes this: its in-memory status replaces a status.json that is missing or does not parse. */
  repairFrom?: RunStatus;
}

/** Files of runs: records, status with compare-and-set of terminal states, appends, markers. */
export class FileRunStore implements RunStore {
  constructor(readonly layout: Layout) {}

  paths(runId: string): RunPaths {
    return this.layout.run(runId);
  }

  /**
   * Writes the run's directory (its record, status and `extra` files, name → content, e.g. the catalog snapshot)
   * under a hidden temp name and starts its fsyncs; nothing is in `runs/` yet. Then `publish` (or `discard`). A launch
   * prepares while its reservation's ledger write is on the disk: the writes here are main-thread work that used to
   * wait for that write, and their fsyncs run beside the ledger's. No subdirectory: each is made by its first writer
   * (`out/`, `prompts/`, `budget/` by the runner, `appends/` and `children/` by a run's first append or nested launch).
   * Every inode a launch creates costs kernel CPU, on an ext4 without a journal (this machine kind) up to ~0.75 ms
   * each, and eight launches prepare one after the other on this thread (docs/performance.md, "What limits each figure").
   */
  prepare(record: RunRecord, status: RunStatus, extra: Record<string, string> = {}): PreparedRun {
    // Built under a hidden temp name and renamed into place: a server killed mid-create leaves no half-record (a run
    // directory without its status), only a temp directory that listings never see and the next server start removes.
    const tmp = new RunPaths(path.join(this.layout.runsDir, `.${record.runId}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`));
    const written: Array<{ file: string; fd: number }> = [];
    try {
      fs.mkdirSync(tmp.dir, { mode: 0o700 });
      // Plain creates: the directory's rename at publish is what makes these files appear whole. Kept open for
      // their fsyncs (no second open of each).
      const create = (file: string, text: string) => { written.push({ file, fd: createNewFile(file, text) }); };
      create(tmp.record, JSON.stringify(record));
      create(tmp.status, JSON.stringify(status));
      for (const [name, text] of Object.entries(extra)) create(path.join(tmp.dir, name), text);
      // Fsynced together on the thread pool, the directory in the same round (both only have to precede the rename):
      // one after the other on the event loop they held up every other request of the server.
      const synced = Promise.all([fsyncAndClose(written), fsyncDirAsync(tmp.dir)]).then(() => {});
      synced.catch(() => {}); // observed by publish; unobserved only when the run is discarded
      return { runId: record.runId, tmp, synced, created: { mode: record.mode, steps: record.steps.length } };
    } catch (e) {
      for (const { fd } of written) try { fs.closeSync(fd); } catch { /* already failing */ }
      removeTree(tmp.dir);
      throw e;
    }
  }

  /**
   * Renames a prepared run into `runs/` once its files are on disk (and not before `publishAfter`, e.g. the run
   * index's own fsync, has settled: what it makes durable must be so before the run exists). Returns once the
   * directory is in place, with `durable`, which settles when its name under `runs/` is on disk too: a launch starts
   * the runner meanwhile (its boot is idle time for the server) and awaits it before it acknowledges anything.
   */
  async publish(prep: PreparedRun, publishAfter: Promise<unknown> = Promise.resolve()): Promise<PublishedRun> {
    const p = this.paths(prep.runId);
    try {
      await Promise.all([prep.synced, publishAfter]);
      // Logged now, not at the prepare: its time is when the run appears, so that a home's watcher, which orders
      // lines by their time, never finds it later with a time before lines it has shown (docs/watch-and-ui.md).
      appendEvent(prep.tmp.events, { type: 'created', ...prep.created });
      fsPort.renameSync(prep.tmp.dir, p.dir);
    } catch (e) {
      this.discard(prep);
      throw e;
    }
    // The rename is visible now (a runner started after it reads whole files); `durable` is when it survives a
    // crash of the machine, which is what an acknowledgement needs.
    const durable = fsyncDirAsync(this.layout.runsDir);
    durable.catch(() => {}); // observed by the caller; unobserved only when the caller failed first
    return { paths: p, durable };
  }

  /** Removes a prepared run that will not be published. */
  discard(prep: PreparedRun): void {
    removeTree(prep.tmp.dir);
  }

  exists(runId: string): boolean {
    return isRunId(runId) && fs.existsSync(this.paths(runId).record);
  }

  readRecord(runId: string): RunRecord | null {
    return readStateFile<RunRecord>(this.paths(runId).record, RunRecordFile, `run.json of ${runId}`);
  }

  readStatus(runId: string): RunStatus | null {
    // Parsing is not enough: a file that is JSON but not a status ([], a stranger's object) is damage too.
    return readStateFile<RunStatus>(this.paths(runId).status, RunStatusFile, `status.json of ${runId}`);
  }

  /** Runs `fn` holding the run's lock: every status write and every append decision happen under it. */
  withRunLock<T>(runId: string, fn: () => T | Promise<T>): Promise<T> {
    return withLock(this.paths(runId).lockTarget, fn, { what: `run ${runId}` });
  }

  /**
   * Read-modify-write of status under the run lock. A terminal state never changes again: once the stored state is
   * terminal, `mutate` is not called and the stored status is returned (the first terminal state wins).
   */
  async update(runId: string, mutate: (s: RunStatus) => RunStatus | null, options: UpdateOptions = {}): Promise<RunStatus> {
    return this.withRunLock(runId, () => this.updateLocked(runId, mutate, options));
  }

  /** The same, for a caller that already holds the run lock. */
  updateLocked(runId: string, mutate: (s: RunStatus) => RunStatus | null, options: UpdateOptions = {}): RunStatus {
    let current: RunStatus | null;
    try {
      current = this.readStatus(runId);
    } catch (e) {
      if (!options.repairFrom) throw e;
      current = null;
    }
    if (!current && options.repairFrom) {
      // The live runner is the single writer and knows the truth: a damaged or vanished file is rewritten from it.
      current = structuredClone(options.repairFrom);
      this.event(runId, { type: 'status-repaired' });
    }
    if (!current) throw new SubagentError('STATE_CORRUPT', `status.json of ${runId} is missing.`);
    if (isTerminalRun(current.state)) return current;
    const next = mutate(structuredClone(current));
    if (!next) return current;
    next.updatedAt = new Date().toISOString();
    const durable = options.durable ?? isTerminalRun(next.state);
    writeFileAtomic(this.paths(runId).status, JSON.stringify(next), { durable });
    return next;
  }

  /**
   * The durable write of a run's next status in two halves (`beginDurableReplace`), for a caller that holds the run
   * lock, read the status under it, and has more to do under it before the new one may show (a runner's end returns
   * the ledger first). Nothing else writes the status while the lock is held, so the compare-and-set `updateLocked`
   * does is the caller's read. Stamps `updatedAt`.
   */
  beginStatusWrite(runId: string, next: RunStatus): PendingReplace {
    next.updatedAt = new Date().toISOString();
    return beginDurableReplace(this.paths(runId).status, JSON.stringify(next));
  }

  listRunIds(): string[] {
    let names: string[];
    try {
      names = fs.readdirSync(this.layout.runsDir);
    } catch {
      return [];
    }
    return names.filter(isRunId);
  }

  readAppends(runId: string): AppendRecord[] {
    const dir = this.paths(runId).appendsDir;
    let names: string[] = [];
    try {
      names = fs.readdirSync(dir).filter((n) => /^\d{6}\.json$/.test(n)).sort();
    } catch { /* none */ }
    const out: AppendRecord[] = [];
    for (const n of names) {
      const rec = readStateFile<AppendRecord>(path.join(dir, n), AppendFile, `append ${n} of ${runId}`);
      if (rec) out.push(rec);
    }
    return out;
  }

  /** Durable before `append` answers (docs/contract.md, invariant 1). Caller holds the run lock. */
  writeAppend(runId: string, rec: AppendRecord): void {
    ensureDurablePrivateDir(this.paths(runId).appendsDir); // made by the run's first append
    writeFileAtomic(this.paths(runId).appendFile(rec.seq), JSON.stringify(rec));
  }

  isDismissed(runId: string): boolean {
    return fs.existsSync(this.paths(runId).dismissed);
  }

  markDismissed(runId: string, sessionId: string): void {
    writeFileAtomic(this.paths(runId).dismissed, JSON.stringify({ at: new Date().toISOString(), by: sessionId }));
  }

  /** Nested runs launched from a step of this run (each nested launch writes a marker here). */
  children(runId: string): Array<{ runId: string; stepKey: string }> {
    const dir = this.paths(runId).childrenDir;
    let names: string[] = [];
    try {
      names = fs.readdirSync(dir);
    } catch { /* none */ }
    const out: Array<{ runId: string; stepKey: string }> = [];
    for (const n of names) {
      const m = /^(r-[A-Za-z0-9_-]{24})\.json$/.exec(n);
      if (!m) continue;
      const rec = readStateFile<{ stepKey: string }>(path.join(dir, n), ChildMarkerFile);
      if (rec) out.push({ runId: m[1]!, stepKey: rec.stepKey });
    }
    return out;
  }

  addChild(parentRunId: string, childRunId: string, stepKey: string): void {
    ensureDurablePrivateDir(this.paths(parentRunId).childrenDir); // made by the run's first nested launch
    writeFileAtomic(path.join(this.paths(parentRunId).childrenDir, `${childRunId}.json`), JSON.stringify({ stepKey }));
  }

  event(runId: string, event: { type: string; [k: string]: unknown }): void {
    try {
      appendEvent(this.paths(runId).events, event);
    } catch { /* the event log is best effort; status is the record */ }
  }
}
