import * as z from 'zod';

/**
 * Tool input and output schemas. Inputs are flat objects whose properties are all optional (no top-level
 * oneOf/anyOf/allOf, no $ref: several model APIs reject those, and with them every tool of the session); which
 * combination is valid is checked by the handler, which answers INVALID_INPUT. `schemas/` is generated from these.
 */

export const MAX_TASK_BYTES = 1024 * 1024;
export const MAX_LABEL_CHARS = 200;
export const MAX_MEMBERS = 64;
export const MAX_CHAIN_STEPS = 64;
export const MAX_CONCURRENCY = 16;

const agentName = z.string().min(1).max(64).describe('Agent name, as listed by the agents tool');
const taskText = z.string().min(1).max(MAX_TASK_BYTES).describe('The task, sent to the agent on stdin (≤ 1 MiB)');
const concurrency = z.number().int().min(1).max(MAX_CONCURRENCY).describe('Members running at once (default 4)');
const failFast = z.boolean().describe('Stop the group at the first failed member: unstarted members are skipped, running ones cancelled');
const runId = z.string().min(1).max(128).describe('Run id returned by launch');

export const AgentTaskSchema = z.object({ agent: agentName, task: taskText }).strict();
/** A chain entry is either `{ agent, task }` or `{ parallel, concurrency?, failFast? }`: one object, checked by the handler. */
export const ChainEntrySchema = z.object({
  agent: agentName.optional(),
  task: taskText.optional(),
  parallel: z.array(AgentTaskSchema).min(1).max(MAX_MEMBERS).optional().describe('A parallel group inside the chain'),
  concurrency: concurrency.optional(),
  failFast: failFast.optional(),
}).strict();

export const LaunchInput = z.object({
  agent: agentName.optional().describe('Single run: the agent (with task)'),
  task: taskText.optional().describe('Single run: the task (with agent)'),
  tasks: z.array(AgentTaskSchema).min(1).max(MAX_MEMBERS).optional().describe('Parallel run: members [{ agent, task }]'),
  chain: z.array(ChainEntrySchema).min(1).max(MAX_CHAIN_STEPS).optional()
    .describe('Chain run: steps, each { agent, task } or { parallel: [...] }; "{previous}" in a task is replaced by the previous step\'s final text'),
  concurrency: concurrency.optional(),
  failFast: failFast.optional(),
  cwd: z.string().min(1).max(4096).optional().describe('Working directory, relative to the first root (default: the first root)'),
  timeoutMs: z.number().int().min(1).optional().describe('Time limit of the whole run in ms'),
  label: z.string().max(MAX_LABEL_CHARS).optional().describe('A short label shown in listings'),
  model: z.string().min(1).max(128).optional().describe("One of the agent's `models`"),
  queue: z.boolean().optional().describe('At a full home the run is queued and starts by itself when a slot frees (default true); false: refuse CAPACITY_EXHAUSTED instead'),
  queueTimeoutMs: z.number().int().min(1).optional().describe('How long a queued run may wait for a slot before it ends failed/QUEUE_TIMEOUT (default SUBAGENTS_QUEUE_TIMEOUT_MS)'),
  isolation: z.enum(['worktree']).optional()
    .describe('"worktree": each step (each group member) runs in its own git worktree on a branch subagents/<runId>/<step>, committed when it ends'),
  baseRef: z.string().min(1).max(256).optional().describe('With isolation: the branch, tag or commit the first step starts from (default: HEAD of the cwd\'s repository)'),
}).strict();

export const StatusInput = z.object({
  runId: runId.optional().describe('One run in full; omit to list this session\'s runs'),
  waitMs: z.number().int().min(0).optional().describe('Long-poll: block up to this many ms (capped at 45 s) until something changes. Use this instead of sleeping between polls.'),
  until: z.enum(['change', 'terminal']).optional().describe('With waitMs and runId: "terminal" waits for the end, "change" (default) for any state change'),
  all: z.boolean().optional().describe('List dismissed runs too'),
  outputBytes: z.number().int().min(256).max(64 * 1024).optional().describe('Inline output budget for the whole result (default 8192, max 65536)'),
}).strict();

export const AppendInput = z.object({
  runId: runId.optional(),
  step: ChainEntrySchema.optional().describe('{ agent, task } or { parallel: [...], concurrency?, failFast? }'),
}).strict();

