import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { adapterFor } from '../agents/adapters/index.js';
import type { Invocation, ParsedResult } from '../agents/types.js';
import { EscapeTracker, ownEndOf, type EscapedProcess } from '../process/escape-tracker.js';
import { isAlive, listProcesses, readIdentity, readProcessInfo, type ProcessIdentity, type ProcessInfo } from '../process/identity.js';
import { processTree, terminateProcesses } from '../process/terminate.js';
import { diskFaultOf, writeFileAtomic, ensurePrivateDir } from '../store/atomic-write.js';
import type { RunPaths } from '../store/layout.js';
import { openStateFile } from '../store/state-file.js';
import type { AgentTaskSpec, RunRecord } from '../store/run-types.js';
import { LineSplitter, OutputCapture } from './output-capture.js';
import { openOutputChannel, type OutputChannel } from './output-channel.js';
import { stubScript, type AgentStub } from './agent-stub.js';

export interface AgentRunInput {
  record: RunRecord;
  paths: RunPaths;
  stepKey: string;
  spec: AgentTaskSpec;
  /** The task after `{previous}` substitution. */
  task: string;
  env: Record<string, string>;
  timeoutMs: number;
  /** Aborted when the run is cancelled or times out as a whole. */
  signal: AbortSignal;
  /**
   * `since`: no descendant of the agent started before these clock ticks (its exec): its own start when it was spawned,
   * the go moment when it is a stub that started earlier (runner/agent-stub.ts).
   */
  onStarted: (agent: ProcessIdentity, since: string) => void;
  delegateServer?: { command: string; args: string[]; env: Record<string, string> };
  /** Where the agent starts, when not the run's cwd (an isolated step's place in its worktree). */
  cwd?: string;
  /** Runners of nested runs this agent launched: not stopped with the agent's process tree (their runs end them). */
  spare?: (p: ProcessInfo) => boolean;
  /** A pre-started process this agent may become instead of being spawned (runner/agent-stub.ts). */
  stub?: AgentStub | null;
}

export interface AgentRunResult {
  exitCode: number | null;
  signal: string | null;
  outputBytes: number;
  outputTruncated: boolean;
  parsed: ParsedResult | null;
  /** Why the runner stopped it, if it did. */
  stoppedFor: 'TIMEOUT' | 'CANCELLED' | null;
  spawnError: string | null;
  process: ProcessIdentity | null;
  /** The errno of the first write of the step's output the disk refused (the agent ran on; the step fails with it). */
  outputWriteError: string | null;
  /** Descendants that had left the run's group and token, stopped here (see src/process/escape-tracker.ts). */
  escaped: EscapedProcess[];
}

const STDERR_CAP_BYTES = 1024 * 1024;
/** Of stderr past its cap, the last bytes kept: where a failing CLI says why (a step's stderrTail and error detail). */
const STDERR_END_BYTES = 64 * 1024;

/**
 * Starts one agent process and supervises it to its end: argv without a shell, the task on stdin (or in a 0600
 * file), output captured to the step's files with a cap, a step timeout and the run's abort signal honoured by
 * SIGTERM → grace → SIGKILL of the agent and every process it started.
 */
