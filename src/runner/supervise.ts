import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createHash, randomBytes } from 'node:crypto';
import { adapterFor } from '../agents/adapters/index.js';
import { stderrReason } from '../agents/adapters/shared.js';
import { agentSourceEnv, buildAgentEnv } from '../agents/agent-env.js';
import type { ProcessIdentity } from '../process/identity.js';
import { findRunProcesses, signalVerified, terminateProcesses } from '../process/terminate.js';
import { isAlive, pidIsFree } from '../process/identity.js';
import { pidMark, pidsSince, type PidMark } from '../process/pid-window.js';
import { configureLocks } from '../store/lock.js';
import { diskFaultOf, ensurePrivateDir, removeStaleTemps, writeFileAtomic, writeNewFile } from '../store/atomic-write.js';
import type { Layout, RunPaths } from '../store/layout.js';
import { endRun, returnRunLedger, type EndState } from '../lifecycle/run-lifecycle.js';
export { settleLocks, reopenLocks } from '../store/lock.js';
export { handOffFreedSlot } from './hand-off.js';
export { rehearse } from './rehearsal.js';
export { reuseBaseline, leftFromRun } from './reuse.js';
export { AgentStub } from './agent-stub.js';
import type { AgentStub } from './agent-stub.js';
import { queueIsEmpty } from '../lifecycle/queue.js';
import type { CapacityLedger, RunStore } from '../store/ports.js';
import { fileStatePorts, type StatePorts } from '../lifecycle/state-ports.js';
import {
  isTerminalRun, type AgentTaskSpec, type RunRecord, type RunStatus, type StepError,
  type StepSpec, type StepStatus,
} from '../store/run-types.js';
import { SubagentError, isSubagentError, type RunErrorCode } from '../errors.js';
import { MAIN_JS } from '../paths.js';
import { waitUntil } from '../wait.js';
import { supervisorOf, watchForCancel } from './cancel-watch.js';
import { runMembers } from './group-scheduler.js';
import { isNestedRunner, isOtherRunsRunner, settleChildren } from './children.js';
import { NO_TEXT, once, publishRunOutput, substitute, type StepText } from './step-text.js';
import { runAgentProcess } from './agent-process.js';
import { readTail } from '../store/text-tail.js';
import { DistributedLinkFile, readStateFile, type DistributedLink } from '../store/state-files.js';
import { claimAgentSlot, releaseAgentSlot, setAgentSlotProcess } from '../lifecycle/agent-slots.js';
import { newStepStatus } from '../store/step-status.js';
import { boundedStepText, writeJoinedOutput } from './joined-output.js';
import { StepWorktrees, type StepWorktree } from './step-worktrees.js';
import { DelayedTask } from './delayed-task.js';
import { installStatusWriteFault } from './test-write-fault.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * How long an agent runs before its start is written down: the step's status with the agent's identity, and that
 * identity in its ledger slot (docs/architecture.md, "The life of a run", step 5). An agent that ends sooner (a quick
 * command, a CLI that refuses at once) is recorded by its step's end write alone: two locked sections fewer on the
 * runner's thread while the agent runs, and its exit seen sooner. Until the write, the runner's identity covers the
 * slot and its process group and run token find the agent, as while the write was under way.
 */
const AGENT_RECORD_AFTER_MS = 10;

/** Attempts at a state write the disk refuses (ENOSPC, EIO …) before the runner gives it up. */
const DISK_ATTEMPTS = 3;

/**
 * The runner has no caller waiting on it, and giving up a status write or the chain's commit would lose the run:
 * a lock that stays busy past its 5 s bound (a loaded machine) is waited for again, up to about a minute, and a
 * write the disk refused is tried again a few times (a transient fault: space freed, a flaky device).
 */
async function persistently<T>(fn: () => Promise<T>): Promise<T> {
  let diskFaults = 0;
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn();
    } catch (e) {
      if (diskFaultOf(e) && ++diskFaults < DISK_ATTEMPTS) {
        await sleep(100 * diskFaults);
        continue;
      }
      if (!(e instanceof SubagentError && e.code === 'BUSY') || attempt >= 12) throw e;
    }
  }
}

type StopReason = 'CANCELLED' | 'TIMEOUT' | 'PARENT_ENDED';

/** Beyond the kill grace, how long a step of a worker's run waits for its worker to end its nested runs in Redis. */
const REMOTE_SETTLE_MARGIN_MS = 20_000;

interface StepOutcome {
  ok: boolean;
  /** Whether any agent of the step started (a step that never started leaves the run's output as it was). */
  ran: boolean;
  text: StepText;
  error: StepError | null;
}


