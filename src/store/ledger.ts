import fs from 'node:fs';
import { Low } from 'lowdb';
import { SubagentError } from '../errors.js';
import { LedgerFile, readStateFile, StateFileAdapter } from './state-files.js';
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
  /**
   * Bound in the reservation itself, to a warm runner not yet told its run (docs/architecture.md, "Warm runners"):
   * until the run's `proceed` exists, the launching server holds it as it holds an unbound one (pruned once that
   * server is dead or past twice its handshake timeout), whatever that runner does meanwhile.
   */
  boundEarly?: true;
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

/**
 * A queued top-level run waiting for a capacity slot (docs/limits.md, "The queue"). Its tree's fan-out is claimed
 * (`trees`) from acceptance. `handoff` is set while a process hands it a slot (it holds the run's reservation in
 * `roots` meanwhile); the entry leaves the queue once its run has started or ended.
 */
export interface QueueEntry {
  /** Acceptance order across the state home. */
  seq: number;
  sessionId: string;
  at: string;
  /** Epoch ms past which the run ends failed/QUEUE_TIMEOUT instead of starting. */
  deadline: number;
  /** The launching server's SUBAGENTS_MAX_ACTIVE_RUNS: the run starts only while fewer roots than this are active. */
  limit: number;
  /** Agent starts claimed from the tree's budget at acceptance. */
  claims: number;
  /** The launching server's handshake timeout, for the reservation a hand-off makes. */
  handshakeMs: number;
  handoff?: { by: ProcessIdentity; attempt: number } | null;
}

/** The one shared ledger of a state home; only ever read and written under its lock. */
export interface Ledger {
  v: 1;
  roots: Record<string, RootReservation>;
  trees: Record<string, TreeBudget>;
  agents: Record<string, AgentSlot>;
  queue?: Record<string, QueueEntry>;
  /** The last queue sequence number given out. */
  queueSeq?: number;
}

const empty = (): Ledger => ({ v: 1, roots: {}, trees: {}, agents: {} });

/**
 * Makes a ledger from the runs of the state home, for a ledger.json that does not parse. It judges which runs live,
 * which is not the store's to decide: the caller passes it (src/lifecycle/ledger.ts).
 */
export type LedgerRebuild = (ledgerFile: string) => Ledger;

interface PendingChange {
  fn: (l: Ledger) => unknown;
  durable: boolean;
  resolve: (v: unknown) => void;
  reject: (e: unknown) => void;
}

/** Changes of this process waiting for the ledger, per ledger file, and whether a section is under way for them. */
const pending = new Map<string, PendingChange[]>();
const draining = new Set<string>();

/**
 * Read-modify-write of the ledger under the state home's ledger lock. `fn` works on a copy; the copy is written back
 * (fsynced: capacity is an acknowledgement) only if it changed. A ledger that does not parse is rebuilt from the runs
 * of the state home (`rebuild`, e.g. `rebuildLedger`: live runs' slots and their trees' budgets; empty when nothing lives, as after a
 * crash of the machine) and written back. `durable: false` is for changes nobody is acknowledged
 * (agent slots): they are pruned by liveness, and after a crash of the machine no agent lives.
 *
 * Group commit: the changes this process asks for while its previous section is under way are applied together in
 * the next one, in order, with one read and one write. Eight concurrent launches were eight lock hand-overs and
 * eight fsynced writes (~8 ms each with the runners' writes in the same journal) in a row, and the lock is the one
 * every run of the state home shares. A change whose `fn` throws is undone alone; the others of its batch stand.
 */
export function withLedgerFile<T>(layout: Layout, rebuild: LedgerRebuild, fn: (l: Ledger) => T, options: { durable?: boolean } = {}): Promise<T> {
  const file = layout.ledgerFile;
  return new Promise<T>((resolve, reject) => {
    let queue = pending.get(file);
    if (!queue) pending.set(file, (queue = []));
    queue.push({ fn, durable: options.durable ?? true, resolve: resolve as (v: unknown) => void, reject });
    if (!draining.has(file)) void drain(file, rebuild);
  });
}

