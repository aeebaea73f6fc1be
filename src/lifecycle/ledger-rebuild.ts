import path from 'node:path';
import { isAlive } from '../process/identity.js';
import { Layout } from '../store/layout.js';
import type { AgentSlot, Ledger, RootReservation, TreeBudget } from '../store/ledger.js';
import { FileRunStore } from '../store/run-store.js';
import { descendants, readyIdentity, runMayBeLive, safeRecord, safeStatus } from './run-tree.js';
import { firstStepWidth, isTerminalRun, type RunRecord, type StepSpec, type StepStatus } from '../store/run-types.js';

/** Agent processes a step starts: the fan-out claim it made. */
const claimsOf = (s: StepSpec): number => (s.kind === 'agent' ? 1 : s.members.length);

/**
 * The ledger of a state home rebuilt from its runs, for a ledger.json that does not parse. Rebuilding it empty
 * forgot live runs: capacity could then be exceeded and nested launches were refused (their tree was gone).
 *
 * - agent slots: each running step (or group member) of a run that has not ended, while its runner or its recorded
 *   agent lives (what `pruneAgentSlots` keeps), and the reserved first-step slots of a nested run still starting;
 * - roots: the top-level run of every tree with a live run or a live slot — bound to the runner status or ready.json
 *   names, unbound (reclaimed by capacity pruning after the handshake bound) for one still starting;
 * - trees: limit and depth as the root's record fixed them; `used` counts every claim the tree's runs made (their
 *   static steps and accepted appends). Refunds (steps that never started, failed handshakes) are not known any
 *   more, so `used` may be higher than before: conservative, never lower.
 *
 * Only store and process code: every process that opens the ledger (servers, runners, the CLI) can rebuild it.
 * Never throws: at worst it is the empty ledger it replaces.
 */
export function rebuildLedger(ledgerFile: string): Ledger {
  const l: Ledger = { v: 1, roots: {}, trees: {}, agents: {} };
  try {
    const store = new FileRunStore(new Layout(path.dirname(ledgerFile)));
    const records = new Map<string, RunRecord | null>();
    const record = (id: string) => {
      if (!records.has(id)) records.set(id, safeRecord(store, id));
      return records.get(id)!;
    };
    const liveRoots = new Set<string>();
    const now = new Date().toISOString();
    for (const runId of store.listRunIds()) {
      const status = safeStatus(store, runId);
      if (status && isTerminalRun(status.state)) continue;
      const rec = record(runId);
      if (!rec) continue;
      let live = runMayBeLive(store, runId);
      if (status?.state === 'running') {
        const running: StepStatus[] = status.steps.flatMap((st) => st.members ?? [st]).filter((st) => st.state === 'running');
        for (const st of running) {
          if (!isAlive(status.runner) && !isAlive(st.process)) continue;
          const slot: AgentSlot = { runner: status.runner ?? rec.server, agent: st.process, at: st.startedAt ?? now, root: rec.rootRunId };
          l.agents[`${runId}:${st.key}`] = slot;
          live = true;
        }
      } else if (status?.state === 'starting' && live && rec.depth > 0) {
        // A nested launch still handshaking holds its first step's slots (its runner takes them over).
        const width = firstStepWidth(rec.steps);
        const ready = readyIdentity(store, runId);
        const holder = isAlive(ready) ? ready! : rec.server;
        for (let i = 0; i < width; i++) l.agents[`${runId}:reserved:${i}`] = { runner: holder, agent: null, at: now, root: rec.rootRunId };
      }
      if (live) liveRoots.add(rec.rootRunId);
    }
    for (const rootId of liveRoots) {
      const rootRec = record(rootId);
      if (!rootRec || rootRec.depth !== 0) continue; // no record to take the limits from: nothing can be decided for it
      const status = safeStatus(store, rootId);
      const ready = readyIdentity(store, rootId);
      const bound = status && status.state !== 'starting' ? status.runner ?? ready : null;
      const root: RootReservation = { at: status?.startedAt ?? rootRec.createdAt, server: rootRec.server, runner: bound, handshakeMs: rootRec.handshakeTimeoutMs };
      l.roots[rootId] = root;
      let used = 0;
      for (const id of [rootId, ...descendants(store, rootId)]) {
        const rec = record(id);
        if (!rec || rec.rootRunId !== rootId) continue;
        for (const s of rec.steps) used += claimsOf(s);
        try { for (const a of store.readAppends(id)) used += claimsOf(a.step); } catch { /* a damaged append: its claim is lost */ }
      }
      const tree: TreeBudget = { used, limit: rootRec.limits.maxSpawns, maxDepth: rootRec.limits.maxDepth };
      l.trees[rootId] = tree;
    }
  } catch {
    return { v: 1, roots: {}, trees: {}, agents: {} };
  }
  return l;
}
