import fs from 'node:fs';
import path from 'node:path';
import type { ProcessIdentity } from '../process/identity.js';
import { removeStaleTemps, writeFileAtomic, writeNewFile } from './atomic-write.js';
import { readStateText } from './state-file.js';

/**
 * The warm pool's files in `<home>/warm/` (docs/architecture.md, "Warm runners"). A pre-booted runner announces itself
 * with `<key>.idle` (its pid and start time). Taking it is one rename, `<key>.idle` → `<key>.taken`: exactly one
 * server wins it, and a runner that retires renames the same name away, so a retirement and a claim never both
 * succeed. The winner then writes `<key>.claim` (the run directory and the run's environment); the runner reads it,
 * removes it and serves that run. A runner that may go back to the pool after that run keeps its entry as
 * `<key>.serving` meanwhile (the pool counts it as a runner to come), and announces itself again with `<key>.idle`
 * when it is back. Node built-ins only: the runner's entry uses this before it has a run.
 */
export interface IdleEntry extends ProcessIdentity {
  key: string;
  /** Which build of the runner it is (a server claims only its own build's runners: the two must speak alike). */
  build: string;
  /** Its boot log's name in the warm directory ('' if none), removed with it when it is found dead. */
  log: string;
}

export interface WarmClaim {
  runDir: string;
  /** The run's runner environment (what its agents may receive): it replaces the idle runner's own. */
  env: Record<string, string>;
  /**
   * What the claimant's pool wants of a runner whose run has ended: back to the pool while fewer than `size` runners
   * are idle, up to `maxRuns` runs in all (1: it exits after this run). Absent: it exits after this run.
   */
  pool?: { size: number; maxRuns: number };
}

/** A runner serving a run that may bring it back to the pool, and since when (ms since the epoch). */
export interface ServingEntry extends IdleEntry {
  sinceMs: number;
}

export class WarmPoolFiles {
  constructor(readonly dir: string) {}

  static keyOf(id: ProcessIdentity): string {
    return `${id.pid}-${id.startTime.replace(/[^0-9A-Za-z]/g, '_')}`;
  }

  private file(key: string, kind: 'idle' | 'taken' | 'claim' | 'retired' | 'serving'): string {
    return path.join(this.dir, `${key}.${kind}`);
  }

  /** A fresh runner's boot log (stdio while idle); renamed into the run directory as its runner.log at the claim. */
  bootLog(bootId: string): string { return path.join(this.dir, `${bootId}.log`); }

  /**
   * A new runner's boot log, made now, before its spawn (`boot-<server pid>-<12 random hex digits>.log`, 0600, never
   * through a link; the caller draws the digits: the runner's entry loads no crypto):
   * until the runner announces itself naming it, the file is how other servers of the home count it as on its way up.
   */
  newBootLog(hex12: string): string {
    const file = this.bootLog(`boot-${process.pid}-${hex12}`);
    fs.closeSync(fs.openSync(file, fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_NOFOLLOW, 0o600));
    return file;
  }

  /**
   * Fresh runners' boot logs that no entry (idle, taken, serving) names yet: runners on their way up, or that died on
   * it. `serverPid` is the booting server's; `quietMs` how long since the runner last wrote to it.
   */
  unannouncedBoots(): Array<{ name: string; serverPid: number; quietMs: number }> {
    let names: string[];
    try { names = fs.readdirSync(this.dir); } catch { return []; }
    const named = new Set([...this.listIdle(), ...this.listTaken(), ...this.listServing()].map((e) => e.log));
    const now = Date.now();
    const out: Array<{ name: string; serverPid: number; quietMs: number }> = [];
    for (const n of names) {
      const m = /^boot-(\d+)-[0-9a-f]{12}\.log$/.exec(n);
      if (!m || named.has(n)) continue;
      try { out.push({ name: n, serverPid: Number(m[1]), quietMs: now - fs.lstatSync(path.join(this.dir, n)).mtimeMs }); } catch { /* claimed meanwhile */ }
    }
    return out;
  }

