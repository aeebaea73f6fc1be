/**
 * Every Redis key and channel of distributed mode (docs/scale-out.md, "What lives in Redis"), in one place. One Redis
 * is one deployment: capacity, agent slots and budgets are shared by every pool in it, as the state home's ledger is
 * shared by every server of a home. Keys are prefixed `sa:` and never contain anything but ids.
 */
export const PREFIX = 'sa:';

export const keys = {
  /** SET of run ids holding an active-run slot (SUBAGENTS_MAX_ACTIVE_RUNS). */
  active: `${PREFIX}active`,
  /** ZSET of run ids waiting for a slot, scored by their acceptance order. */
  queued: `${PREFIX}queued`,
  /** The acceptance counter the queue is ordered by. */
  queueSeq: `${PREFIX}queue-seq`,
  /** HASH run id → agent slots the run holds (SUBAGENTS_MAX_AGENTS), and their total under `agentsTotal`. */
  agents: `${PREFIX}agents`,
  agentsTotal: `${PREFIX}agents-total`,
  /** Agent starts claimed by a run tree (SUBAGENTS_MAX_SPAWNS_PER_RUN). */
  fanout: (rootRunId: string) => `${PREFIX}fanout:${rootRunId}`,
  /** HASH of one run: record, status, state, worker, host, localRunId. */
  run: (runId: string) => `${PREFIX}run:${runId}`,
  /** HASH of a run's nested runs: child run id → the parent's step key that launched it. */
  children: (runId: string) => `${PREFIX}run:${runId}:children`,
  /** LIST of a run's events, JSON lines in order. */
  events: (runId: string) => `${PREFIX}run:${runId}:events`,
  /** STRING of one step's output (`run` for the run's own output), capped at SUBAGENTS_MAX_OUTPUT_BYTES. */
  output: (runId: string, stepKey: string) => `${PREFIX}run:${runId}:out:${stepKey}`,
  /** ZSET of every run id, scored by creation time (the command line's `runs` and id prefixes). */
  allRuns: `${PREFIX}runs`,
  /** ZSET of a session's run ids, scored by creation time. */
  sessionRuns: (sessionId: string) => `${PREFIX}session:${sessionId}:runs`,
  /** SET of a session's direct ancestors (restore): links are added, never removed. */
  sessionAncestors: (sessionId: string) => `${PREFIX}session:${sessionId}:ancestors`,
  /**
   * STREAM of every run's events, in the order Redis recorded them (fields run, session, event JSON): what `watch`
   * and a server's list-change notifications follow. Trimmed to about FEED_MAX_LEN entries.
   */
  feed: `${PREFIX}feed`,
  /** HASH worker id → heartbeat JSON (host, pool, concurrency, running, at). */
  workers: `${PREFIX}workers`,
};

/** About how many events the feed keeps (XADD MAXLEN ~): a watcher resumes from a cursor at most this far back. */
export const FEED_MAX_LEN = 100_000;

export const channels = {
  /** PUBLISHed on every change of a run's status: a waiting `status` wakes on it. */
  run: (runId: string) => `${PREFIX}run:${runId}`,
  /** Cancel requests of a pool's runs; the worker holding the run acts on it. */
  cancel: (pool: string) => `${PREFIX}cancel:${pool}`,
  /** Append requests of a pool's chains (JSON { runId, requestId, entry }); the holder answers on `reply`. */
  append: (pool: string) => `${PREFIX}append:${pool}`,
  reply: (requestId: string) => `${PREFIX}reply:${requestId}`,
  /** Dismissed runs of a pool (their id): the worker whose home still has their worktrees removes them. */
  cleanup: (pool: string) => `${PREFIX}cleanup:${pool}`,
};

/** BullMQ queue name of a pool (docs/scale-out.md, "Pools and roots"). BullMQ adds its own `bull:` prefix. */
export const queueName = (pool: string) => `subagents-${pool}`;
