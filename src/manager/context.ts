import type { Settings } from '../config.js';
import { selfIdentity, type ProcessIdentity } from '../process/identity.js';
import { fileStatePorts, type StatePorts } from '../lifecycle/state-ports.js';
import type { Layout } from '../store/layout.js';
import type { CapacityLedger, RunStore, SessionRegistry } from '../store/ports.js';
import type { NestingContext } from './nesting.js';
import type { ChainEntryInput, LaunchInput, LaunchResult } from './launch.js';
import type { AppendResult } from './append.js';
import type { StatusAnswer, StatusQuery } from './run-status.js';
import type { CancelResult } from './cancel.js';
import type { DismissResult } from './dismiss.js';
import type { RestoreResult } from './sessions.js';
import type { RunSummary } from './status-view.js';
import type { RunStatus } from '../store/run-types.js';
import type { FeedEntry } from '../store/redis/feed.js';

/** Everything a use-case needs: settings, the state home, who we are. Built once per server process. */
export interface ManagerContext {
  settings: Settings;
  layout: Layout;
  store: RunStore;
  /** Capacity, agent slots and fan-out budgets (src/store/ports.ts). */
  ledger: CapacityLedger;
  sessionRegistry: SessionRegistry;
  sessionId: string;
  /** This server process (reservations of a dead launcher are reclaimed by it). */
  server: ProcessIdentity;
  /** The roots a run's cwd must resolve inside, realpath'd; [] when none are configured. */
  roots: () => string[];
  /** Non-null when started by an agent with a valid SUBAGENTS_BUDGET: launches are nested. */
  nesting: NestingContext | null;
  /** Sessions whose runs this session adopted (restore), its own included. */
  visibleSessions: () => ReadonlySet<string>;
  /** The environment this server was started with (agents get an allowlisted part of it). */
  env: NodeJS.ProcessEnv;
  log: (line: string) => void;
  /**
   * Distributed mode (SUBAGENTS_REDIS_URL, docs/scale-out.md): launch, status and cancel go to Redis and the pool's
   * workers instead of this home's runners. Absent in local mode.
   */
  distributed?: DistributedRuns;
}

/** Where a follower of the Redis feed starts: after a cursor, at the start, at a time (epoch ms), or from now on. */
export type FeedSince = { cursor: string } | 'start' | { sinceMs: number } | null;

/** The use cases that distributed mode serves from Redis (src/manager/distributed/). */
export interface DistributedRuns {
  launch(ctx: ManagerContext, input: LaunchInput): Promise<LaunchResult>;
  status(ctx: ManagerContext, q: StatusQuery, o: { signal: AbortSignal }): Promise<StatusAnswer>;
  cancel(ctx: ManagerContext, runId: string): Promise<CancelResult>;
  dismiss(ctx: ManagerContext, runId: string, cancel: boolean): Promise<DismissResult>;
  append(ctx: ManagerContext, runId: string, entry: ChainEntryInput): Promise<AppendResult>;
  /** Adopts the runs of the named sessions and their ancestors; the lineage is kept in Redis. */
  restore(ctx: ManagerContext, lineage: string[]): Promise<RestoreResult>;
  /** Bytes of a run's stored output, a step's (or its patch), or its events as JSON lines, for the MCP resources; RUN_NOT_FOUND if not visible. */
  readBytes(ctx: ManagerContext, runId: string, part: 'output' | 'events' | { step: string; patch?: boolean }, offset: number, length: number): Promise<{ buf: Buffer; size: number }>;
  runState(ctx: ManagerContext, runId: string): Promise<{ createdAt: string; status: RunStatus }>;
  watch(runId: string, onChange: () => void): Promise<() => void>;
  /** The command line's view: every run (newest first), and a run id from a unique prefix. */
  everyRun(all: boolean): Promise<RunSummary[]>;
  resolveRunId(arg: string): Promise<string>;
  /** With `branches`, the workers that ran the removed isolated runs are asked to delete their branches. */
  collectGarbage(olderThanMs: number, dryRun: boolean, branches?: boolean): Promise<{ removed: Array<{ runId: string; endedAt: string; dismissed: boolean }>; keptActive: number; keptRecent: number; dryRun: boolean; branchesAsked?: number }>;
  /**
   * Every run's events as Redis records them (docs/watch-and-ui.md, "`watch` over Redis"), after `since` (a cursor from an
   * earlier entry, `start`, a time, or null: from now on), until `signal` aborts.
   */
  follow(since: FeedSince, signal: AbortSignal, onEntries: (entries: FeedEntry[]) => void | Promise<void>, onPlaced?: () => void, onAway?: (reason: string | null) => void): Promise<void>;
  /** The sessions whose runs this session sees: its own and those it restored, transitively (kept in Redis). */
  lineage(ctx: ManagerContext): Promise<Set<string>>;
  /** For doctor: Redis reachable, its version and persistence, the workers seen by heartbeat. */
  health(): Promise<DistributedHealth>;
  close(): Promise<void>;
}

export interface DistributedHealth {
  url: string;
  pool: string;
  reachable: boolean;
  problem?: string;
  version?: string;
  persistence?: { aof: boolean; rdb: boolean };
  /** Workers whose last heartbeat is recent (within three stall intervals), per pool. */
  workers: Array<{ id: string; host: string; pool: string; concurrency: number; running: number; lastSeenMs: number }>;
  active?: number;
  queued?: number;
  /** Agent slots held across the deployment. */
  agents?: number;
}

/** The built runner entry and the bundled agents (src/paths.ts: correct in the tsc build and in the bundle). */
export { RUNNER_MAIN, BUNDLED_AGENTS_DIR } from '../paths.js';

/** The state home's ports (src/lifecycle/state-ports.ts), and this process as the context names it (`server`). */
export function makeStore(settings: Settings): Omit<StatePorts, 'sessions'> & { sessionRegistry: SessionRegistry; server: ProcessIdentity } {
  const { layout, store, ledger, sessions } = fileStatePorts(settings.home);
  return { layout, store, ledger, sessionRegistry: sessions, server: selfIdentity() };
}
