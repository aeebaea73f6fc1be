import fs from 'node:fs';

/** A process as a pid *and* its start time: a pid alone may have been reused by an unrelated process. */
export interface ProcessIdentity {
  pid: number;
  startTime: string;
}

export interface ProcessInfo extends ProcessIdentity {
  ppid: number;
  pgid: number;
  /** One-letter kernel state (`R`, `S`, `Z` …). */
  state: string;
}

const HAS_PROC = process.platform === 'linux' && fs.existsSync('/proc/self/stat');

/**
 * `ps`, where there is no /proc (macOS). child_process is loaded only then: the runner reads its own identity before
 * it reports ready, and importing child_process there cost ~3 ms of every launch's boot.
 */
function ps(args: string[]): string {
  const { execFileSync } = process.getBuiltinModule('node:child_process');
  return execFileSync('ps', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
}

/**
 * Parses /proc/<pid>/stat; the command name may contain spaces and parentheses, so fields are read after the last ')'.
 * Only the first 20 fields after it are split off (fields 3–22; the line has 52): a run's end parses every process
 * of the machine.
 */
function parseStat(pid: number, text: string): ProcessInfo | null {
  const close = text.lastIndexOf(')');
  if (close < 0) return null;
  const f = text.slice(close + 2).split(' ', 20);
  // f[0] is field 3 (state); field N is f[N - 3].
  if (f.length < 20) return null;
  return { pid, state: f[0]!, ppid: Number(f[1]), pgid: Number(f[2]), startTime: f[19]! };
}

/** One buffer for every /proc/<pid>/stat read of this process (synchronous reads: never two at once). */
const statBuf = Buffer.allocUnsafe(1024);

/**
 * /proc/<pid>/stat (`name`: the pid as text), parsed; null when the process is gone. Open, one read into `statBuf` and
 * close: three system calls, where `readFileSync` makes five (an fstat, and a second read to meet the end of a file
 * whose size /proc does not tell). A line that fills the buffer (never seen: it is ~300 bytes) is read whole.
 */
function readStat(pid: number, name: string): ProcessInfo | null {
  const file = `/proc/${name}/stat`;
  let fd: number;
  try {
    fd = fs.openSync(file, fs.constants.O_RDONLY);
  } catch {
    return null; // exited meanwhile
  }
  let got = 0;
  try {
    got = fs.readSync(fd, statBuf, 0, statBuf.length, null);
  } catch {
    return null;
  } finally {
    fs.closeSync(fd);
  }
  if (got < statBuf.length) return parseStat(pid, statBuf.toString('latin1', 0, got));
  try {
    return parseStat(pid, fs.readFileSync(file, 'latin1'));
  } catch {
    return null;
  }
}

export function readProcessInfo(pid: number): ProcessInfo | null {
  if (!Number.isInteger(pid) || pid <= 0) return null;
  if (HAS_PROC) {
    return readStat(pid, String(pid));
  }
  try {
    const out = ps(['-o', 'ppid=,pgid=,stat=,lstart=', '-p', String(pid)]).trim();
    const m = /^(\d+)\s+(\d+)\s+(\S+)\s+(.+)$/.exec(out);
    if (!m) return null;
    return { pid, ppid: Number(m[1]), pgid: Number(m[2]), state: m[3]![0]!, startTime: m[4]!.trim() };
  } catch {
    return null;
  }
}

export function readIdentity(pid: number): ProcessIdentity | null {
  const info = readProcessInfo(pid);
  return info && info.state !== 'Z' ? { pid, startTime: info.startTime } : null;
}

/**
 * Whether the pid of a process known dead belongs to no live process now: none has it, or only a zombie (itself, not
 * yet reaped, or another dead one). Files named with that pid are then no live process's.
 */
export function pidIsFree(dead: ProcessIdentity): boolean {
  const now = readIdentity(dead.pid);
  return now === null || now.startTime === dead.startTime;
}

export function selfIdentity(): ProcessIdentity {
  const id = readIdentity(process.pid);
  return id ?? { pid: process.pid, startTime: 'unknown' };
}

/**
 * Alive means: the pid exists, is not a zombie (signal 0 succeeds on zombies, and PID 1 reaps slowly here), and
 * started when we recorded it did.
 */
export function isAlive(id: ProcessIdentity | null | undefined): boolean {
  if (!id) return false;
  const info = readProcessInfo(id.pid);
  return info !== null && info.state !== 'Z' && info.startTime === id.startTime;
}

/**
 * Every process visible to us (Linux: /proc; elsewhere: ps). `only`: on Linux, just the processes whose pid it admits
 * (the others' `/proc/<pid>/stat` is not read; see process/pid-window.ts).
 */
export function listProcesses(only?: (pid: number) => boolean): ProcessInfo[] {
  const out: ProcessInfo[] = [];
  if (HAS_PROC) {
    for (const name of fs.readdirSync('/proc')) {
      const c = name.charCodeAt(0);
      if (c < 0x30 || c > 0x39) continue; // not a pid (`self`, `sys` …): pid directories are all digits
      const pid = Number(name);
      if (only && !only(pid)) continue;
      const info = readStat(pid, name);
      if (info) out.push(info);
    }
    return out;
  }
  try {
    const text = ps(['-A', '-o', 'pid=,ppid=,pgid=,stat=,lstart=']);
    for (const line of text.split('\n')) {
      const m = /^\s*(\d+)\s+(\d+)\s+(\d+)\s+(\S+)\s+(.+)$/.exec(line);
      if (m) out.push({ pid: Number(m[1]), ppid: Number(m[2]), pgid: Number(m[3]), state: m[4]![0]!, startTime: m[5]!.trim() });
    }
  } catch { /* no ps: nothing found */ }
  return out;
}

/**
 * Whether a process carries `name=value` in its environment (Linux only; same-user processes only). Read as 'utf8',
 * Node's one-call path (another encoding reads in chunks through the JS wrappers), and searched whole with the NULs
 * that bound each entry: no array of every entry.
 */
export function hasEnvEntry(pid: number, entry: string): boolean {
  if (!HAS_PROC) return false;
  let text: string;
  try {
    text = fs.readFileSync(`/proc/${pid}/environ`, 'utf8');
  } catch {
    return false;
  }
  return text === entry || text.startsWith(`${entry}\0`) || text.includes(`\0${entry}\0`) || text.endsWith(`\0${entry}`);
}

/**
 * A process's command line as words ([] when unreadable). A runner that took a run from the warm pool renames itself
 * (`process.title`), which Linux shows as one space-separated string: both forms are split alike (state-home paths
 * have no spaces).
 */
export function commandLineOf(pid: number): string[] {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split(/[\0 ]/).filter((a) => a !== '');
  } catch {
    return [];
  }
}

