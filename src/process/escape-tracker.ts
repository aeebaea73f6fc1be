import fs from 'node:fs';
import { isAlive, listProcesses, readProcessInfo, type ProcessIdentity, type ProcessInfo } from './identity.js';
import { processTree } from './terminate.js';

/** A process that left both the run's process group and its run token, found as a descendant of one of its agents. */
export interface EscapedProcess extends ProcessIdentity {
  /** Its command line, bounded (never its environment). */
  command: string;
}

const HAS_PROC = process.platform === 'linux' && fs.existsSync('/proc/self/stat');
const TOKEN_PREFIX = 'SUBAGENTS_RUN_TOKEN=';
const MAX_COMMAND_CHARS = 200;

function commandOf(pid: number): string {
  try {
    const argv = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter((a) => a !== '');
    const text = argv.join(' ');
    return text.length > MAX_COMMAND_CHARS ? `${text.slice(0, MAX_COMMAND_CHARS - 1)}…` : text;
  } catch {
    return '';
  }
}

/** The run token a process carries, '' for none, null when its environment cannot be read. */
function tokenOf(pid: number): string | null {
  try {
    const entry = fs.readFileSync(`/proc/${pid}/environ`, 'latin1').split('\0').find((e) => e.startsWith(TOKEN_PREFIX));
    return entry === undefined ? '' : entry.slice(TOKEN_PREFIX.length);
  } catch {
    return null;
  }
}

/**
 * What one of this process's stream handles is (`socket:[…]`, `pipe:[…]`), or null: a pipe's two ends are one inode,
 * and the socket end handed to an agent as its stdout is the very file the agent's fd 1 refers to. Reads Node's
 * handle fd (not a public API; null where it is missing).
 */
export function ownEndOf(stream: unknown): string | null {
  const fd = (stream as { _handle?: { fd?: unknown } } | null | undefined)?._handle?.fd;
  if (!HAS_PROC || typeof fd !== 'number' || fd < 0) return null;
  return fdTarget(process.pid, fd);
}

const hasChildrenFiles = HAS_PROC && fs.existsSync(`/proc/self/task/${process.pid}/children`);

/** A process's children, from every one of its threads' `children` file. */
function childrenOf(pid: number): number[] {
  const out: number[] = [];
  let tasks: string[];
  try { tasks = fs.readdirSync(`/proc/${pid}/task`); } catch { return out; }
  for (const tid of tasks) {
    try {
      for (const c of fs.readFileSync(`/proc/${pid}/task/${tid}/children`, 'utf8').split(' ')) if (/^\d+$/.test(c)) out.push(Number(c));
    } catch { /* exited meanwhile */ }
  }
  return out;
}

/** What an fd of a process points at (`socket:[123]`, `pipe:[456]`, a path), or null. */
function fdTarget(pid: number, fd: number): string | null {
  try { return fs.readlinkSync(`/proc/${pid}/fd/${fd}`); } catch { return null; }
}

/**
 * Tracks every descendant of one agent while it is still attached, to find the ones that escape the run's process
 * group and drop its run token (`( setsid env -u SUBAGENTS_RUN_TOKEN … & )`): neither the group nor the token reaches
 * them, and once their parent exits they are re-parented away from the agent's tree. Linux only (/proc); elsewhere it
 * finds nothing. Two ways, neither needing privileges (PR_SET_CHILD_SUBREAPER and cgroups are out of Node's reach):
 * - while the agent runs, its process tree is sampled (`sampleEveryMs`), each descendant recorded by identity;
 * - when it has exited, if anything still held its stdout or stderr open (the caller's drain timed out), the
 *   processes whose fd 0–2 is that socket or pipe are its descendants too (inherited, never handed to strangers).
 * A process that escaped between two samples with its stdio redirected is not found: see docs/reliability.md.
 */
export class EscapeTracker {
  private readonly seen = new Map<number, ProcessInfo>();
  private stdio = new Set<string>();
  private timer: NodeJS.Timeout | null = null;

  /**
   * `stdio`: what the agent's stdout and stderr are (`socket:[…]`, `pipe:[…]`, from `ownEndOf` on the runner's side:
   * read from the agent itself, a quick agent may be gone before it is looked at).
   */
  constructor(private readonly rootPid: number, private readonly spare: (p: ProcessInfo) => boolean, stdio: Array<string | null>, sampleEveryMs = 250) {
    if (!HAS_PROC) return;
    for (const t of stdio) if (t !== null && /^(socket|pipe):\[\d+\]$/.test(t)) this.stdio.add(t);
    this.sampleTree();
    this.timer = setInterval(() => this.sampleTree(), sampleEveryMs);
    this.timer.unref();
  }

  /** Records the agent's current descendants from a scan of every process (the caller's own, when it stops the agent). */
  sample(list: ProcessInfo[]): void {
    for (const p of processTree(this.rootPid, list, this.spare)) if (p.pid !== this.rootPid) this.seen.set(p.pid, p);
  }

  /**
   * The periodic sample: the agent's tree walked down through `/proc/<pid>/task/<tid>/children` — a few reads per
   * descendant, where a scan of every process costs one read per process on the machine (~130 reads, 1–30 ms
   * here). Falls back to the full scan where the kernel has no children files.
   */
  private sampleTree(): void {
    if (!hasChildrenFiles) { this.sample(listProcesses()); return; }
    const stack = [this.rootPid];
    const visited = new Set<number>();
    while (stack.length > 0) {
      const pid = stack.pop()!;
      if (visited.has(pid)) continue;
      visited.add(pid);
      for (const child of childrenOf(pid)) {
        const info = readProcessInfo(child);
        if (!info || info.state === 'Z' || this.spare(info)) continue;
        this.seen.set(child, info);
        stack.push(child);
      }
    }
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  /**
   * Descendants that are alive (same start time) but neither in `runGroup` nor carrying `token`, and not another run's
   * (a nested run's runner or agents, which their own run stops). `stdioHeld`: the agent's stdout or stderr was still
   * open after it exited, so its holders are looked for too.
   */
  escaped(runGroup: number, token: string, stdioHeld: boolean): EscapedProcess[] {
    this.stop();
    if (!HAS_PROC) return [];
    const candidates = new Map<number, ProcessIdentity>();
    for (const p of this.seen.values()) candidates.set(p.pid, p);
    if (stdioHeld && this.stdio.size > 0) {
      for (const name of fs.readdirSync('/proc')) {
        if (!/^\d+$/.test(name)) continue;
        const pid = Number(name);
        if (pid === process.pid || candidates.has(pid)) continue;
        if ([0, 1, 2].some((fd) => { const t = fdTarget(pid, fd); return t !== null && this.stdio.has(t); })) {
          const info = readProcessInfo(pid);
          if (info) candidates.set(pid, info);
        }
      }
    }
    const out: EscapedProcess[] = [];
    for (const id of candidates.values()) {
      const now = readProcessInfo(id.pid);
      if (!now || now.state === 'Z' || now.startTime !== id.startTime || !isAlive(id)) continue;
      if (now.pgid === runGroup || this.spare(now)) continue;
      const carried = tokenOf(id.pid);
      if (carried === null || carried !== '') continue; // ours (the sweep stops it) or another run's (its run does)
      out.push({ pid: id.pid, startTime: id.startTime, command: commandOf(id.pid) });
    }
    return out;
  }
}
