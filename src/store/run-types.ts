import type { FrozenAgent } from '../agents/types.js';
import type { ProcessIdentity } from '../process/identity.js';
import type { RunErrorCode } from '../errors.js';

export type RunState = 'queued' | 'starting' | 'running' | 'completed' | 'failed' | 'cancelled';
export type StepState = 'pending' | 'running' | 'completed' | 'failed' | 'cancelled' | 'skipped';
export type RunMode = 'single' | 'parallel' | 'chain';

export const TERMINAL_RUN_STATES: readonly RunState[] = ['completed', 'failed', 'cancelled'];
export const TERMINAL_STEP_STATES: readonly StepState[] = ['completed', 'failed', 'cancelled', 'skipped'];
export const isTerminalRun = (s: RunState): boolean => TERMINAL_RUN_STATES.includes(s);
export const isTerminalStep = (s: StepState): boolean => TERMINAL_STEP_STATES.includes(s);

export interface AgentTaskSpec {
  agent: FrozenAgent;
  task: string;
  model?: string;
}

export type StepSpec =
  | ({ kind: 'agent' } & AgentTaskSpec)
  | { kind: 'group'; members: AgentTaskSpec[]; concurrency: number; failFast: boolean };

/** Limits of a run tree, fixed when its root is launched (docs/contract.md, "Settings"). */
export interface TreeLimits {
  maxSpawns: number;
  maxDepth: number;
}

/** The immutable launch record (`run.json`), written and fsynced before the runner is spawned. */
export interface RunRecord {
  v: 1;
  runId: string;
  sessionId: string;
  mode: RunMode;
  cwd: string;
  label: string | null;
  createdAt: string;
  /** Whole-run limit, or null. */
  timeoutMs: number | null;
  defaultStepTimeoutMs: number;
  killGraceMs: number;
  handshakeTimeoutMs: number;
  maxOutputBytes: number;
  maxAgents: number;
  /** Names and globs of pass-through variables (SUBAGENTS_PASS_ENV), for the agents' environment. */
  passEnv: string[];
  /** The user's umask, restored for agents (server and runner use 077). */
  umask: number;
  /** Top-level runs are depth 0; their agents depth 1. */
  depth: number;
  rootRunId: string;
  parentRunId: string | null;
  parentStepKey: string | null;
  limits: TreeLimits;
  /** Random per run; every agent process carries it as SUBAGENTS_RUN_TOKEN. */
  runToken: string;
  /** The server that launched it (a reservation of a dead launcher is reclaimed). */
  server: ProcessIdentity;
  steps: StepSpec[];
  /** Worktree isolation, resolved at launch (docs/agents.md, "Worktree isolation"); absent when no static step asked for it. */
  isolation?: RunIsolation | null;
}

/** What a launch froze for isolated steps: the repository, the base commit and how the cwd maps into a worktree. */
export interface RunIsolation {
  /** `all`: the launch asked for it (every step); `agents`: only steps whose agent file says `isolation: worktree`. */
  scope: 'all' | 'agents';
  /** Absolute path of the git executable. */
  git: string;
  /** The repository's top level. */
  repo: string;
  /** The repository's shared git directory (keys the per-repository lock). */
  commonDir: string;
  /** The cwd relative to the top level: the agent starts at the same place inside its worktree. */
  cwdRel: string;
  /** What the caller named (`baseRef`), or null for HEAD. */
  baseRef: string | null;
  /** The commit it named at launch: the first isolated step's base. */
  baseCommit: string;
}

/** An isolated step's result: its branch and what it changed from its base (`status` shows it as `changes`). */
export interface StepChanges {
  branch: string;
  commit: string;
  base: string;
  files: number;
  insertions: number;
  deletions: number;
  /** The repository the branch is in (not shown: `gc --branches` needs it). */
  repo: string;
}

export interface StepError {
  code: RunErrorCode;
  /** Built from codes, names and numbers only: listings and notifications show it. */
  message: string;
  /** What the agent said about it (its CLI's error text, its stderr's last line): only the run's full status shows it. */
  detail?: string;
}

export interface StepStatus {
  index: number;
  /** `0`, `3`, or `3.1` for member 1 of step 3: names the step's files. */
  key: string;
  agent: string;
  state: StepState;
  exitCode: number | null;
  signal: string | null;
  startedAt: string | null;
  endedAt: string | null;
  /** The agent process, with its start time (evidence, and the identity any later signal is checked against). */
  process: ProcessIdentity | null;
  usage: Record<string, number> | null;
  costUsd: number | null;
  error: StepError | null;
  /** Bytes the agent wrote as output (counted even past the cap), and whether the stored copy was cut. */
  outputBytes: number;
  outputTruncated: boolean;
  /** Set for appended steps: the append sequence number. */
  appendSeq: number | null;
  members?: StepStatus[];
  /** Isolated steps only: set when the step's worktree was committed. */
  changes?: StepChanges | null;
}

/** `status.json`: the runner is its single writer while it lives; others write it only under the run lock, with CAS on terminal states. */
export interface RunStatus {
  v: 1;
  runId: string;
  state: RunState;
  error: StepError | null;
  startedAt: string | null;
  endedAt: string | null;
  updatedAt: string;
  runner: ProcessIdentity | null;
  steps: StepStatus[];
  /** Highest append sequence number the runner has taken into `steps`. */
  appendsTaken: number;
  /** Processes that survived SIGKILL (listed by cancel). */
  survivors: ProcessIdentity[];
  /**
   * Descendants of its agents that left both the run's process group and its run token, found by the runner's
   * tracking (src/process/escape-tracker.ts) and stopped by it: pid, start time and command, for the record.
   */
  escaped?: Array<ProcessIdentity & { command: string }>;
  /** For RUNNER_LOST: the end of the runner's own log (its crash reason; never agent output). */
  runnerLogTail?: string;
  /**
   * A queued run's start attempt (docs/limits.md, "The queue"): set by each hand-off that starts it. Its runner is told
   * its attempt and claims the start only if it is still the current one, so a runner of an attempt whose hand-off
   * died can never start the run beside the one the repair started.
   */
  attempt?: number;
  /** The process handing a queued run its slot (it acts as the launcher): a dead one leaves the repair to others. */
  launcher?: ProcessIdentity | null;
}

/** An accepted `append` (`appends/<seq>.json`): durable before the tool answers. */
export interface AppendRecord {
  seq: number;
  acceptedAt: string;
  step: StepSpec;
}

/** The agent slots a nested launch needs to start at once: its first step's width (what it reserves, what a rebuild restores). */
export function firstStepWidth(steps: StepSpec[]): number {
  const s = steps[0];
  if (!s) return 0;
  return s.kind === 'agent' ? 1 : Math.min(s.concurrency, s.members.length);
}

/** Agents of the run that never started: each still holds the fan-out claim its launch or append made. */
export function unstartedAgents(status: RunStatus): number {
  let n = 0;
  for (const st of status.steps) {
    if (st.members) n += st.members.filter((m) => m.startedAt === null).length;
    else if (st.startedAt === null) n++;
  }
  return n;
}
