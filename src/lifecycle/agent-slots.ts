import { SubagentError } from '../errors.js';
import { isAlive, type ProcessIdentity } from '../process/identity.js';
import type { Ledger } from '../store/ledger.js';
import type { CapacityLedger } from '../store/ports.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** Agent slots are nobody's acknowledgement (pruned by liveness; no agent survives a machine crash): no fsync. */
const NOT_DURABLE = { durable: false };

/** Drops agent slots whose holder and agent are both gone: a slot comes back only on a proven end. */
export function pruneAgentSlots(l: Ledger): void {
  for (const [key, slot] of Object.entries(l.agents)) {
    if (!isAlive(slot.runner) && !isAlive(slot.agent)) delete l.agents[key];
  }
}

/** Reserved slots this process took as its own without a ledger section (`adoptReserved`), by ledger key. */
const adopted = new Set<string>();

/**
 * Takes an agent slot for `key` (`<runId>:<stepKey>`) and returns the ledger key it holds: a slot its launch reserved
 * and bound to this runner is taken as it is (`adoptReserved`); else under the ledger lock a reserved one is taken
 * over, or it waits for a free one (SUBAGENTS_MAX_AGENTS is per state home, nested agents included). Null if `signal`
 * aborts first.
 */
export async function claimAgentSlot(ledger: CapacityLedger, key: string, runner: ProcessIdentity, maxAgents: number, signal: AbortSignal, root?: string): Promise<string | null> {
  const reservedPrefix = `${key.slice(0, key.indexOf(':'))}:reserved:`;
  const own = adoptReserved(ledger, reservedPrefix, runner);
  if (own) return own;
  let delay = 50;
  while (!signal.aborted) {
    const got = await ledger.change((l) => {
      const slot = { runner, agent: null, at: new Date().toISOString(), ...(root ? { root } : {}) };
      const reserved = Object.keys(l.agents).find((k) => k.startsWith(reservedPrefix) && !adopted.has(k));
      if (reserved) {
        delete l.agents[reserved];
        l.agents[key] = slot;
        return true;
      }
      pruneAgentSlots(l);
      if (Object.keys(l.agents).length >= maxAgents) return false;
      l.agents[key] = slot;
      return true;
    }, NOT_DURABLE).catch((e: unknown) => {
      // A ledger lock busy past its bound (a loaded machine) is not a reason to fail the step: wait and try again.
      if (e instanceof SubagentError && e.code === 'BUSY') return false;
      throw e;
    });
    if (got) return key;
    await sleep(delay);
    delay = Math.min(delay * 2, 500);
  }
  return null;
}

/**
 * A slot the run's launch reserved and bound to this runner before it said proceed (manager/capacity.ts, `reserve`
 * and `bindReservation`), found by a lock-free read of the ledger: it is this runner's already, and nothing but this
 * runner's own end, or its death, removes it (pruning keeps a slot whose holder lives). Taking it as it is, under
 * its reserved key, saves a ledger section on the way to the first agent's start, on the lock every run of the state
 * home shares. Each reserved key is taken once per process; the locked takeover skips the keys taken so.
 */
function adoptReserved(ledger: CapacityLedger, reservedPrefix: string, runner: ProcessIdentity): string | null {
  const l = ledger.peek();
  if (!l) return null;
  for (const [k, slot] of Object.entries(l.agents)) {
    if (!k.startsWith(reservedPrefix) || adopted.has(k) || slot.agent !== null) continue;
    if (slot.runner.pid !== runner.pid || slot.runner.startTime !== runner.startTime) continue;
    adopted.add(k);
    return k;
  }
  return null;
}

export async function setAgentSlotProcess(ledger: CapacityLedger, key: string, agent: ProcessIdentity): Promise<void> {
  await ledger.change((l) => { if (l.agents[key]) l.agents[key]!.agent = agent; }, NOT_DURABLE);
}

export async function releaseAgentSlot(ledger: CapacityLedger, key: string): Promise<void> {
  await ledger.change((l) => { delete l.agents[key]; }, NOT_DURABLE);
}

/** Every slot a run still holds or reserved (its runner is ending: nothing of it can start any more). */
export function releaseRunSlotsLocked(l: Ledger, runId: string): void {
  for (const key of Object.keys(l.agents)) if (key.startsWith(`${runId}:`)) delete l.agents[key];
}