/** What the process that supervises a run lets the supervision do to it. */
export interface SuperviseHost {
  /** The run's own detached runner: SIGTERM/SIGINT cancel the run, and the process lowers its priority after the end. */
  processSignals: boolean;
  /**
   * The run store and ledger the supervision uses: a host that already holds the home's ports (another
   * implementation, docs/architecture.md "Seams") passes them; by default the files of the run's state home.
   */
  ports?: Pick<StatePorts, 'layout' | 'store' | 'ledger'>;
  /**
   * A warm runner that may go back to the pool after this run (docs/architecture.md, "Warm runners"): it keeps its
   * priority after the end (a lowered one could not be raised again, and the next run's agents would inherit it).
   */
  mayServeAgain?: boolean;
  /**
   * Told, once the run is over, whether it ended cleanly here: its end recorded (fsynced) by this process, its ledger
   * entries returned, no process of it left, nothing refused. Only then may a warm runner serve another run.
   */
  onEnd?: (clean: boolean) => void;
  /** A warm runner's pre-started process for the run's first agent (runner/agent-stub.ts); disposed if unused. */
  agentStub?: AgentStub | null;
}

/** The detached runner (`runner/main.ts`): one run, the whole process. */
export const RUNNER_HOST: SuperviseHost = { processSignals: true };

/**
 * Claims the start (the server may have given up meanwhile) unless the runner's entry already did (`claimed`), then
 * executes the run to its terminal state. `me` is the identity recorded as the run's runner: the process that
 * supervises it, which need not be a detached runner of its own (`host`).
 */
export async function supervise(record: RunRecord, paths: RunPaths, me: ProcessIdentity, claimed: RunStatus | null = null, host: SuperviseHost = RUNNER_HOST, attempt = 0): Promise<number> {
  // The runner's own process: its locks name it, and a lock whose holder died is cleared at once (store/lock-dir.ts).
  if (host.processSignals) configureLocks({ self: me, isAlive, pidFree: pidIsFree });
  const { layout, store, ledger } = host.ports ?? fileStatePorts(path.dirname(path.dirname(paths.dir)));
  const started = claimed ?? await persistently(() => store.update(record.runId, (s) => (s.state === 'starting' && (s.attempt ?? 0) === attempt
    ? { ...s, state: 'running', startedAt: new Date().toISOString(), runner: me }
    : null), { durable: true }));
  if (started.state !== 'running' || started.runner?.pid !== me.pid) {
    process.stderr.write('runner: the launch was abandoned before the start; no agent started\n');
    return 0;
  }
  // The run's working directories, which the server leaves to us (src/store/run-store.ts, prepare), made once here
  // rather than inside a step. One not made (a full disk): the step's own ensurePrivateDir, or the first write into
  // it, fails the step or the run's end with that cause.
  for (const d of [paths.outDir, paths.promptsDir, paths.budgetDir]) {
    try { ensurePrivateDir(d); } catch { /* said by the step or the write that needs it */ }
  }
  store.event(record.runId, { type: 'started', pid: me.pid });
  installStatusWriteFault(process.env.SUBAGENTS_TEST_FAULT, paths.dir);
  // Only a process that is the run's own runner may exit on a crash; a host that shares its process keeps its own.
  const crashWatch = host.processSignals ? stopRunOnCrash(record, me) : null;
  try {
    return await new Executor(record, paths, store, ledger, layout, me, started, host).run();
  } finally {
    // Removed with the run: a warm runner that serves another run stops that run's processes, not these.
    if (crashWatch) process.off('uncaughtException', crashWatch);
  }
}

/**
 * The last resort: an exception nothing caught would end the runner and leave its agents running unsupervised (no
 * timeout, no cancel, status `running` until a reader notices). The run's processes are stopped first, identity-
 * checked, and the log says so (never the error's text: it may quote agent output); reconciliation then records the
 * run RUNNER_LOST, quoting that line.
 */
function stopRunOnCrash(record: RunRecord, me: ProcessIdentity): (e: unknown) => void {
  const onCrash = (e: unknown) => {
    const code = (e as NodeJS.ErrnoException | null)?.code ?? (e instanceof Error ? e.name : 'error');
    try { process.stderr.write(`runner: internal error (${code}); stopped the run's processes and exited\n`); } catch { /* no log */ }
    try {
      for (const p of findRunProcesses({ pgids: [me.pid], token: record.runToken, since: me.startTime, exclude: [process.pid] })) signalVerified(p, 'SIGKILL');
    } catch { /* nothing more can be done */ }
    process.exit(1);
  };
  process.once('uncaughtException', onCrash);
  return onCrash;
}

class Executor {
  private readonly specs: StepSpec[];
  private readonly abort = new AbortController();
  private stopReason: StopReason | null = null;
  private link: DistributedLink | null | undefined;
  private readonly runId: string;
  private readonly worktrees: StepWorktrees;
  /** For the first agent of the run only; gone (used or disposed) before any sweep of the run's group. */
  private stub: AgentStub | null;
  /**
   * Where the pid allocator stood when this run's supervision began (process/pid-window.ts): the end's sweep reads only
   * the processes created since, while the allocator cannot have gone round. Only a runner in a process of its own:
   * a host sharing its process has processes of its own in the group, older than the run.
   */
  private readonly pidMark: PidMark | null;

