import fs from 'node:fs';
import path from 'node:path';
import { isAlive, type ProcessIdentity } from '../process/identity.js';
import { writeNewFile } from '../store/atomic-write.js';
import { WarmPoolFiles, type WarmClaim } from '../store/warm-pool.js';
import { waitUntil } from '../wait.js';

/**
 * A runner booted before its run exists (docs/architecture.md, "Warm runners"): it announces itself in the warm
 * directory and waits, holding no capacity, slot or fan-out, until a launch takes it or its idle time is up. Returns
 * the claim it was given, or null when it retired or was taken and never told which run (the claimant died): it then
 * exits having started nothing. Node built-ins only.
 */
export interface WarmIdleOptions {
  warmDir: string;
  me: ProcessIdentity;
  /** The build tag the booting server gave it (manager/warm-pool.ts), announced with it. */
  build: string;
  /** Its stdout/stderr file in the warm directory (named in the announcement, so a claimant can remove a dead one's). */
  bootLog?: string;
  idleMs: number;
  /** How long a taken runner waits for its claim (the claimant's handshake timeout). */
  claimWaitMs: number;
  /** Whether, given its claim, it may come back to the pool after that run: it is then counted as serving meanwhile. */
  serving?: (claim: WarmClaim) => boolean;
  /** Called right after the announcement (a runner back from a run stops counting as serving then). */
  onAnnounced?: (key: string) => void;
  /**
   * The process whose pool this is when it is not the state home's servers': a distributed worker (its home is its
   * own). When it dies the runner retires at once instead of idling out (docs/scale-out.md, "Failures").
   */
  owner?: ProcessIdentity | null;
}

export async function awaitWarmClaim(o: WarmIdleOptions): Promise<{ claim: WarmClaim; key: string } | null> {
  const files = new WarmPoolFiles(o.warmDir);
  const key = files.announce(o.me, o.build, o.bootLog);
  o.onAnnounced?.(key);
  const watch = { dirs: [o.warmDir], filter: (n: string) => files.isOwnName(key, n), pollMs: 1000 };
  const owner = o.owner ?? null;
  const seen = await waitUntil<'taken' | 'orphaned'>({
    ...watch, timeoutMs: o.idleMs,
    check: () => (!files.isIdle(key) ? 'taken' : owner && !isAlive(owner) ? 'orphaned' : null),
  });
  // Idle time up (or its worker gone): retiring and being taken are the same rename, so exactly one of them happens.
  if (seen !== 'taken' && files.retire(key)) return null;
  const claim = await waitUntil<WarmClaim>({ ...watch, timeoutMs: o.claimWaitMs, check: () => files.consumeClaim(key, o.serving) });
  if (!claim) files.forget(key);
  return claim ? { claim, key } : null;
}

/**
 * Makes the claimed runner the run's own: its environment becomes the run's, its working directory the run's, and
 * its boot log (its stdout and stderr, inherited file descriptors) becomes the run's runner.log by a rename, so
 * everything it writes from here on — its fatal errors too — lands where `status` and the reconciler read it.
 */
export function adoptRun(claim: WarmClaim, bootLog: string | undefined, runnerLog: string): void {
  for (const k of Object.keys(process.env)) delete process.env[k];
  Object.assign(process.env, claim.env);
  process.chdir(claim.runDir);
  // The command line then names the run, as a runner booted for it does (`ps`, and finding a run's runner by its
  // directory); the pool passes a padding argument so the new title fits where Linux keeps the old one.
  process.title = `${process.execPath} ${process.argv[1]} ${claim.runDir}`;
  if (bootLog && path.dirname(runnerLog) === claim.runDir) {
    try { fs.renameSync(bootLog, runnerLog); } catch { /* the run's log stays empty; nothing else depends on it */ }
  }
}

export interface LeaveRunOptions {
  /** The environment the runner was booted with (no run's). */
  bootEnv: NodeJS.ProcessEnv;
  warmDir: string;
  /** The run's runner.log, which its stdout and stderr are. */
  runnerLog: string;
  /** The fresh boot log (in the warm directory) they become. */
  bootLog: string;
}

/**
 * The reverse of `adoptRun`, for a runner going back to the pool after its run ended: the run's environment, working
 * directory and command line go, and its stdout and stderr stop being the run's runner.log — the file they write to
 * gets a second name in the warm directory as its new boot log, a copy of it replaces it under the run's name (the
 * run's log is never missing), and the file is emptied (opened for appending: the next write starts at 0). False when the log could not be moved: the runner then
 * exits rather than write into the ended run's log.
 */
export function leaveRun(o: LeaveRunOptions): boolean {
  for (const k of Object.keys(process.env)) delete process.env[k];
  Object.assign(process.env, o.bootEnv);
  process.chdir(o.warmDir);
  try {
    const own = fs.fstatSync(2);
    const named = fs.statSync(o.runnerLog);
    if (own.ino !== named.ino || own.dev !== named.dev || fs.fstatSync(1).ino !== own.ino) return false;
    fs.linkSync(o.runnerLog, o.bootLog);
    // The copy is made in the warm directory and renamed over the run's name: a runner killed half-way leaves its
    // files there, where the pool removes a dead runner's (`WarmPoolFiles.forget`), never in the ended run's directory.
    const copy = `${o.bootLog}.copy`;
    writeNewFile(copy, fs.readFileSync(o.bootLog));
    fs.renameSync(copy, o.runnerLog);
    fs.ftruncateSync(2, 0);
  } catch {
    fs.rmSync(`${o.bootLog}.copy`, { force: true });
    return false;
  }
  process.title = `${process.execPath} ${process.argv[1]} --warm ${o.warmDir}`;
  return true;
}
