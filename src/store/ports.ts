import type { PendingReplace } from './atomic-write.js';
import type { Layout, RunPaths } from './layout.js';
import type { Ledger } from './ledger.js';
import type { PreparedRun, PublishedRun, UpdateOptions } from './run-store.js';
import type { AppendRecord, RunRecord, RunStatus } from './run-types.js';
import type { SessionRecord } from './session-registry.js';

/*
 * The state the processes of a state home share, as interfaces: the files under the home implement them today
 * (`FileRunStore`, `FileLedger`, `FileSessionRegistry`); another store (Redis) plugs in where they are built,
 * `fileStatePorts` in src/lifecycle/state-ports.ts. What an implementation must guarantee: docs/architecture.md, "Seams".
 */

/**
 * Runs' records, statuses, appends and markers. A run's working files (output, prompts, event log, worktrees) stay
 * on disk under `paths()`, whatever holds the rest.
 */
export interface RunStore {
  readonly layout: Layout;
  paths(runId: string): RunPaths;
  /** A run's record and first status, not yet visible to anyone (`publish` makes them so, `discard` drops them). */
  prepare(record: RunRecord, status: RunStatus, extra?: Record<string, string>): PreparedRun;
  publish(prep: PreparedRun, publishAfter?: Promise<unknown>): Promise<PublishedRun>;
  discard(prep: PreparedRun): void;
  exists(runId: string): boolean;
  readRecord(runId: string): RunRecord | null;
  readStatus(runId: string): RunStatus | null;
  /** Runs `fn` holding the run's cross-process lock (every status write and append decision happens under it). */
  withRunLock<T>(runId: string, fn: () => T | Promise<T>): Promise<T>;
  /** Read-modify-write of a status under the run lock; a terminal status is returned unchanged, `mutate` not called. */
  update(runId: string, mutate: (s: RunStatus) => RunStatus | null, options?: UpdateOptions): Promise<RunStatus>;
  /** The same, for a caller that holds the run lock. */
  updateLocked(runId: string, mutate: (s: RunStatus) => RunStatus | null, options?: UpdateOptions): RunStatus;
  /**
   * A durable write of `next` over the status the caller read holding the run lock, begun now (the file written, its
   * fsync under way) and published by `commit`, still under the lock: for an end with more work before it may show.
   */
  beginStatusWrite(runId: string, next: RunStatus): PendingReplace;
  listRunIds(): string[];
  readAppends(runId: string): AppendRecord[];
  /** Durable when it returns; the caller holds the run lock. */
  writeAppend(runId: string, rec: AppendRecord): void;
  isDismissed(runId: string): boolean;
  markDismissed(runId: string, sessionId: string): void;
  children(runId: string): Array<{ runId: string; stepKey: string }>;
  addChild(parentRunId: string, childRunId: string, stepKey: string): void;
  /** Best effort: never throws. */
  event(runId: string, event: { type: string; [k: string]: unknown }): void;
}

/** The state home's one ledger: capacity slots of top-level runs, agent slots, run trees' fan-out budgets. */
export interface CapacityLedger {
  /**
   * Applies `fn` to the ledger atomically across every process of the home and stores what it changed; `fn` is
   * synchronous and a throw from it undoes its own change only. `durable: false` for changes nobody is acknowledged
   * (agent slots). Rejects with `BUSY` when the ledger stays locked past its bound.
   */
  change<T>(fn: (l: Ledger) => T, options?: { durable?: boolean }): Promise<T>;
  /** A snapshot without the lock (never blocks on it); a damaged ledger is read as rebuilt from the runs that live. */
  read(): Ledger;
  /** A snapshot without the lock that never rebuilds: null for a damaged ledger. */
  peek(): Ledger | null;
}

/** Sessions' records and their lineage (which sessions each adopted by restore). */
export interface SessionRegistry {
  /** Runs `fn` (a read-merge-write of `id`'s record) holding that session's cross-process lock. */
  withRecord<T>(id: string, fn: () => T | Promise<T>): Promise<T>;
  links(id: string): string[];
  /** Records ancestor links of `id`, durably, never rewritten; returns undo handles for `unlink`. */
  link(id: string, ancestors: string[]): string[];
  unlink(handles: string[]): void;
  read(id: string): SessionRecord | null;
  write(rec: SessionRecord, options?: { durable?: boolean }): void;
  exists(id: string): boolean;
  list(): string[];
  /** Where records that exist but do not parse are (for `doctor`). */
  damaged(): string[];
  ancestorsOf(id: string, runsDir: string, o?: { rebuild?: boolean }): string[];
  knows(id: string, runsDir: string): boolean;
}
