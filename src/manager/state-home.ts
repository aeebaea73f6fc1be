import type { Settings } from '../config.js';
import { Layout } from '../store/layout.js';
import { configureLocks, settleLocks } from '../store/lock.js';
import { isAlive, pidIsFree, selfIdentity } from '../process/identity.js';
import type { SessionRegistry } from '../store/ports.js';
import type { SessionRecord } from '../store/session-registry.js';
import { checkStateHome, openStateHome } from '../store/state-home.js';
import { seedAppearedRunIds } from './listing.js';
import { registerSession } from './session-record.js';

/**
 * Opens a server's state home (made if missing; refused when unsafe) and takes its first look at `runs/`, which the
 * listing's first answer uses.
 */
export function openHome(settings: Settings): void {
  identifyLockHolder(settings);
  const opened = openStateHome(settings.home);
  if (opened.runs) seedAppearedRunIds(new Layout(settings.home), opened.runs);
}

/**
 * Records this process (pid + start time) in the locks it takes and lets it clear a lock whose holder provably died
 * at once (store/lock-dir.ts); sets how long a held lock is waited for.
 */
export function identifyLockHolder(settings: Pick<Settings, 'lockWaitMs'>): void {
  configureLocks({ self: selfIdentity(), isAlive, pidFree: pidIsFree, waitMs: settings.lockWaitMs });
}

/** Whether a state home is safe to use (`problems` empty), and what is wrong with it otherwise (`doctor` says more). */
export function checkHome(home: string): ReturnType<typeof checkStateHome> {
  return checkStateHome(home);
}

/** Records this server's session in the registry (read-merge-write under its lock): `registerSession`. */
export function sessionRegistrar(settings: Settings, fresh: boolean): (own: SessionRecord, client: SessionRecord['client']) => Promise<SessionRecord> {
  const runsDir = new Layout(settings.home).runsDir;
  let registry: Promise<SessionRegistry> | null = null;
  return async (own, client) => {
    // The ports' module is loaded at the first registration (the client's initialize), not with this one: it brings
    // the ledger's, which a cold start does not need before then.
    registry ??= import('../lifecycle/state-ports.js').then((m) => m.fileSessionRegistry(settings.home));
    return registerSession(await registry, runsDir, own, client, { fresh });
  };
}

/** Waits for lock acquisitions under way to finish, so that an exiting server strands no lock (store/lock.ts). */
export function settleLocksBeforeExit(): Promise<void> {
  return settleLocks();
}

/** Ends the thread that spawns runners (loaded only if a launch used it), for a server that is exiting. */
export async function stopSpawnerThread(): Promise<void> {
  await (await import('../process/spawn-detached.js')).stopSpawner();
}