  constructor(
    private readonly record: RunRecord,
    private readonly paths: RunPaths,
    private readonly store: RunStore,
    private readonly ledger: CapacityLedger,
    private readonly layout: Layout,
    private readonly me: ProcessIdentity,
    private status: RunStatus,
    private readonly host: SuperviseHost,
  ) {
    this.specs = [...record.steps];
    this.runId = record.runId;
    this.stub = host.agentStub ?? null;
    // Before anything of the run is started: what the end's sweep looks for has a pid handed out after this.
    this.pidMark = host.processSignals ? pidMark() : null;
    this.worktrees = new StepWorktrees(record, layout, paths);
  }

  async run(): Promise<number> {
    const stopWatching = this.watchForCancel();
    const runTimer = this.record.timeoutMs !== null ? setTimeout(() => this.stop('TIMEOUT'), this.record.timeoutMs) : null;
    let failure: StepError | null = null;
    let previous = NO_TEXT;
    let lastText = NO_TEXT;
    let exitCode = 0;
    try {
      try {
        for (let i = 0; ; ) {
          if (this.stopReason) break;
          if (i >= this.specs.length) {
            // Leftovers first (so a run is never terminal with a process alive), then decide under the lock: either an
            // append arrived (it runs) or the chain's end is committed (later appends are refused).
            await this.sweepLeftovers();
            const ended = await persistently(() => this.store.withRunLock(this.runId, async () => {
              this.takeAppendsLocked();
              if (i < this.specs.length) return false;
              await this.commitLocked('completed', null, lastText);
              return true;
            }));
            if (ended) break;
            continue;
          }
          let outcome: StepOutcome;
          try {
            outcome = await this.runStep(i, previous);
          } catch (e) {
            // Not an agent's failure but ours (a state file could not be written): stop what runs and end the run.
            const code = diskFaultOf(e) ?? (e as NodeJS.ErrnoException).code ?? 'internal error';
            process.stderr.write(`runner: step ${i} could not be run: ${code}\n`);
            this.abort.abort();
            failure = { code: 'STEP_FAILED', message: `the runner could not run step ${i} (${code})` };
            break;
          }
          if (outcome.ran) lastText = outcome.text;
          if (!outcome.ok) {
            failure = outcome.error;
            break;
          }
          previous = outcome.text;
          i++;
        }
        if (!isTerminalRun(this.status.state)) {
          await this.sweepLeftovers();
          const reason = this.stopReason;
          const state: EndState = reason === 'CANCELLED' || reason === 'PARENT_ENDED' ? 'cancelled' : 'failed';
          const error: StepError = reason === 'TIMEOUT'
            ? { code: 'TIMEOUT', message: `the run exceeded its time limit of ${this.record.timeoutMs} ms` }
            : reason === 'CANCELLED' ? { code: 'CANCELLED', message: 'the run was cancelled' }
            : reason === 'PARENT_ENDED' ? { code: 'PARENT_ENDED', message: 'the agent that launched this run ended' }
            : failure ?? { code: 'STEP_FAILED', message: 'a step failed' };
          await persistently(() => this.store.withRunLock(this.runId, async () => {
            this.takeAppendsLocked();
            await this.commitLocked(state, error, lastText);
          }));
        }
      } catch (e) {
        // The end could not be recorded (the disk refused status.json past the retries, or the run directory is no
        // longer one the runner may write into): say so in its place.
        const code = refusedWrite(e);
        if (!code) throw e;
        exitCode = await this.recordWriteFailure(code, writtenFile(e));
      }
    } finally {
      if (runTimer) clearTimeout(runTimer);
      stopWatching();
    }
    // A worker's run: the Redis URL leaves the disk with the run's end, whoever ended it (docs/scale-out.md,
    // "Nested delegation"); its steps' budget files are gone already.
    try { fs.rmSync(this.paths.distributedLink, { force: true }); } catch { /* the worker removes it too */ }
    await this.retryLedgerReturn();
    this.store.event(this.runId, { type: 'ended', state: this.status.state });
    // Worktrees still there (a stopped step leaves its own) go after the end is published: deleting thousands of
    // files must not hold up a cancel's answer. The branches stay.
    await this.worktrees.removeAll();
    // Servers write into a live run's directory too (a cancel request, an append), and one killed mid-write leaves its
    // temp file; nobody else looks at the directory of a run that ended normally. Only writers proven gone.
    removeStaleTemps(this.paths.dir, null);
    // A stopped run (cancel, timeout, its parent's end) is not clean: its runner exits with it, as a cancel promises
    // that nothing of the run is left (docs/architecture.md, "Warm runners").
    this.host.onEnd?.(exitCode === 0 && this.stopReason === null && this.endedHere && this.ledgerReturned && this.status.survivors.length === 0);
    return exitCode;
  }

