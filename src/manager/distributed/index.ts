/**
 * Distributed mode for a server or the command line (docs/scale-out.md). The executor, with BullMQ and ioredis, is
 * loaded at its first use: a local server never loads them.
 */
import type { Settings } from '../../config.js';
import type { DistributedRuns } from '../context.js';

export function distributedRuns(settings: Settings): DistributedRuns | undefined {
  const url = settings.redisUrl;
  if (url === null) return undefined;
  let executor: Promise<DistributedRuns> | null = null;
  const get = () => (executor ??= import('./executor.js').then((m) => new m.DistributedExecutor({ ...settings, redisUrl: url })));
  return {
    launch: async (ctx, input) => (await get()).launch(ctx, input),
    status: async (ctx, q, o) => (await get()).status(ctx, q, o),
    cancel: async (ctx, runId) => (await get()).cancel(ctx, runId),
    append: async (ctx, runId, entry) => (await get()).append(ctx, runId, entry),
    dismiss: async (ctx, runId, cancel) => (await get()).dismiss(ctx, runId, cancel),
    restore: async (ctx, lineage) => (await get()).restore(ctx, lineage),
    readBytes: async (ctx, runId, part, offset, length) => (await get()).readBytes(ctx, runId, part, offset, length),
    runState: async (ctx, runId) => (await get()).runState(ctx, runId),
    watch: async (runId, onChange) => (await get()).watch(runId, onChange),
    everyRun: async (all) => (await get()).everyRun(all),
    collectGarbage: async (olderThanMs, dryRun, branches) => (await get()).collectGarbage(olderThanMs, dryRun, branches),
    resolveRunId: async (arg) => (await get()).resolveRunId(arg),
    follow: async (since, signal, onEntries, onPlaced, onAway) => (await get()).follow(since, signal, onEntries, onPlaced, onAway),
    lineage: async (ctx) => (await get()).lineage(ctx),
    health: async () => (await get()).health(),
    close: async () => { if (executor) await (await executor).close(); },
  };
}
