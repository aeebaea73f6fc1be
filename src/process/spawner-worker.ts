/**
 * The spawner thread: starts detached programs for the server's main thread. A spawn blocks its thread until the
 * child has exec'd (libuv waits for it, to report exec errors), and with the cores busy that wait was ~10 ms per
 * runner, the server's whole event loop stopped meanwhile: eight concurrent launches spent ~90 ms of their wall in it.
 * Here it stops only this thread. Node built-ins only.
 */
import { parentPort } from 'node:worker_threads';
import { startDetached, type DetachedOptions } from './detached-start.js';

export interface SpawnRequest { id: number; argv: string[]; options: DetachedOptions }
export type SpawnReply =
  | { id: number; pid: number | null }
  | { id: number; failed: string }
  | { id: number; exit: { code: number | null; signal: NodeJS.Signals | null } };

const port = parentPort!;
port.on('message', (m: SpawnRequest) => {
  try {
    const child = startDetached(m.argv, m.options);
    child.once('exit', (code, signal) => port.postMessage({ id: m.id, exit: { code, signal } } satisfies SpawnReply));
    port.postMessage({ id: m.id, pid: child.pid ?? null } satisfies SpawnReply);
  } catch (e) {
    port.postMessage({ id: m.id, failed: (e as NodeJS.ErrnoException).code ?? 'spawn failed' } satisfies SpawnReply);
  }
});