  /**
   * The terminal status could not be written: the run is recorded failed with the cause instead (a smaller write, and
   * a later one: it may still succeed). When even that is refused, the runner's log says why and it exits 1; the
   * run, not terminal with its runner gone, is then recorded failed/RUNNER_LOST by reconciliation, quoting that line.
   */
  private async recordWriteFailure(code: string, what: string): Promise<number> {
    process.stderr.write(`runner: could not write ${what} (${code}) to record the run's end; recording it failed with that cause\n`);
    this.abort.abort();
    await this.sweepLeftovers();
    const error: StepError = {
      code: 'STEP_FAILED',
      message: `the runner could not write ${what} (${code}), so the run's end could not be recorded and it is marked failed; check free space and permissions of the state home`,
    };
    try {
      await persistently(() => this.store.withRunLock(this.runId, async () => {
        await this.endLocked('failed', error);
      }));
      return 0;
    } catch (e) {
      process.stderr.write(`runner: could not write status.json (${refusedWrite(e) ?? code}) to record the run failed either; exiting, reconciliation will end the run\n`);
      return 1;
    }
  }

  /** Run a step: one agent, or a parallel group. */
  private async runStep(i: number, previous: StepText): Promise<StepOutcome> {
    const spec = this.specs[i]!;
    const st = this.status.steps[i]!;
    // Only a chain step after the first has a previous step; elsewhere `{previous}` is left as the caller wrote it.
    // Bounded (a group's joined output can be many times the cap): head and tail, with the counts and the full file.
    // After an isolated step it also carries a summary of that step's changes (branch, counts, files).
    const prev = this.record.mode === 'chain' && i > 0
      ? once(() => boundedStepText(previous.file, this.record.maxOutputBytes) + this.worktrees.summary(this.status.steps[i - 1]))
      : null;
    if (spec.kind === 'agent') return this.runAgent(st, spec, substitute(spec.task, prev), this.abort.signal);
    return this.runGroup(st, spec, prev);
  }

  private async runGroup(st: StepStatus, spec: Extract<StepSpec, { kind: 'group' }>, previous: (() => string) | null): Promise<StepOutcome> {
    const members = st.members!;
    st.state = 'running';
    st.startedAt = new Date().toISOString();
    await this.write();
    const groupAbort = new AbortController();
    const onRunAbort = () => groupAbort.abort();
    this.abort.signal.addEventListener('abort', onRunAbort, { once: true });
    const outcomes = await runMembers(spec.members.length, spec.concurrency, groupAbort.signal, (j) => {
      const m = spec.members[j]!;
      return this.runAgent(members[j]!, m, substitute(m.task, previous), groupAbort.signal);
    }, (o) => {
      if (o.ok || !spec.failFast) return false;
      groupAbort.abort(); // running siblings are cancelled, unstarted ones skipped
      return true;
    });
    this.abort.signal.removeEventListener('abort', onRunAbort);
    for (const m of members) if (m.state === 'pending') m.state = 'skipped';
    const failed = members.filter((m) => m.state === 'failed');
    const allDone = members.every((m) => m.state === 'completed');
    // A member that failed makes the group failed; a group stopped from outside (cancel, run timeout, parent
    // ended) with no failed member is cancelled, like a single step stopped the same way.
    st.state = allDone ? 'completed' : failed.length > 0 || !this.stopReason ? 'failed' : 'cancelled';
    st.endedAt = new Date().toISOString();
    st.outputBytes = members.reduce((n, m) => n + m.outputBytes, 0);
    await writeJoinedOutput(this.paths.output(st.key), spec.members.map((m, j) => ({ heading: `### ${m.agent.name} #${j}`, file: outcomes[j]?.text.file ?? null })));
    let error: StepError | null = null;
    if (!allDone) {
      const stopCode = this.stopReason ?? 'CANCELLED';
      // The first failed member (index order) names the code: a member over its time limit makes the group TIMEOUT.
      error = failed.length > 0
        ? { code: failed[0]!.error?.code === 'TIMEOUT' ? 'TIMEOUT' : 'STEP_FAILED', message: `step ${st.index} (parallel): ${failed.length} of ${members.length} members failed; first: member ${failed[0]!.index} (agent ${failed[0]!.agent}) ${failed[0]!.error?.code ?? 'STEP_FAILED'}` }
        : { code: stopCode, message: `step ${st.index} (parallel) was stopped before all its members completed` };
      st.error = error;
    }
    await this.write();
    const ran = members.some((m) => m.startedAt !== null);
    return { ok: allDone, ran, text: { file: this.paths.output(st.key), cap: Infinity }, error };
  }