export async function runAgentProcess(input: AgentRunInput): Promise<AgentRunResult> {
  const { record, paths, stepKey, spec } = input;
  const adapter = adapterFor(spec.agent.backend);
  if (!adapter) throw new Error(`no adapter for backend ${spec.agent.backend}`);
  ensurePrivateDir(paths.promptsDir);
  const systemPromptFile = paths.systemPrompt(stepKey);
  const taskFile = paths.taskFile(stepKey);
  writeFileAtomic(systemPromptFile, spec.agent.body, { durable: false });
  // Made only when the adapter writes into it (a config file): one directory fewer per step for most agents.
  const scratchDir = path.join(paths.promptsDir, `${stepKey}.d`);
  let inv: Invocation;
  try {
    inv = adapter.buildInvocation({
      agent: spec.agent,
      model: spec.model ?? spec.agent.model,
      systemPromptFile,
      taskFile,
      scratchDir,
      delegateServer: input.delegateServer,
    });
  } catch (e) {
    // An adapter refuses what its CLI cannot enforce (e.g. a tool allowlist): the step fails with that reason.
    return { exitCode: null, signal: null, outputBytes: 0, outputTruncated: false, parsed: null, stoppedFor: null, spawnError: `the ${spec.agent.backend} adapter refused: ${(e as Error).message}`.slice(0, 400), process: null, outputWriteError: null, escaped: [] };
  }
  if (inv.taskVia === 'file') writeFileAtomic(taskFile, input.task, { durable: false });
  if (inv.files?.length) ensurePrivateDir(scratchDir);
  for (const f of inv.files ?? []) writeFileAtomic(f.path, f.content, { durable: false });

  const env = { ...input.env, ...(inv.env ?? {}), SUBAGENTS_SYSTEM_PROMPT_FILE: systemPromptFile };
  const parser = adapter.createParser?.() ?? null;
  const outFile = parser ? paths.rawOutput(stepKey) : paths.output(stepKey);
  const out = new OutputCapture(outFile, record.maxOutputBytes);
  const err = new OutputCapture(paths.stderr(stepKey), STDERR_CAP_BYTES, STDERR_END_BYTES);
  const lines = parser ? new LineSplitter((l) => parser.onLine(l)) : null;
  const onStdout = (c: Buffer) => { out.write(c); lines?.write(c); };
  const stdinMode = inv.taskVia === 'stdin' ? 'pipe' : 'ignore';
  const cwd = input.cwd ?? record.cwd;
  const script = input.stub?.ready ? stubScript({ argv: inv.argv, env, cwd, umask: record.umask, stdin: stdinMode === 'pipe' }) : null;
  const started = script !== null ? fromStub(input.stub!, script, onStdout) : await spawnAgent(inv.argv, { cwd, env, stdin: stdinMode, umask: record.umask, socketFile: path.join(paths.promptsDir, `${stepKey}.stdout.sock`), onStdout });
  if (!('child' in started)) {
    out.close();
    err.close();
    return { exitCode: null, signal: null, outputBytes: 0, outputTruncated: false, parsed: null, stoppedFor: null, spawnError: started.spawnError, process: null, outputWriteError: null, escaped: [] };
  }
  const { child, channel, stdoutEnd, identity, since } = started;
  input.onStarted(identity, since);

  if (child.stdin && stdinMode === 'pipe') {
    child.stdin.on('error', () => {}); // an agent that exits without reading its task closes the pipe: EPIPE is not our failure
    child.stdin.end(input.task);
  } else {
    child.stdin?.destroy(); // a stub's: the agent's stdin is /dev/null
  }
  child.stdout?.on('data', onStdout);
  child.stderr!.on('data', (c: Buffer) => err.write(c));

  // Every process the agent started, remembered by identity: a grandchild re-parented to init is still ours to stop.
  const tracked = new Map<number, ProcessInfo>();
  const escapes = new EscapeTracker(child.pid!, input.spare ?? (() => false), [stdoutEnd ?? ownEndOf(child.stdout), ownEndOf(child.stderr)]);
  const findTree = () => {
    const all = listProcesses();
    escapes.sample(all);
    for (const p of processTree(child.pid!, all, input.spare)) tracked.set(p.pid, p);
    return [...tracked.values()].filter((p) => isAlive(p));
  };
  let stoppedFor: AgentRunResult['stoppedFor'] = null;
  let stopping: Promise<unknown> | null = null;
  const stop = (why: 'TIMEOUT' | 'CANCELLED') => {
    if (stopping) return;
    // An agent that has already exited by itself (its exit not yet seen here: a zombie, or reaped) was not stopped:
    // its step ends as its exit says. What it left running is stopped all the same.
    if (!exitedAlready()) stoppedFor = why;
    stopping = terminateProcesses(findTree, record.killGraceMs);
  };
  const exitedAlready = (): boolean => {
    if (child.exitCode !== null || child.signalCode !== null) return true;
    const info = readProcessInfo(child.pid!);
    return info === null || info.state === 'Z';
  };
  const timer = setTimeout(() => stop('TIMEOUT'), input.timeoutMs);
  const onAbort = () => stop('CANCELLED');
  if (input.signal.aborted) onAbort();
  else input.signal.addEventListener('abort', onAbort, { once: true });

  // Listen for 'close' now: when the pipes are already shut, Node emits it in the same tick as 'exit', before any
  // continuation of an `await` on 'exit' could attach a listener (which then waited out the whole drain bound).
  const closed = Promise.all([new Promise((r) => child.once('close', r)), channel?.closed]);
  const exit = await new Promise<{ code: number | null; signal: string | null }>((resolve) => {
    child.once('exit', (code, signal) => resolve({ code, signal }));
  });
  clearTimeout(timer);
  input.signal.removeEventListener('abort', onAbort);
  // A grandchild may hold the pipes open after the agent exits; drain briefly, then stop reading.
  let drainTimer: NodeJS.Timeout | undefined;
  let stdioHeld = true;
  await Promise.race([closed.then(() => { stdioHeld = false; }), new Promise((r) => { drainTimer = setTimeout(r, 500); })]);
  clearTimeout(drainTimer);
  child.stdout?.destroy();
  channel?.reader.destroy();
  child.stderr!.destroy();
  if (script !== null) input.stub!.release();
  if (stopping) await stopping;
  // Descendants that left both the run's group and its token: the run's sweep cannot find them, so they are stopped
  // here (identity-checked), and reported.
  const escaped = escapes.escaped(process.pid, record.runToken, stdioHeld);
  if (escaped.length > 0) {
    await terminateProcesses(() => escaped.map((p) => readProcessInfo(p.pid)).filter((p): p is ProcessInfo => p !== null && p.state !== 'Z' && escaped.some((e) => e.pid === p.pid && e.startTime === p.startTime)), record.killGraceMs);
  }
  lines?.end();
  out.close();
  err.close();

  let parsed: ParsedResult | null = null;
  let outputWriteError = out.writeError;
  if (parser) {
    parsed = parser.finish(exit.code);
    try {
      writeFileAtomic(paths.output(stepKey), parsed.text, { durable: false });
    } catch (e) {
      outputWriteError ??= diskFaultOf(e) ?? (e as NodeJS.ErrnoException).code ?? 'EIO';
    }
  }
  return {
    exitCode: exit.code,
    signal: exit.signal,
    outputBytes: parser ? Buffer.byteLength(parsed!.text) : out.bytes,
    outputTruncated: out.truncated,
    parsed,
    stoppedFor,
    spawnError: null,
    process: identity,
    outputWriteError,
    escaped,
  };
}

