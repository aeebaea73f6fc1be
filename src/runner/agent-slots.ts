import { isAlive, type ProcessIdentity } from '../process/identity.js';
import { withLedger, type Ledger } from '../store/ledger.js';
import type { Layout } from '../store/layout.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Drops agent slots whose runner and agent are both gone: a slot comes back only on a proven end. */
export function pruneAgentSlots(l: Ledger): void {
  for (const [key, slot] of Object.entries(l.agents)) {
    if (!isAlive(slot.runner) && !isAlive(slot.agent)) delete l.agents[key];
  }
}

/**
 * Waits for a free agent slot (SUBAGENTS_MAX_AGENTS is per state home, nested agents included) and takes it.
 * Returns false if `signal` aborts first.
 */
export async function claimAgentSlot(layout: Layout, key: string, runner: ProcessIdentity, maxAgents: number, signal: AbortSignal): Promise<boolean> {
  let delay = 50;
  while (!signal.aborted) {
    const got = await withLedger(layout, (l) => {
      pruneAgentSlots(l);
      if (Object.keys(l.agents).length >= maxAgents) return false;
      l.agents[key] = { runner, agent: null, at: new Date().toISOString() };
      return true;
    });
    if (got) return true;
    await sleep(delay);
    delay = Math.min(delay * 2, 500);
  }
  return false;
}

export async function setAgentSlotProcess(layout: Layout, key: string, agent: ProcessIdentity): Promise<void> {
  await withLedger(layout, (l) => { if (l.agents[key]) l.agents[key]!.agent = agent; });
}

export async function releaseAgentSlot(layout: Layout, key: string): Promise<void> {
  await withLedger(layout, (l) => { delete l.agents[key]; });
}