  private async runAgent(st: StepStatus, spec: AgentTaskSpec, task: string, signal: AbortSignal): Promise<StepOutcome> {
    // The ledger key of the slot held: the step's own, or the reserved one its launch bound to this runner.
    const got = await claimAgentSlot(this.ledger, `${this.runId}:${st.key}`, this.me, this.record.maxAgents, signal, this.record.rootRunId);
    const slotKey = got ?? `${this.runId}:${st.key}`;
    if (!got || signal.aborted) {
      // Stopped (cancel, timeout, failFast) before its agent was spawned: it never started, its fan-out claim is returned.
      if (got) await releaseAgentSlot(this.ledger, slotKey).catch(() => {});
      st.state = 'skipped';
      await this.write();
      return { ok: false, ran: false, text: NO_TEXT, error: { code: this.stopReason ?? 'CANCELLED', message: `step ${st.key} did not start` } };
    }
    // Written at onStarted, with the agent's identity: a step is shown running once there is a process to show.
    // (A write here as well was one more locked status write per agent, on a path every launch waits behind.)
    st.state = 'running';
    st.startedAt = new Date().toISOString();
    this.store.event(this.runId, { type: 'step-started', step: st.key, agent: spec.agent.name });
    let worktree: StepWorktree | null = null;
    if (this.worktrees.isIsolated(spec)) {
      try {
        worktree = await this.worktrees.prepare(st, signal);
      } catch (e) {
        return this.endUnstartable(st, slotKey, signal.aborted ? null : `step ${st.key}: its git worktree could not be made (${(e as Error).message.slice(0, 300)})`);
      }
    }
    const budget = this.mintBudget(st.key);
    const adapter = adapterFor(spec.agent.backend)!;
    const env = buildAgentEnv({
      source: agentSourceEnv(process.env),
      passEnv: this.record.passEnv,
      credentialEnv: adapter.credentialEnv,
      agentEnv: spec.agent.env,
      extra: {
        SUBAGENTS_HOME: this.layout.home,
        SUBAGENTS_PARENT_RUN_ID: this.runId,
        SUBAGENTS_ROOT_RUN_ID: this.record.rootRunId,
        SUBAGENTS_DEPTH: String(this.record.depth + 1),
        SUBAGENTS_BUDGET: budget.secret,
        SUBAGENTS_RUN_TOKEN: this.record.runToken,
      },
    });
    const timeoutMs = spec.agent.timeoutMs ?? this.record.defaultStepTimeoutMs;
    let result;
    const stub = this.takeStub();
    const recordStart = new DelayedTask(AGENT_RECORD_AFTER_MS);
    try {
      result = await runAgentProcess({
        record: this.record,
        paths: this.paths,
        stepKey: st.key,
        spec,
        task,
        env,
        timeoutMs,
        signal,
        ...(worktree ? { cwd: worktree.cwd } : {}),
        delegateServer: spec.agent.delegate ? delegateServerFor(env) : undefined,
        stub,
        spare: (p) => isNestedRunner(this.store, this.runId, st.key, p) || isOtherRunsRunner(this.store, p),
        onStarted: (agent, since) => {
          st.process = agent;
          this.noteAgentStart(agent, since);
          // Written down once the agent has run a moment (AGENT_RECORD_AFTER_MS); not awaited here (it is already
          // running), but settled before the step ends: nothing outlives its step.
          recordStart.schedule(() => Promise.all([this.write().catch(() => {}), setAgentSlotProcess(this.ledger, slotKey, agent).catch(() => {})]));
        },
      });
    } finally {
      budget.revoke();
      await recordStart.settle();
      await stub?.dispose(); // not used by this agent (spawned instead): it exits now, not at the sweep
    }
    await settleChildren(this.store, this.runId, st.key, this.stopReason === 'CANCELLED' ? 'CANCELLED' : 'PARENT_ENDED');
    await this.settleRemoteChildren(st.key, this.stopReason === 'CANCELLED' ? 'CANCELLED' : 'PARENT_ENDED');
    // A single run's one slot goes back with the rest of its ledger entries at the run's end (endRun, after
    // the sweep of leftovers): one ledger section fewer per run, on the lock every run of the state home shares.
    if (this.record.mode !== 'single') await releaseAgentSlot(this.ledger, slotKey).catch(() => {});
    st.exitCode = result.exitCode;
    st.signal = result.signal;
    st.endedAt = new Date().toISOString();
    st.outputBytes = result.outputBytes;
    st.outputTruncated = result.outputTruncated;
    if (result.escaped.length > 0) {
      (this.status.escaped ??= []).push(...result.escaped);
      this.store.event(this.runId, { type: 'escaped', step: st.key, pids: result.escaped.map((p) => p.pid) });
    }
    if (result.parsed?.usage) st.usage = result.parsed.usage as Record<string, number>;
    if (result.parsed?.costUsd !== undefined) st.costUsd = result.parsed.costUsd;
    let ok = result.spawnError === null && result.stoppedFor === null && result.exitCode === 0 && !(result.parsed?.isError ?? false)
      && result.outputWriteError === null;
    // Messages are built from codes, names and numbers only: they are shown in listings. What the agent said (its
    // CLI's error text, its stderr's last line) goes in `detail`, shown only by the run's full status.
    const exited = result.signal ? `signal ${result.signal}` : `code ${result.exitCode}`;
    if (ok) {
      st.state = 'completed';
    } else if (result.stoppedFor === 'CANCELLED') {
      st.state = 'cancelled';
      st.error = { code: this.stopReason === 'TIMEOUT' ? 'TIMEOUT' : this.stopReason ?? 'CANCELLED', message: `step ${st.key} was stopped` };
    } else {
      st.state = 'failed';
      st.error = result.spawnError !== null
        ? { code: 'STEP_FAILED', message: `agent ${spec.agent.name} could not be started (${result.spawnError})` }
        : result.stoppedFor === 'TIMEOUT'
          ? { code: 'TIMEOUT', message: `agent ${spec.agent.name} exceeded its step limit of ${timeoutMs} ms` }
          : result.outputWriteError !== null
            ? { code: 'STEP_FAILED', message: outputWriteMessage(st.key, result.outputWriteError, result.outputBytes) }
            : result.parsed?.isError
              ? withDetail({ code: 'STEP_FAILED', message: `agent ${spec.agent.name} reported an error (exited with ${exited})` },
                `${(result.parsed.errorMessage ?? 'unknown').slice(0, 300)}${result.parsed.reasonUnknown ? this.stderrWhy(st.key) : ''}`)
              : withDetail({ code: 'STEP_FAILED', message: `agent ${spec.agent.name} exited with ${exited}` }, this.stderrWhy(st.key).replace(/^; /, ''));
    }
    // Whatever way the agent ended, its work is committed to the step's branch (a failed or stopped step's too).
    // A stopped step's worktree is left for the run's end, after its state is published (see run()).
    const uncommitted = worktree ? await this.worktrees.finish(st, worktree, { removeNow: !signal.aborted }) : null;
    if (uncommitted !== null && ok) {
      ok = false;
      st.state = 'failed';
      st.error = { code: 'STEP_FAILED', message: `step ${st.key}: ${uncommitted}` };
    }
    // A single run's one step ends with the run: its end is in the terminal write that follows the sweep of leftovers
    // (one locked status write fewer on the path a waiting client is woken by).
    if (this.record.mode !== 'single') await this.write();
    this.store.event(this.runId, { type: 'step-ended', step: st.key, state: st.state, exitCode: st.exitCode, signal: st.signal });
    return { ok, ran: true, text: { file: this.paths.output(st.key), cap: this.record.maxOutputBytes }, error: st.error };
  }

