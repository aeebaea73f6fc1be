import fs from 'node:fs';

/**
 * Which pids were handed out since a moment (docs/architecture.md, "The life of a run", step 6): a run's end scans
 * `/proc` for what its agents left behind, and every such process was created after the run started. Linux hands out
 * pids in cyclic order (the lowest free one above the last, wrapping to 300 past `pid_max`), so as long as the
 * allocator cannot have gone all the way round since then, those processes have pids in the cyclic interval
 * (last pid then, last pid now] and only they need their `/proc/<pid>/stat` read. Linux only; null elsewhere or when
 * anything it reads is not as expected (the caller then scans every process).
 */

/** The allocator's position at a moment: the last pid given out, and how many tasks the machine had created then. */
export interface PidMark {
  lastPid: number;
  /** `processes` of /proc/stat: every fork and thread since boot, in any pid namespace. */
  forks: number;
  /** Tasks (threads) that existed then. */
  tasks: number;
}

/** Pids below this are never handed out again after a wrap (the kernel's RESERVED_PIDS). */
const RESERVED_PIDS = 300;

/**
 * /proc of this process's own pid namespace (its `self` is our pid): /proc/loadavg's last pid is the reader's
 * namespace's, and must count in the same pids as the `/proc` listing it narrows.
 */
const HAS_PROC = process.platform === 'linux' && ownProc();

function ownProc(): boolean {
  try {
    return fs.readlinkSync('/proc/self') === String(process.pid) && fs.existsSync('/proc/loadavg');
  } catch {
    return false;
  }
}

let pidMaxRead: number | null | undefined;
function pidMax(): number | null {
  if (pidMaxRead === undefined) {
    try {
      const v = Number(fs.readFileSync('/proc/sys/kernel/pid_max', 'latin1').trim());
      pidMaxRead = Number.isInteger(v) && v > RESERVED_PIDS ? v : null;
    } catch {
      pidMaxRead = null;
    }
  }
  return pidMaxRead;
}

/** `/proc/loadavg`'s last two fields: running/existing tasks (threads count), then the last pid given out here. */
function readLoadavg(): { tasks: number; lastPid: number } | null {
  const f = fs.readFileSync('/proc/loadavg', 'latin1').trim().split(' ');
  const tasks = Number(f[3]?.split('/')[1]);
  const lastPid = Number(f[4]);
  return Number.isInteger(tasks) && Number.isInteger(lastPid) && lastPid > 0 ? { tasks, lastPid } : null;
}

function readForks(): number | null {
  const text = fs.readFileSync('/proc/stat', 'latin1');
  const m = /^processes (\d+)$/m.exec(text);
  return m ? Number(m[1]) : null;
}

/** Where the pid allocator is now; null where it cannot be read. */
export function pidMark(): PidMark | null {
  if (!HAS_PROC) return null;
  try {
    const la = readLoadavg();
    const forks = readForks();
    return la && forks !== null ? { lastPid: la.lastPid, forks, tasks: la.tasks } : null;
  } catch {
    return null;
  }
}

/**
 * The pids handed out since `mark`, given the allocator now and `pid_max`; null when the allocator may have gone all
 * the way round. It moves one pid per task created and skips the pids in use as it passes them — by a task, or as the
 * id of a process group or session, at most three per task alive at some point since the mark (those of the mark,
 * or created since) — so it has covered at most `created + 3 × (tasks + created)` pids. Below a full cycle (`pid_max`
 * less the reserved ones) no pid given out since lies outside the interval.
 */
export function pidWindow(mark: PidMark, now: PidMark, max: number): ((pid: number) => boolean) | null {
  const created = now.forks - mark.forks;
  if (created < 0 || created + 3 * (Math.max(mark.tasks, now.tasks) + created) >= max - RESERVED_PIDS) return null;
  const from = mark.lastPid;
  const to = now.lastPid;
  return to >= from ? (pid) => pid > from && pid <= to : (pid) => pid > from || pid <= to;
}

/** `pidWindow` for now, read from /proc; null when it cannot be bounded (scan every process then). */
export function pidsSince(mark: PidMark): ((pid: number) => boolean) | null {
  const max = HAS_PROC ? pidMax() : null;
  if (max === null) return null;
  try {
    // Forks first: a task created between the two reads moves the last pid past what `forks` counts, never short of it.
    const forks = readForks();
    const la = readLoadavg();
    if (forks === null || la === null) return null;
    return pidWindow(mark, { lastPid: la.lastPid, forks, tasks: la.tasks }, max);
  } catch {
    return null;
  }
}