export const RestoreInput = z.object({
  lineage: z.array(z.string().min(1).max(128)).min(1).max(32).optional().describe('Earlier sessionIds of this conversation, newest first'),
}).strict();

export const DismissInput = z.object({
  runId: runId.optional(),
  cancel: z.boolean().optional().describe('Cancel the run first if it is still active'),
}).strict();

export const CancelInput = z.object({ runId: runId.optional() }).strict();
export const AgentsInput = z.object({}).strict();

export const DashboardInput = z.object({
  view: z.enum(['list', 'run', 'output']).optional().describe('What to answer (default "list"): the run tree, one run in full, or one step\'s output tail. The dashboard page asks for these itself'),
  runId: runId.optional().describe('For view "run" and "output"'),
  step: z.string().min(1).max(20).optional().describe('For view "output": the step key, e.g. "0" or "2.1"'),
  state: z.string().max(20).optional().describe('For view "list": all, active, ended, or one run state'),
  agent: z.string().max(64).optional().describe('For view "list": only trees with a run of this agent'),
  q: z.string().max(200).optional().describe('For view "list": search labels and run ids'),
  all: z.boolean().optional().describe('For view "list": include dismissed runs'),
  page: z.number().int().min(1).max(1_000_000).optional().describe('For view "list": the page, newest first (50 run trees a page)'),
  bytes: z.number().int().min(1).max(256 * 1024).optional().describe('For view "output": how many bytes of the end of the output (default 16384)'),
}).strict();

// ---- outputs ---------------------------------------------------------------------------------------------

const ErrorInfo = z.object({ code: z.string(), message: z.string(), detail: z.string().optional() }).nullable();
const Fanout = z.object({ used: z.number(), limit: z.number(), remaining: z.number() });
const Capacity = z.object({ active: z.number(), limit: z.number(), queued: z.number().optional().describe('Launches waiting in the queue') });
const QueuePlace = z.object({ position: z.number(), length: z.number() }).describe('While queued: 1-based place in the queue (it only decreases) and the queue\'s length');
const TextView = z.object({ text: z.string(), bytes: z.number(), truncated: z.boolean() });

const Changes = z.object({
  branch: z.string(), commit: z.string(), base: z.string(), files: z.number(), insertions: z.number(), deletions: z.number(),
}).describe('An isolated step\'s branch and what it changed from its base; the patch is the resource …/steps/{index}/patch');

const StepView = z.object({
  index: z.number(), agent: z.string(), state: z.string(), exitCode: z.number().nullable(), signal: z.string().nullable(),
  startedAt: z.string().nullable(), endedAt: z.string().nullable(), pid: z.number().nullable(), output: TextView,
  stderrTail: z.string().optional(), usage: z.record(z.string(), z.number()).nullable(), costUsd: z.number().nullable(),
  error: ErrorInfo, children: z.array(z.string()),
  changes: Changes.optional(),
  members: z.array(z.record(z.string(), z.unknown())).optional().describe('A parallel group\'s members, each shaped like a step'),
});

const RunSummary = z.object({
  runId: z.string(), sessionId: z.string(), state: z.string(), mode: z.string(), label: z.string().nullable(),
  agents: z.array(z.string()), createdAt: z.string(), endedAt: z.string().nullable(), error: ErrorInfo,
  adopted: z.boolean(), dismissed: z.boolean(), queue: QueuePlace.optional(),
});

/** One run (with runId) or the session's list (without): one flat object, the fields of the mode in use present. */
export const StatusOutput = z.object({
  sessionId: z.string(),
  runId: z.string().optional(), state: z.string().optional(), mode: z.string().optional(), label: z.string().nullable().optional(),
  cwd: z.string().optional(), createdAt: z.string().optional(), startedAt: z.string().nullable().optional(),
  endedAt: z.string().nullable().optional(), durationMs: z.number().nullable().optional(), lastActivityAt: z.string().optional(),
  error: ErrorInfo.optional(), steps: z.array(StepView).optional(),
  output: TextView.extend({ uri: z.string() }).optional(), fanout: Fanout.optional(), pendingAppends: z.number().optional(),
  adopted: z.boolean().optional(), dismissed: z.boolean().optional(), runnerPid: z.number().nullable().optional(),
  runnerLogTail: z.string().optional(), survivors: z.array(z.number()).optional(), queue: QueuePlace.optional(),
  escaped: z.array(z.object({ pid: z.number(), command: z.string() })).optional(),
  runs: z.array(RunSummary).optional(),
  omitted: z.number().optional().describe('Older runs not listed inline (the newest 200 are); resources/list pages through all'),
  capacity: Capacity.optional(),
  waitedMs: z.number().optional(), changed: z.boolean().optional(),
  next: z.string().optional().describe('What to do next: wait again with status while the run is active, or where its output is once it ended'),
});