async function drain(file: string, rebuild: LedgerRebuild): Promise<void> {
  draining.add(file);
  try {
    const queue = pending.get(file)!;
    while (queue.length > 0) {
      let batch: PendingChange[] = [];
      let outcomes: Array<{ ok: true; value: unknown } | { ok: false; error: unknown }> = [];
      try {
        await withLock(file, async () => {
          // Taken once the lock is ours: what arrived while we waited for it joins this section.
          batch = queue.splice(0);
          outcomes = await applyAll(file, batch, rebuild);
        }, { what: 'capacity ledger' });
      } catch (e) {
        // No section (the lock stayed busy, the write failed): every change of the batch is refused alike.
        if (batch.length === 0) batch = queue.splice(0);
        for (const c of batch) c.reject(e);
        continue;
      }
      batch.forEach((c, i) => {
        const o = outcomes[i]!;
        if (o.ok) c.resolve(o.value); else c.reject(o.error);
      });
    }
  } finally {
    draining.delete(file);
  }
}

async function applyAll(file: string, batch: PendingChange[], rebuild: LedgerRebuild): Promise<Array<{ ok: true; value: unknown } | { ok: false; error: unknown }>> {
  let durable = false;
  // A lowdb document over ledger.json: read through its schema, written by the atomic writer (we hold its lock).
  const doc = new Low<Ledger>(new StateFileAdapter<Ledger>(file, LedgerFile, 'ledger.json', () => ({ durable })), empty());
  let before = '';
  try {
    await doc.read();
    before = JSON.stringify(doc.data);
  } catch {
    doc.data = rebuild(file);
  }
  let ledger = doc.data;
  let current = before === '' ? JSON.stringify(ledger) : before; // a rebuilt ledger differs from `before`: it is written back
  durable = current !== before;
  const outcomes = batch.map((c) => {
    try {
      const value = c.fn(ledger);
      const next = JSON.stringify(ledger);
      if (next !== current) { durable ||= c.durable; current = next; }
      return { ok: true as const, value };
    } catch (error) {
      ledger = JSON.parse(current) as Ledger; // undo what the failed change did before it threw
      return { ok: false as const, error };
    }
  });
  // A failed write throws out of the section: no change of the batch is acknowledged. Its fsyncs are on the thread
  // pool: the lock is held meanwhile, this process's event loop is not (and what arrives meanwhile is the next batch).
  if (current !== before) {
    doc.data = ledger;
    try {
      await doc.write();
    } catch (e) {
      // A directory in the ledger's place: rename cannot replace it, and it is not ours to remove.
      if ((e as NodeJS.ErrnoException).code === 'EISDIR') throw new SubagentError('STATE_CORRUPT', `${file} is a directory, not the ledger file; remove it and retry (the ledger is rebuilt from the runs).`);
      throw e;
    }
  }
  return outcomes;
}

/** The last lock-free read of each ledger file, by the identity of the file it read. */
const peeked = new Map<string, { key: string; ledger: Ledger }>();

/**
 * A lock-free read that never rebuilds: null for a damaged ledger (the next section under the lock rebuilds it).
 * The ledger is only ever replaced whole (a new inode, renamed into place), so a file whose inode, size and times
 * are those of the last read is that read: it is returned again without parsing. A queue 1 000 deep makes the ledger
 * ~250 KB, whose schema check costs ~10 ms, and every listing reads it several times. The value is shared: callers
 * only read it.
 */
export function peekLedger(layout: Layout): Ledger | null {
  const file = layout.ledgerFile;
  let key: string | null = null;
  try {
    const st = fs.lstatSync(file, { bigint: true });
    key = `${st.ino}:${st.size}:${st.mtimeNs}:${st.ctimeNs}`;
    const hit = peeked.get(file);
    if (hit && hit.key === key) return hit.ledger;
  } catch { /* missing: read below says so */ }
  try {
    const ledger = readStateFile<Ledger>(file, LedgerFile, 'ledger.json') ?? empty();
    if (key !== null) peeked.set(file, { key, ledger });
    return ledger;
  } catch {
    return null;
  }
}
