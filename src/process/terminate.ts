import { hasEnvEntry, listProcesses, readProcessInfo, type ProcessIdentity, type ProcessInfo } from './identity.js';

export interface RunProcessQuery {
  /** Process groups the run owns (the runner's pid is its group id). */
  pgids: number[];
  /** `SUBAGENTS_RUN_TOKEN` value: finds descendants that left the group. */
  token?: string;
  /** Never signal these pids (the caller itself). */
  exclude?: number[];
  /**
   * The runner's start time: a carrier of its token descends from it, so started no earlier. Only those processes'
   * environments are read (reading every process's was most of a sweep: ~90 reads on an idle machine, more on a busy
   * one, at every run's end).
   */
  since?: string;
  /**
   * Only processes whose pid this admits, plus `known` (process/pid-window.ts `pidsSince`: the pids handed out since
   * the run started, which every process the run left behind has). Read again at each scan, as pids keep coming.
   */
  pids?: () => ((pid: number) => boolean) | null;
  /** Pids always looked at, whatever `pids` admits: the run's recorded agents. */
  known?: number[];
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Live (non-zombie) processes of a run: members of its groups, or carriers of its token. */
export function findRunProcesses(q: RunProcessQuery): ProcessInfo[] {
  const exclude = new Set(q.exclude ?? []);
  const groups = new Set(q.pgids);
  const entry = q.token ? `SUBAGENTS_RUN_TOKEN=${q.token}` : undefined;
  const since = q.since !== undefined && /^\d+$/.test(q.since) ? Number(q.since) : null; // Linux clock ticks; ps dates: no filter
  const mayCarry = (p: ProcessInfo) => since === null || !/^\d+$/.test(p.startTime) || Number(p.startTime) >= since;
  const window = q.pids?.() ?? null;
  const known = new Set(q.known ?? []);
  const listed = listProcesses(window ? (pid) => window(pid) || known.has(pid) : undefined);
  return listed.filter((p) => p.state !== 'Z' && !exclude.has(p.pid)
    && (groups.has(p.pgid) || (entry !== undefined && mayCarry(p) && hasEnvEntry(p.pid, entry))));
}

/**
 * The process group of a run's runner (its pid) — but only while that pid is not another process's. Linux never hands
 * out a pid that is still the id of a live group, so a pid now owned by a different process (other start time) means
 * the run's group is empty and the group of that id belongs to someone else: signalling it would hit a stranger (F10).
 * Re-evaluate it on every scan (call it inside the `find` callback): a pid can be recycled at any moment.
 */
export function runnerGroups(runner: ProcessIdentity): number[] {
  const now = readProcessInfo(runner.pid);
  return now === null || now.startTime === runner.startTime ? [runner.pid] : [];
}

/** Signals a process only if it is still the one we found (same start time): never a reused pid. */
export function signalVerified(p: ProcessInfo, signal: NodeJS.Signals): boolean {
  const now = readProcessInfo(p.pid);
  if (!now || now.state === 'Z' || now.startTime !== p.startTime) return false;
  try {
    process.kill(p.pid, signal);
    return true;
  } catch {
    return false;
  }
}

export interface TerminateResult {
  /** Processes that were signalled. */
  signalled: number;
  /** Processes that survived SIGKILL (their slots stay held). */
  survivors: ProcessInfo[];
}

/**
 * SIGTERM every process of the run, wait up to the grace, SIGKILL what is left, then verify they are gone.
 * `find` is re-run each round, so processes forked during the grace are caught too.
 */
export async function terminateProcesses(find: () => ProcessInfo[], graceMs: number, verifyMs = 2000): Promise<TerminateResult> {
  let signalled = 0;
  let procs = find();
  if (procs.length === 0) return { signalled, survivors: [] };
  for (const p of procs) if (signalVerified(p, 'SIGTERM')) signalled++;
  const graceEnd = performance.now() + graceMs;
  while (performance.now() < graceEnd) {
    await sleep(Math.min(50, Math.max(1, graceEnd - performance.now())));
    procs = find();
    if (procs.length === 0) return { signalled, survivors: [] };
    for (const p of procs) signalVerified(p, 'SIGTERM'); // newly forked ones get the request too
  }
  const killEnd = performance.now() + verifyMs;
  for (;;) {
    procs = find();
    if (procs.length === 0) return { signalled, survivors: [] };
    for (const p of procs) if (signalVerified(p, 'SIGKILL')) signalled++;
    if (performance.now() >= killEnd) return { signalled, survivors: procs };
    await sleep(25);
  }
}

/**
 * Descendants of `rootPid` (by parent links), the root included. `spare` names processes whose subtrees are not
 * entered (the runners of nested runs: an agent's MCP server starts them, but they and their agents belong to their
 * own runs, which are stopped through those runners).
 */
export function processTree(rootPid: number, all = listProcesses(), spare: (p: ProcessInfo) => boolean = () => false): ProcessInfo[] {
  const byParent = new Map<number, ProcessInfo[]>();
  for (const p of all) {
    const list = byParent.get(p.ppid) ?? [];
    list.push(p);
    byParent.set(p.ppid, list);
  }
  const out: ProcessInfo[] = [];
  const root = all.find((p) => p.pid === rootPid);
  if (!root) return out;
  const stack = [root];
  while (stack.length) {
    const p = stack.pop()!;
    if (p !== root && spare(p)) continue;
    if (p.state !== 'Z') out.push(p);
    for (const c of byParent.get(p.pid) ?? []) stack.push(c);
  }
  return out;
}
