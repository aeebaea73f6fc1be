import { writeFileAtomic } from './atomic-write.js';
import { readJsonFile } from './json-file.js';
import type { Layout } from './layout.js';
import { withLock } from './lock.js';
import type { ProcessIdentity } from '../process/identity.js';

/** An active top-level run's capacity slot. Unbound (runner null) until the handshake binds it to the runner. */
export interface RootReservation {
  at: string;
  server: ProcessIdentity;
  runner: ProcessIdentity | null;
  /** The launching server's handshake timeout: an unbound reservation is never reclaimed before twice this. */
  handshakeMs?: number;
}

/** A run tree's fan-out budget and depth limit, fixed when its root was launched. */
export interface TreeBudget {
  used: number;
  limit: number;
  maxDepth: number;
}

/**
 * A live agent process's slot (SUBAGENTS_MAX_AGENTS), held by the runner that supervises it. Keyed
 * `<runId>:<stepKey>`; a nested launch reserves `<runId>:reserved:<i>` slots (held by the launching server until the
 * handshake binds them to the runner), which the runner's first agents take over.
 */
export interface AgentSlot {
  runner: ProcessIdentity;
  agent: ProcessIdentity | null;
  at: string;
  /** The run tree the slot belongs to: a root keeps its capacity slot while any slot of its tree is live. */
  root?: string;
}

/** The one shared ledger of a state home; only ever read and written under its lock. */
export interface Ledger {
  v: 1;
  roots: Record<string, RootReservation>;
  trees: Record<string, TreeBudget>;
  agents: Record<string, AgentSlot>;
}

const empty = (): Ledger => ({ v: 1, roots: {}, trees: {}, agents: {} });

/**
 * Read-modify-write of the ledger under the state home's ledger lock. `fn` works on a copy; the copy is written back
 * (fsynced: capacity is an acknowledgement) only if it changed. A ledger that does not parse is rebuilt by `rebuild`.
 * `durable: false` is for changes nobody is acknowledged (agent slots): they are pruned by liveness, and after a
 * crash of the machine no agent lives; skipping the two fsyncs keeps the one lock every run shares short.
 */
export async function withLedger<T>(layout: Layout, fn: (l: Ledger) => T, rebuild: () => Ledger = empty, options: { durable?: boolean } = {}): Promise<T> {
  return withLock(layout.ledgerFile, () => {
    let ledger: Ledger;
    let before = '';
    try {
      ledger = readJsonFile<Ledger>(layout.ledgerFile, 'ledger.json') ?? empty();
      before = JSON.stringify(ledger);
    } catch {
      ledger = rebuild();
    }
    const result = fn(ledger);
    const after = JSON.stringify(ledger);
    if (after !== before) writeFileAtomic(layout.ledgerFile, after, { durable: options.durable ?? true });
    return result;
  }, { what: 'capacity ledger' });
}

export function readLedger(layout: Layout): Ledger {
  try {
    return readJsonFile<Ledger>(layout.ledgerFile, 'ledger.json') ?? empty();
  } catch {
    return empty();
  }
}
