import { handOff } from '../lifecycle/queue.js';
import { pruneAgentSlots } from '../lifecycle/agent-slots.js';
import { spawnDetached } from '../process/spawn-detached.js';
import { pruneRoots } from './capacity.js';
import type { ManagerContext } from './context.js';

/**
 * This server's part in the queue (docs/limits.md, "The queue"): after its launches, listings, sweeps and cancels it
 * returns dead runners' slots and hands free ones to the head of the queue, acting as the launcher. This is also the
 * repair of a hand-off whose process died mid-way. Never throws; resolves with the runs it started.
 */
export function serveQueue(ctx: ManagerContext, signal?: AbortSignal): Promise<number> {
  if (ctx.nesting) return Promise.resolve(0); // nested servers run with an agent's environment: never the launcher of another tree
  return handOff({
    store: ctx.store, layout: ctx.layout, ledger: ctx.ledger, self: ctx.server,
    spawn: (argv, o) => spawnDetached(argv, o),
    fault: ctx.env.SUBAGENTS_TEST_FAULT,
    ...(signal ? { signal } : {}),
    prune: (l) => { pruneAgentSlots(l); pruneRoots(l, ctx.settings.handshakeTimeoutMs, ctx.store); },
  }).catch(() => 0);
}