  /**
   * Removes what writers killed mid-write left in the pool's directory (`.<key>.idle.<pid>.<hex>.tmp` of a runner
   * SIGKILLed while announcing itself): only temps whose writer's pid is gone.
   */
  removeDeadWritersTemps(): void {
    removeStaleTemps(this.dir, null, false);
  }

  /** Removes a boot log nobody will announce (its runner died on its way up). */
  removeBootLog(name: string): void {
    fs.rmSync(path.join(this.dir, name), { force: true });
  }

  ensureDir(): void {
    fs.mkdirSync(this.dir, { recursive: true, mode: 0o700 });
  }

  announce(id: ProcessIdentity, build: string, bootLog = ''): string {
    const key = WarmPoolFiles.keyOf(id);
    const log = path.dirname(bootLog) === this.dir ? path.basename(bootLog) : '';
    writeFileAtomic(this.file(key, 'idle'), JSON.stringify({ pid: id.pid, startTime: id.startTime, build, log }), { durable: false });
    return key;
  }

  isIdle(key: string): boolean { return fs.existsSync(this.file(key, 'idle')); }

  /** The idle runners announced; unreadable entries are skipped (a writer mid-rename). */
  listIdle(): IdleEntry[] {
    return [...this.idleEntries()];
  }

  /**
   * The same, read one entry at a time as the caller goes on: a claim usually needs the first one only, and each
   * entry is a file to open and parse.
   */
  *idleEntries(): Generator<IdleEntry> {
    for (const n of this.longestIdleFirst(this.names('.idle'))) {
      const e = this.entry(n, '.idle');
      if (e) yield e;
    }
  }

  /** The runners serving a run that may bring them back to the pool (`<key>.serving`, renamed from their `.taken`). */
  listServing(): ServingEntry[] {
    const out: ServingEntry[] = [];
    for (const n of this.names('.serving')) {
      const e = this.entry(n, '.serving');
      if (!e) continue;
      let sinceMs = 0;
      // The rename kept the file's mtime (its announcement); its ctime is the rename's, i.e. the claim's.
      try { sinceMs = fs.statSync(path.join(this.dir, n)).ctimeMs; } catch { /* gone meanwhile: counted as old */ }
      out.push({ ...e, sinceMs });
    }
    return out;
  }

  /**
   * Runners taken for a launch and not yet past their claim (`<key>.taken`: the `.idle` entry renamed). One that died
   * there (killed between the take and reading its claim) leaves this, its claim and its boot log behind.
   */
  listTaken(): IdleEntry[] {
    const out: IdleEntry[] = [];
    for (const n of this.names('.taken')) {
      const e = this.entry(n, '.taken');
      if (e) out.push(e);
    }
    return out;
  }

  /**
   * Idle names, the longest idle first (the oldest announcement): a runner just back from a run is taken last, so it has
   * time to start its next agent stub (runner/agent-stub.ts), and the pool's runners share the work.
   */
  private longestIdleFirst(names: string[]): string[] {
    if (names.length < 2) return names;
    const since = new Map(names.map((n) => {
      try { return [n, fs.statSync(path.join(this.dir, n)).mtimeMs] as const; } catch { return [n, Infinity] as const; }
    }));
    return names.sort((a, b) => since.get(a)! - since.get(b)!);
  }

  private names(suffix: '.idle' | '.serving' | '.taken'): string[] {
    let names: string[];
    try { names = fs.readdirSync(this.dir); } catch { return []; }
    return names.filter((n) => n.endsWith(suffix) && !n.startsWith('.'));
  }

  private entry(n: string, suffix: '.idle' | '.serving' | '.taken'): IdleEntry | null {
    try {
      const v = JSON.parse(readStateText(path.join(this.dir, n), n) ?? '') as { pid?: unknown; startTime?: unknown; build?: unknown; log?: unknown };
      if (typeof v.pid === 'number' && typeof v.startTime === 'string') {
        const log = typeof v.log === 'string' && /^boot-[\w-]+\.log$/.test(v.log) ? v.log : '';
        return { key: n.slice(0, -suffix.length), pid: v.pid, startTime: v.startTime, build: typeof v.build === 'string' ? v.build : '', log };
      }
    } catch { /* gone meanwhile, or half a name: not a candidate */ }
    return null;
  }