  /**
   * `; stderr: <its last non-empty line>` for a step whose CLI gave no reason on stdout (gemini without auth, pi
   * without a key say why only there), bounded and redacted like every error text; '' when stderr is empty.
   */
  private stderrWhy(stepKey: string): string {
    const why = stderrReason(readTail(this.paths.stderr(stepKey), 4096));
    return why ? `; stderr: ${why}` : '';
  }

  /** A fresh secret for the running step; only its hash is stored, and it is deleted when the step ends. */
  private mintBudget(stepKey: string): { secret: string; revoke: () => void } {
    const secret = randomBytes(32).toString('base64url');
    const file = this.paths.budgetFile(createHash('sha256').update(secret).digest('hex'));
    // On a worker, the grant carries the run's Redis: the agent's nested server launches there, and the URL never
    // enters the agent's environment (docs/scale-out.md, "Nested delegation"). The file is 0600 like every state file.
    const redis = this.distributedLink();
    const grant = JSON.stringify({ stepKey, at: new Date().toISOString(), ...(redis ? { redis } : {}) });
    // Created whole under its final name, without a temp and a rename: only the agent, not started yet, knows the
    // secret its name is made of, so nobody can read it half written. Not fsynced: it is valid only while this step's
    // agent lives, and no agent outlives a crash of the machine. The run's start made `budget/`; made here if it could not.
    try {
      writeNewFile(file, grant);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
      ensurePrivateDir(this.paths.budgetDir);
      writeNewFile(file, grant);
    }
    return { secret, revoke: () => { try { fs.unlinkSync(file); } catch { /* gone */ } } };
  }

  /**
   * A worker's run: the step's nested runs in Redis (marked in `remote-children/` by the nested server) are ended by
   * the worker, which this runner asks through a request file and waits for, so that the step ends only once they have
   * (docs/contract.md, "Nesting and isolation"). Bounded: a worker that died answers nothing (and its runner stops).
   */
  private async settleRemoteChildren(stepKey: string, reason: 'CANCELLED' | 'PARENT_ENDED'): Promise<void> {
    if (!this.distributedLink()) return;
    const marked = (() => {
      try {
        return fs.readdirSync(this.paths.remoteChildrenDir).some((name) => {
          try { return (JSON.parse(fs.readFileSync(path.join(this.paths.remoteChildrenDir, name), 'utf8')) as { stepKey?: unknown }).stepKey === stepKey; } catch { return false; }
        });
      } catch { return false; }
    })();
    if (!marked) return;
    const request = this.paths.settleRequest(stepKey);
    const done = this.paths.settleDone(stepKey);
    try {
      writeFileAtomic(request, JSON.stringify({ reason }), { durable: false });
    } catch {
      return; // its worker still ends them with the run (src/worker/mirror.ts)
    }
    const supervisor = supervisorOf(process.env);
    // The worker's answer is a file in the run's directory: watched, with a poll behind it for a worker that died.
    const doneName = path.basename(done);
    await waitUntil({
      dirs: [this.paths.dir], filter: (name) => name === doneName,
      check: () => (fs.existsSync(done) || (supervisor !== null && !isAlive(supervisor)) ? true : null),
      pollMs: 250, timeoutMs: this.record.killGraceMs + REMOTE_SETTLE_MARGIN_MS,
    });
    for (const f of [request, done]) { try { fs.unlinkSync(f); } catch { /* gone */ } }
  }