interface StartedAgent {
  child: ChildProcess;
  channel: OutputChannel | null;
  /** What the agent's stdout is, read on our side before our copy went (escaped descendants still hold it). */
  stdoutEnd: string | null;
  identity: ProcessIdentity;
  since: string;
}

/** The agent, from its pre-started stub: one exec, no fork of the runner (runner/agent-stub.ts). */
function fromStub(stub: AgentStub, script: string, onStdout: (c: Buffer) => void): StartedAgent {
  stub.onChunk = onStdout;
  const since = ticksNow();
  stub.exec(script);
  return { child: stub.child, channel: stub.channel, stdoutEnd: stub.stdoutEnd, identity: stub.identity, since: since ?? stub.identity.startTime };
}

interface SpawnOptions {
  cwd: string;
  env: Record<string, string>;
  stdin: 'pipe' | 'ignore';
  umask: number;
  socketFile: string;
  onStdout: (c: Buffer) => void;
}

/** The agent, spawned: argv without a shell, in the runner's process group. */
async function spawnAgent(argv: string[], o: SpawnOptions): Promise<StartedAgent | { spawnError: string }> {
  // Our own socket pair for stdout when it can be made (a faster copy, flat memory); else spawn's pipe.
  const channel = await openOutputChannel(o.socketFile, o.onStdout);
  channel?.reader.on('error', () => {});
  channel?.agentEnd.on('error', () => {});
  // What the agent's stdout will be, read on our side before our copy goes (escaped descendants still hold it).
  const stdoutEnd = ownEndOf(channel?.agentEnd);
  // The agent gets the user's own umask: files it creates in the project must look like the user's, not 0600.
  const previousUmask = process.umask(o.umask);
  let child: ChildProcess;
  try {
    child = spawn(argv[0]!, argv.slice(1), {
      cwd: o.cwd,
      env: o.env,
      stdio: [o.stdin, channel?.agentEnd ?? 'pipe', 'pipe'],
      // Same process group as the runner (not detached): cancelling the run's group reaches every agent.
      detached: false,
      windowsHide: true,
    });
  } finally {
    process.umask(previousUmask);
    // The agent has its own copy now (or none, if the spawn failed); ours would keep the reader from ever ending.
    channel?.agentEnd.destroy();
  }
  const spawnError = await new Promise<string | null>((resolve) => {
    child.once('spawn', () => resolve(null));
    child.once('error', (e) => resolve((e as NodeJS.ErrnoException).code ?? 'spawn failed'));
  });
  if (spawnError !== null) {
    channel?.reader.destroy();
    return { spawnError };
  }
  const identity = readIdentity(child.pid!) ?? { pid: child.pid!, startTime: 'unknown' };
  return { child, channel, stdoutEnd: stdoutEnd ?? ownEndOf(child.stdout), identity, since: identity.startTime };
}

/**
 * Now, in the clock ticks of a process's start time (`/proc/<pid>/stat` field 22), less a second for the rounding of
 * `/proc/uptime`; null where it cannot be read. Linux counts those ticks at USER_HZ, 100 on every architecture Node runs on.
 */
function ticksNow(): string | null {
  try {
    const up = Number(fs.readFileSync('/proc/uptime', 'latin1').split(' ')[0]);
    return Number.isFinite(up) && up > 1 ? String(Math.floor((up - 1) * 100)) : null;
  } catch {
    return null;
  }
}