  /** Takes an idle runner for one launch: true for exactly one caller (rename is atomic). */
  take(key: string): boolean {
    try {
      fs.renameSync(this.file(key, 'idle'), this.file(key, 'taken'));
      return true;
    } catch {
      return false;
    }
  }

  /** The runner retires itself: true unless a claimant took it first (then it must serve the claim). */
  retire(key: string): boolean {
    try {
      fs.renameSync(this.file(key, 'idle'), this.file(key, 'retired'));
      fs.rmSync(this.file(key, 'retired'), { force: true });
      return true;
    } catch {
      return false;
    }
  }

  /**
   * The boot log of a runner going back to the pool after its `served`-th run (`leaveRun`); its name starts with
   * the runner's key, so that `forget` finds it and its copy if the runner dies half-way back.
   */
  returnLog(id: ProcessIdentity, served: number): string { return this.bootLog(`boot-${WarmPoolFiles.keyOf(id)}-run${served}`); }

  /**
   * Names of a runner known dead or done with the pool (its `.idle`), so nobody tries it again; `log`: its boot log
   * too. So do the files of its way back from a run (`returnLog` and its copy), which a runner killed half-way leaves.
   */
  forget(key: string, log = ''): void {
    for (const k of ['idle', 'taken', 'claim', 'serving'] as const) fs.rmSync(this.file(key, k), { force: true });
    if (log) fs.rmSync(path.join(this.dir, log), { force: true });
    let names: string[] = [];
    try { names = fs.readdirSync(this.dir); } catch { /* no pool directory */ }
    for (const n of names) if (n.startsWith(`boot-${key}-run`)) fs.rmSync(path.join(this.dir, n), { force: true });
  }

  /**
   * The claimant's message: 0600 (it carries the run's environment, so never a listing's business), created
   * O_EXCL|O_NOFOLLOW in place, without a temp and a rename: only the runner that was taken reads it, and it takes
   * a claim it finds still being written for none (`consumeClaim`: JSON cut short never parses), then wakes again at
   * the write's own change event. A claimant killed mid-write leaves a runner that never gets a run, as one killed
   * before the write does.
   */
  writeClaim(key: string, claim: WarmClaim): void {
    writeNewFile(this.file(key, 'claim'), JSON.stringify(claim));
  }

  /**
   * The runner reads its claim and removes it and its `.taken` at once (the environment must not linger on disk);
   * `serving(claim)` true: its `.taken` becomes `<key>.serving` instead, until it is back or gone.
   */
  consumeClaim(key: string, serving: (claim: WarmClaim) => boolean = () => false): WarmClaim | null {
    let v: WarmClaim;
    try {
      const raw = readStateText(this.file(key, 'claim'), `${key}.claim`);
      if (raw === null) return null;
      v = JSON.parse(raw) as WarmClaim; // not whole yet (writeClaim): no claim yet
    } catch {
      return null;
    }
    const valid = typeof v.runDir === 'string' && typeof v.env === 'object' && v.env !== null;
    if (valid && serving(v)) {
      try { fs.renameSync(this.file(key, 'taken'), this.file(key, 'serving')); } catch { /* not counted: the pool may boot one more */ }
    }
    for (const k of ['idle', 'taken', 'claim'] as const) fs.rmSync(this.file(key, k), { force: true });
    if (!valid) throw new Error('malformed warm claim');
    return v;
  }

  /** A runner that served its run and stays in the pool no longer counts as serving (its `.idle` is written first). */
  endServing(key: string): void {
    fs.rmSync(this.file(key, 'serving'), { force: true });
  }

  /** A wait's wake-up filter: only this runner's own names. */
  isOwnName(key: string, name: string): boolean { return name.startsWith(`${key}.`); }
}
