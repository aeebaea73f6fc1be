import { errnoCode, SubagentError } from '../errors.js';
import { isTerminalRun } from '../store/run-types.js';
import { catalogFor } from './agent-resolver.js';
import type { ManagerContext } from './context.js';
import { buildSteps, claimPaths, type ChainEntryInput } from './launch.js';
import { requireRecord, requireVisible } from './listing.js';
import { countPendingAppends } from './status-view.js';
import { freshStatus } from './run-status.js';
import { loadFullCatalog } from './agent-resolver.js';

export interface AppendResult {
  runId: string;
  stepIndex: number;
  pendingAppends: number;
  fanout: { used: number; limit: number; remaining: number };
}

/**
 * The run tree's fan-out as counted across machines (docs/scale-out.md, "Capacity across machines"): a worker's
 * appends claim from it as well as from the worker's own ledger, whose tree does not see nested runs on other machines.
 */
export interface SharedFanout {
  limit: number;
  /** All or nothing: `used` is the tree's count after a claim, before a refusal. */
  claim(claims: number): Promise<{ claimed: boolean; used: number }>;
  /** Returns a claim whose append was not recorded. */
  release(claims: number): Promise<void>;
}

/**
 * docs/contract.md, "Tools". The decision and the durable write happen under the run's lock, the same lock under which the runner
 * commits the chain's end: an append is either recorded before that commit (and then runs, or ends visibly as
 * skipped/cancelled) or refused with RUN_NOT_ACTIVE. The fan-out claim is taken in the same critical section; with
 * `shared` (a worker's run) the shared count decides and is what the answer reports. An append refused or not recorded
 * keeps no claim in either.
 */
export async function appendStep(ctx: ManagerContext, runId: string, entry: ChainEntryInput, shared?: SharedFanout): Promise<AppendResult> {
  if (ctx.distributed) return ctx.distributed.append(ctx, runId, entry);
  const meta = requireVisible(ctx, runId);
  const record = requireRecord(ctx, runId);
  if (record.mode !== 'chain') {
    throw new SubagentError('NOT_A_CHAIN', `run ${runId} is a ${record.mode} run; only chains take appended steps. Launch a new run instead.`);
  }
  const pre = await freshStatus(ctx, runId);
  if (isTerminalRun(pre.state)) throw notActive(runId, pre.state);
  // Top-level chains take the catalog as it is now; nested ones only what their tree's root froze.
  const catalog = meta.depth === 0 && !ctx.nesting ? (await loadFullCatalog(ctx)).agents : await catalogFor(ctx);
  const [step] = buildSteps(ctx, catalog, [entry]);
  return ctx.store.withRunLock(runId, async () => {
    const status = ctx.store.readStatus(runId)!;
    if (isTerminalRun(status.state)) throw notActive(runId, status.state);
    const appends = ctx.store.readAppends(runId);
    const seq = (appends.at(-1)?.seq ?? 0) + 1;
    const stepIndex = record.steps.length + seq - 1;
    const paths = claimPaths([step!], stepIndex);
    // The shared count first: it sees the whole tree, so its refusal reports what is really left.
    let claimed: { used: number; limit: number; remaining: number } | null = null;
    if (shared) {
      const c = await shared.claim(paths.length);
      if (!c.claimed) throw fanoutExhausted(shared.limit - c.used, shared.limit, paths);
      claimed = { used: c.used, limit: shared.limit, remaining: Math.max(0, shared.limit - c.used) };
    }
    const releaseShared = () => shared?.release(paths.length).catch(() => {});
    let local;
    try {
      local = await ctx.ledger.change((l) => {
        const tree = l.trees[record.rootRunId];
        if (!tree) throw notActive(runId, status.state);
        const remaining = tree.limit - tree.used;
        if (paths.length > remaining) throw fanoutExhausted(remaining, tree.limit, paths);
        tree.used += paths.length;
        return { used: tree.used, limit: tree.limit, remaining: tree.limit - tree.used };
      });
    } catch (e) {
      await releaseShared();
      throw e;
    }
    const fanout = claimed ?? local;
    const returnLocal = () => ctx.ledger.change((l) => { const t = l.trees[record.rootRunId]; if (t) t.used = Math.max(0, t.used - paths.length); }).catch(() => {});
    try {
      ctx.store.writeAppend(runId, { seq, acceptedAt: new Date().toISOString(), step: step! });
    } catch (e) {
      await returnLocal();
      await releaseShared();
      // The store reports a refused write as a SubagentError with the errno on its cause.
      const code = errnoCode(e instanceof SubagentError ? e.cause : e) ?? 'I/O error';
      throw new SubagentError('INTERNAL', `could not record the appended step (${code}); nothing was appended and its fan-out claim was returned. Check free space and permissions of the state home, then retry.`);
    }
    ctx.store.event(runId, { type: 'appended', seq });
    return { runId, stepIndex, pendingAppends: countPendingAppends(record, status, [...appends, { seq, acceptedAt: '', step: step! }]), fanout };
  });
}

function fanoutExhausted(remaining: number, limit: number, paths: string[]): SubagentError {
  return new SubagentError('FANOUT_EXHAUSTED', `the run tree's fan-out budget has ${remaining} of ${limit} agent starts left and this step needs ${paths.length}; ${paths[Math.max(0, remaining)]} does not fit.`);
}

function notActive(runId: string, state: string): SubagentError {
  return new SubagentError('RUN_NOT_ACTIVE', `run ${runId} is ${state}; its chain has ended and takes no more steps. Launch a new run with the step instead.`);
}
