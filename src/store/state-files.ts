import type { Adapter } from 'lowdb';
import * as z from 'zod/mini';
import { SubagentError } from '../errors.js';
import { writeFileAtomicAsync, type AtomicWriteOptions } from './atomic-write.js';
import { parseStateJson, readTextNoFollow } from './json-file.js';

/**
 * The schema of each JSON state file of the state home, and the one function that reads them. A file that does not
 * parse, or parses into something else than its kind (a torn write, a stranger's file, a file of another version),
 * is STATE_CORRUPT naming the file and the first field that is wrong — never its contents — for that run or that
 * record alone (docs/contract.md, invariant 6). The schemas check what readers rely on; fields they do not read are
 * let through as they are. zod/mini: the runner's supervisor reads these too, and loads what it imports at each run.
 */

const identity = z.object({ pid: z.number(), startTime: z.string() });
const nullableIdentity = z.nullable(identity);
const runState = z.enum(['queued', 'starting', 'running', 'completed', 'failed', 'cancelled']);
const stepState = z.enum(['pending', 'running', 'completed', 'failed', 'cancelled', 'skipped']);
const error = z.nullable(z.looseObject({ code: z.string(), message: z.string() }));

const stepStatus = z.looseObject({
  index: z.number(),
  key: z.string(),
  agent: z.string(),
  state: stepState,
  startedAt: z.nullable(z.string()),
  endedAt: z.nullable(z.string()),
  process: z.optional(nullableIdentity),
  error: z.optional(error),
  members: z.optional(z.array(z.looseObject({ key: z.string(), state: stepState, startedAt: z.nullable(z.string()) }))),
});

/** `runs/<id>/status.json`. */
export const RunStatusFile = z.looseObject({
  runId: z.string(),
  state: runState,
  error,
  startedAt: z.nullable(z.string()),
  endedAt: z.nullable(z.string()),
  runner: z.optional(nullableIdentity),
  steps: z.array(stepStatus),
  appendsTaken: z.optional(z.number()),
  survivors: z.optional(z.array(identity)),
});

const agentTask = z.looseObject({ agent: z.looseObject({ name: z.string(), backend: z.string() }), task: z.string() });
const stepSpec = z.union([
  z.looseObject({ kind: z.literal('agent'), agent: z.looseObject({ name: z.string(), backend: z.string() }), task: z.string() }),
  z.looseObject({ kind: z.literal('group'), members: z.array(agentTask), concurrency: z.number(), failFast: z.boolean() }),
]);

/** `runs/<id>/run.json`. */
export const RunRecordFile = z.looseObject({
  runId: z.string(),
  sessionId: z.string(),
  mode: z.enum(['single', 'parallel', 'chain']),
  depth: z.number(),
  rootRunId: z.string(),
  parentRunId: z.nullable(z.string()),
  runToken: z.string(),
  killGraceMs: z.number(),
  server: identity,
  steps: z.array(stepSpec),
  limits: z.looseObject({ maxSpawns: z.number(), maxDepth: z.number() }),
});

/** `runs/<id>/appends/<seq>.json`. */
export const AppendFile = z.looseObject({ seq: z.number(), acceptedAt: z.string(), step: stepSpec });

/** The Redis a worker's run belongs to: its URL, pool and distributed run id (docs/scale-out.md, "Nested delegation"). */
export const DistributedLink = z.object({ url: z.string(), pool: z.string(), runId: z.string() });
export type DistributedLink = z.infer<typeof DistributedLink>;

/** `runs/<id>/distributed-link.json`: written by a worker's launch, read by the run's runner. */
export const DistributedLinkFile = DistributedLink;

/** `runs/<id>/budget/<hash>.json`: a running step's nesting grant, with its run's Redis when on a worker. */
export const BudgetGrantFile = z.looseObject({ stepKey: z.string(), redis: z.optional(DistributedLink) });

/** `runs/<id>/children/<child>.json`. */
export const ChildMarkerFile = z.looseObject({ stepKey: z.string() });

/** `runs/<id>/ready.json`: the runner's identity, as it reported it. */
export const ReadyFile = z.looseObject({ pid: z.number(), startTime: z.string() });

/** `ledger.json`. */
export const LedgerFile = z.object({
  v: z.literal(1),
  roots: z.record(z.string(), z.looseObject({ at: z.string(), server: identity, runner: nullableIdentity, handshakeMs: z.optional(z.number()), boundEarly: z.optional(z.literal(true)) })),
  trees: z.record(z.string(), z.looseObject({ used: z.number(), limit: z.number(), maxDepth: z.number() })),
  agents: z.record(z.string(), z.looseObject({ runner: identity, agent: nullableIdentity, at: z.string(), root: z.optional(z.string()) })),
  queue: z.optional(z.record(z.string(), z.looseObject({
    seq: z.number(), sessionId: z.string(), at: z.string(), deadline: z.number(), limit: z.number(), claims: z.number(), handshakeMs: z.number(),
    handoff: z.optional(z.nullable(z.looseObject({ by: identity, attempt: z.number() }))),
  }))),
  queueSeq: z.optional(z.number()),
});

/** The name of a queued run's launch file in its run directory. */
export const QUEUED_LAUNCH_FILE = 'queued.json';

/** What a queued run's launch file holds: the runner's entry and environment, and the queue entry's deadline and limit. */
export interface QueuedLaunch {
  runnerMain: string;
  env: Record<string, string>;
  deadline?: number;
  limit?: number;
}

/** `runs/<id>/queued.json`: what the process that hands a queued run its slot needs to start its runner. */
export const QueuedLaunchFile = z.looseObject({ runnerMain: z.string(), env: z.record(z.string(), z.string()) });

/** `sessions/<id>.json`. */
export const SessionRecordFile = z.looseObject({
  sessionId: z.string(),
  startedAt: z.string(),
  client: z.nullable(z.looseObject({ name: z.string(), version: z.string() })),
  ancestors: z.array(z.string()),
});

/**
 * Reads a state file of the given kind: null when it does not exist, the value when it parses into one, else
 * STATE_CORRUPT (`label` names it, e.g. `status.json of r-…`). The value keeps fields the schema does not list.
 */
export function readStateFile<T>(file: string, kind: z.ZodMiniType, label = file): T | null {
  const text = readTextNoFollow(file, label);
  if (text === null) return null;
  // A file that holds `null` is there and damaged, not missing: the schema refuses it below.
  const value = parseStateJson<unknown>(text, label);
  const r = kind.safeParse(value);
  if (r.success) return value as T;
  const where = r.error.issues[0]?.path.join('.') || 'the top level';
  throw new SubagentError('STATE_CORRUPT', `${label} parses but is not what it should be (${where} is wrong); the file is damaged. Other runs are unaffected; inspect or remove it.`);
}

/**
 * lowdb's adapter for a state file: `read` goes through the file's schema (`readStateFile`), `write` through the atomic,
 * fsynced, no-follow writer. lowdb's own file adapters are not safe across processes; this one is only used by a
 * holder of the file's lock (the ledger's, for `ledger.json`). `options` is asked at each write (durable or not).
 */
export class StateFileAdapter<T> implements Adapter<T> {
  constructor(
    private readonly file: string,
    private readonly kind: z.ZodMiniType,
    private readonly label: string,
    private readonly options: () => AtomicWriteOptions = () => ({}),
  ) {}

  async read(): Promise<T | null> {
    return readStateFile<T>(this.file, this.kind, this.label);
  }

  async write(data: T): Promise<void> {
    await writeFileAtomicAsync(this.file, JSON.stringify(data), this.options());
  }
}