/** What to call next, in words a model acts on: some clients show the model only structuredContent (docs/clients.md). */
const Next = z.string().describe('What to do next, e.g. the status call that waits for the run');

/**
 * launch's answer, and also (for a task-augmented launch, docs/clients.md "MCP Tasks") the task's result, which is the
 * ended run's status: clients validate a task's result against this schema, so every field of a run's status is
 * admitted here, optional.
 */
export const LaunchOutput = StatusOutput.omit({ runs: true, omitted: true }).extend({
  runId: z.string(), state: z.string(), mode: z.string(),
  steps: z.array(z.object({ index: z.number(), agent: z.string(), state: z.string() }))
    .describe('{ index, agent, state } of each step (in a task\'s result: each step as status shows it)'),
  fanout: Fanout,
  capacity: Capacity.optional().describe('Active top-level runs, this one included (absent from a task\'s result)'),
  next: Next,
});

export const AppendOutput = z.object({ sessionId: z.string(), runId: z.string(), stepIndex: z.number(), pendingAppends: z.number(), fanout: Fanout });
export const RestoreOutput = z.object({
  sessionId: z.string(), lineage: z.array(z.string()), adopted: z.number(), unknown: z.array(z.string()), runs: z.array(RunSummary),
});
export const DismissOutput = z.object({ sessionId: z.string(), runId: z.string(), state: z.string(), dismissed: z.boolean(), cancelled: z.boolean() });
export const CancelOutput = z.object({ sessionId: z.string(), runId: z.string(), state: z.string(), error: ErrorInfo, survivors: z.array(z.number()) });
export const AgentsOutput = z.object({
  sessionId: z.string(),
  agents: z.array(z.object({
    name: z.string(), description: z.string(), backend: z.string(), source: z.string(), trusted: z.boolean(),
    available: z.boolean(), problem: z.string().optional(),
    warnings: z.array(z.string()).optional().describe('What the definition asks for that its backend ignores or cannot do here (e.g. delegate: true on pi or command; a claude agent at full under root); the agent stays launchable'),
    models: z.array(z.string()).optional(),
    isolation: z.literal('worktree').optional().describe('Each step of this agent runs in its own git worktree and branch'),
  })),
  refused: z.array(z.object({ name: z.string().optional(), path: z.string(), source: z.string(), reason: z.string() })),
  backends: z.array(z.object({
    backend: z.string(), found: z.boolean(), path: z.string().optional(),
    version: z.string().optional().describe('First line of the CLI\'s version output; absent while still being read (the next call has it) or when it failed'),
    problem: z.string().optional().describe('Why this CLI is unusable: not found, or its version command failed or hung'),
  })).describe('Each agent CLI backend: whether its executable is found (SUBAGENTS_BIN_<BACKEND> or PATH), its version, and why it is unusable if it is'),
});

/** The dashboard's answers are the page's data (docs/watch-and-ui.md); only their kind is fixed here. */
export const DashboardOutput = z.looseObject({
  view: z.enum(['list', 'run', 'output']).describe('Which view this answers'),
  sessionId: z.string(),
});

export const TOOL_SCHEMAS = {
  launch: { input: LaunchInput, output: LaunchOutput },
  status: { input: StatusInput, output: StatusOutput },
  append: { input: AppendInput, output: AppendOutput },
  restore: { input: RestoreInput, output: RestoreOutput },
  dismiss: { input: DismissInput, output: DismissOutput },
  cancel: { input: CancelInput, output: CancelOutput },
  agents: { input: AgentsInput, output: AgentsOutput },
  dashboard: { input: DashboardInput, output: DashboardOutput },
} as const;

/** JSON Schema as published in tools/list and in schemas/ (inputs in `input` mode, so nothing optional turns required). */
export function toJsonSchema(schema: z.ZodType): Record<string, unknown> {
  const json = z.toJSONSchema(schema, { io: 'input', unrepresentable: 'any' }) as Record<string, unknown>;
  delete json.$schema;
  return json;
}