  /** The Redis of a worker's run (its launch wrote it before this runner started), or null for a local run. */
  private distributedLink(): DistributedLink | null {
    if (this.link === undefined) {
      try { this.link = readStateFile<DistributedLink>(this.paths.distributedLink, DistributedLinkFile); } catch { this.link = null; }
    }
    return this.link;
  }

  private stop(reason: StopReason): void {
    if (this.stopReason) return;
    this.stopReason = reason;
    this.store.event(this.runId, { type: 'stop', reason });
    this.abort.abort();
  }

  /** The run stops at a cancel request (or, when this process is the runner, at SIGTERM/SIGINT). */
  private watchForCancel(): () => void {
    return watchForCancel({ store: this.store, runId: this.runId, onStop: (reason) => this.stop(reason), processSignals: this.host.processSignals });
  }

  /**
   * The earliest start (clock ticks) of an agent of this run — for an agent a stub became, the moment it was told to
   * (the stub itself may have waited idle for minutes) —: a carrier of the run's token descends from one, so started
   * no earlier. The runner's own start is that bound too, but a warm runner that serves runs in turn started
   * long before this run, and every process started since would have its environment read at each sweep.
   */
  private tokenSince: string | null = null;
  private agentStartUnknown = false;

  private noteAgentStart(agent: ProcessIdentity, since: string): void {
    if (!/^\d+$/.test(since)) this.agentStartUnknown = true;
    else if (this.tokenSince === null || Number(since) < Number(this.tokenSince)) this.tokenSince = since;
  }

  /** The stub for the run's first agent, once; an earlier one not used by its agent is disposed of. */
  private takeStub(): AgentStub | null {
    const stub = this.stub;
    this.stub = null;
    return stub;
  }

  /** Every process of the run's group or carrying its token, except the runner itself: SIGTERM → grace → SIGKILL. */
  private async sweepLeftovers(): Promise<void> {
    // A stub no agent became (the run stopped before its first agent, or that agent was spawned) exits on its own.
    await this.takeStub()?.dispose();
    const since = this.agentStartUnknown || this.tokenSince === null ? this.me.startTime : this.tokenSince;
    const mark = this.pidMark;
    const pids = mark ? () => pidsSince(mark) : undefined;
    const known = this.status.steps.flatMap((st) => [st, ...(st.members ?? [])]).flatMap((st) => (st.process ? [st.process.pid] : []));
    const find = () => findRunProcesses({ pgids: [this.me.pid], token: this.record.runToken, since, exclude: [process.pid], pids, known });
    const r = await terminateProcesses(find, this.record.killGraceMs);
    if (r.survivors.length) this.status.survivors = r.survivors.map((p) => ({ pid: p.pid, startTime: p.startTime }));
  }

  /**
   * A step whose agent could not be started because its worktree could not be made: failed with `message`, or,
   * when the run or group was being stopped meanwhile (`message` null), skipped like any step stopped before its agent
   * started (its fan-out claim is returned: it never started). Its slot goes back.
   */
  private async endUnstartable(st: StepStatus, slotKey: string, message: string | null): Promise<StepOutcome> {
    if (this.record.mode !== 'single') await releaseAgentSlot(this.ledger, slotKey).catch(() => {});
    if (message === null) {
      st.state = 'skipped';
      st.startedAt = null;
      await this.write();
      this.store.event(this.runId, { type: 'step-ended', step: st.key, state: st.state, exitCode: null, signal: null });
      return { ok: false, ran: false, text: NO_TEXT, error: { code: this.stopReason ?? 'CANCELLED', message: `step ${st.key} did not start` } };
    }
    st.state = 'failed';
    st.endedAt = new Date().toISOString();
    st.error = { code: 'STEP_FAILED', message };
    await this.write();
    this.store.event(this.runId, { type: 'step-ended', step: st.key, state: st.state, exitCode: null, signal: null });
    return { ok: false, ran: true, text: NO_TEXT, error: st.error };
  }

  /** Moves accepted appends into the step list (caller holds the run lock). */
  private takeAppendsLocked(): void {
    for (const a of this.store.readAppends(this.runId)) {
      if (a.seq <= this.status.appendsTaken) continue;
      this.specs.push(a.step);
      const st = newStepStatus(this.specs.length - 1, a.step);
      st.appendSeq = a.seq;
      this.status.steps.push(st);
      this.status.appendsTaken = a.seq;
    }
  }

