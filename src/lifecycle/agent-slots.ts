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

/**
 * Takes an agent slot for `key` (`<runId>:<stepKey>`). A slot its nested launch reserved is taken over at once;
 * otherwise it waits for a free one (SUBAGENTS_MAX_AGENTS is per state home, nested agents included). Returns
 * false if `signal` aborts first.
 */
export async function claimAgentSlot(ledger: CapacityLedger, key: string, runner: ProcessIdentity, maxAgents: number, signal: AbortSignal, root?: string): Promise<boolean> {
  const reservedPrefix = `${key.slice(0, key.indexOf(':'))}:reserved:`;
  let delay = 50;
  while (!signal.aborted) {
    const got = await ledger.change((l) => {
      const slot = { runner, agent: null, at: new Date().toISOString(), ...(root ? { root } : {}) };
      const reserved = Object.keys(l.agents).find((k) => k.startsWith(reservedPrefix));
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
    if (got) return true;
    await sleep(delay);
    delay = Math.min(delay * 2, 500);
  }
  return false;
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