/**
 * Whether `runner` still serves the run in `runDir`: alive, and its command line names that directory. A warm runner
 * that ended its run and went back to the pool names the pool instead (docs/architecture.md, "Warm runners").
 */
export function servesRun(runner: ProcessIdentity, runDir: string): boolean {
  if (!isAlive(runner)) return false;
  if (!HAS_PROC) return true;
  // An empty command line is a process on its way out: its memory goes before it is a zombie, and a cancel that
  // stopped waiting then answered while the runner still ran. It is the run's until it is gone.
  const cmd = commandLineOf(runner.pid);
  return cmd.length === 0 || cmd.includes(runDir);
}

/**
 * Whether any process serves the run in `runDir` (its command line names the directory: a runner started for it, or a
 * warm runner that took it), for when the run's status, which names its runner, cannot be read. Null where processes'
 * command lines cannot be listed (no /proc).
 */
export function someProcessServes(runDir: string): boolean | null {
  if (!HAS_PROC) return null;
  for (const name of fs.readdirSync('/proc')) {
    const c = name.charCodeAt(0);
    if (c < 0x30 || c > 0x39) continue;
    if (commandLineOf(Number(name)).includes(runDir)) return true;
  }
  return false;
}

/**
 * The process a runner works for when it is not the state home's servers: a distributed worker
 * (SUBAGENTS_SUPERVISOR=pid:startTime, docs/scale-out.md, "Failures"). When it dies nothing would report the run, so a
 * runner stops its agents as for a cancel and ends; an idle warm runner of its pool retires.
 */
export function supervisorOf(env: NodeJS.ProcessEnv): ProcessIdentity | null {
  const m = /^(\d+):(\S+)$/.exec(env.SUBAGENTS_SUPERVISOR ?? '');
  return m ? { pid: Number(m[1]), startTime: m[2]! } : null;
}