  /** Writes the run's output and its terminal status (`endLocked`). Caller holds the run lock. */
  private async commitLocked(state: EndState, error: StepError | null, lastText: StepText): Promise<void> {
    // The last step that ran: for a parallel run its one group, all members joined.
    publishRunOutput(lastText, this.paths.runOutput);
    await this.endLocked(state, error);
    // The end is published (fsynced) and the ledger returned: what is left (returning the run lock, the last event,
    // exiting) is bookkeeping, while the processes this write wakes (a long-poll's server and its client) answer on
    // the same cores. A runner whose ledger release failed keeps its priority: it retries that, and launches wait on it.
    // Not while a queued run waits: this process hands it the slot next, and that is a launch someone waits for.
    if (this.ledgerReturned && this.host.processSignals && !this.host.mayServeAgain && queueIsEmpty(this.layout)) try { os.setPriority(19); } catch { /* not permitted: no matter */ }
  }

  /** What this runner's end did: whether it recorded it, and whether the run's ledger entries went back. */
  private endedHere = false;
  private ledgerReturned = false;

  /**
   * Ends the run (`endRun`: compare-and-set, open steps closed, slots and unstarted claims returned first). Caller
   * holds the run lock. Retried whole by `persistently` after a refused write; the ledger is returned only once.
   */
  private async endLocked(state: EndState, error: StepError | null): Promise<void> {
    const r = await endRun({ store: this.store, ledger: this.ledger }, this.record, { state, error }, {
      locked: true, runnerStatus: this.status, ledgerReturned: this.ledgerReturned, ledgerDurable: false,
      onLedgerReturned: () => { this.ledgerReturned = true; }, // kept when the status write fails and is retried
    });
    this.ledgerReturned = r.ledgerReturned;
    this.endedHere ||= r.ours;
    this.status = r.status;
    if (r.ledgerError) process.stderr.write(`runner: ledger release failed: ${(r.ledgerError as Error).message}\n`);
  }

  /** A ledger release that failed at the end is tried once more after the commit (capacity pruning is the last resort). */
  private async retryLedgerReturn(): Promise<void> {
    if (!this.endedHere || this.ledgerReturned || this.status.survivors.length > 0) return;
    try {
      await returnRunLedger({ store: this.store, ledger: this.ledger }, this.record, this.status, false);
      this.ledgerReturned = true;
    } catch (e) {
      process.stderr.write(`runner: ledger release failed: ${(e as Error).message}\n`);
    }
  }

  private async write(): Promise<void> {
    let stored: RunStatus;
    try {
      stored = await persistently(() => this.store.update(this.runId, () => this.status, { repairFrom: this.status }));
    } catch (e) {
      const code = refusedWrite(e);
      if (!code) throw e;
      // An intermediate write: the run goes on. Status is written whole each time, so the next write carries this one.
      process.stderr.write(`runner: could not write status.json (${code}) after ${DISK_ATTEMPTS} attempts; going on, the next write carries the state\n`);
      this.store.event(this.runId, { type: 'status-write-failed', code });
      return;
    }
    if (isTerminalRun(stored.state) && stored !== this.status) {
      // Someone ended the run while we live (it cannot normally happen: others write only when we are gone).
      this.stop('CANCELLED');
    }
  }
}

/**
 * Why a state write was refused, when it is a refusal the run outlives: a disk fault, or `ELOOP` for a run directory
 * that became a symlink (the write is refused, never followed: see src/store/home-guard.ts). Else null.
 */
function refusedWrite(e: unknown): string | null {
  return diskFaultOf(e) ?? (isSubagentError(e, 'STATE_CORRUPT') ? 'ELOOP' : null);
}

/** The state file a refused write named (`status.json`, `output.txt` …; the run id is the run's own), for messages. */
function writtenFile(e: unknown): string {
  const named = e instanceof SubagentError ? /^could not write (\S+)/.exec(e.message)?.[1] : undefined;
  return named ?? "the run's files";
}

/** A step error with what the agent said, when it said anything: kept in status.json, shown only in full status. */
function withDetail(e: StepError, detail: string): StepError {
  return detail ? { ...e, detail } : e;
}

/** Why a step whose output the disk refused failed: the cause, in words a person acts on, and the byte counts. */
function outputWriteMessage(stepKey: string, code: string, bytes: number): string {
  const what = code === 'ENOSPC' ? 'disk full' : code === 'EDQUOT' ? 'disk quota exceeded' : 'the disk refused the write';
  return `${what} while writing step ${stepKey}'s output (${code}); the agent's ${bytes} bytes of output were counted, and the stored copy was cut where the disk refused it. Free space in the state home and run it again`;
}

/** The command that starts this same server, for `delegate: true` (the nesting variables travel in its env). */
function delegateServerFor(env: Record<string, string>): { command: string; args: string[]; env: Record<string, string> } {
  const keep = Object.fromEntries(Object.entries(env).filter(([k]) => k.startsWith('SUBAGENTS_')));
  return { command: process.execPath, args: [MAIN_JS, 'serve'], env: keep };
}

export type { RunErrorCode };
