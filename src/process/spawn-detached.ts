import { EventEmitter } from 'node:events';
import { Worker } from 'node:worker_threads';
import { SPAWNER_WORKER } from '../paths.js';
import { startDetached, type DetachedOptions } from './detached-start.js';
import type { SpawnReply, SpawnRequest } from './spawner-worker.js';

/** A started detached program: its pid, and its `exit` event (code, signal) while this process lives. */
export class DetachedChild extends EventEmitter {
  exitCode: number | null = null;
  signalCode: NodeJS.Signals | null = null;
  /** Seen gone, even when how it ended is not known (a warm runner is not our child: both codes stay null). */
  gone = false;
  constructor(readonly pid: number | undefined) { super(); }
  exited(code: number | null, signal: NodeJS.Signals | null): void {
    this.gone = true;
    this.exitCode = code;
    this.signalCode = signal;
    this.emit('exit', code, signal);
  }
}

interface Pending { resolve: (c: DetachedChild) => void; reject: (e: Error) => void }

let worker: Worker | null = null;
let workerOnline = false;
let workerBroken = false;
let nextId = 1;
const pending = new Map<number, Pending>();
const running = new Map<number, DetachedChild>();
/** Woken by the reply that empties `pending` (stopSpawner waits on it). */
let spawnsSettled: (() => void) | null = null;

/**
 * Starts a program in its own session and process group (see `startDetached`), on the spawner thread once it is
 * up: a spawn blocks its thread until the child has exec'd, and the server's event loop must not stop for that (see
 * spawner-worker.ts). The thread starts with the first spawn, which (like any spawn while it boots, or if it cannot
 * run) happens here, synchronously.
 */
export async function spawnDetached(argv: string[], options: DetachedOptions): Promise<DetachedChild> {
  if (!worker && !workerBroken) startWorker();
  if (!workerOnline || !worker) return spawnHere(argv, options);
  const id = nextId++;
  return new Promise<DetachedChild>((resolve, reject) => {
    pending.set(id, { resolve, reject });
    worker!.postMessage({ id, argv, options } satisfies SpawnRequest);
  });
}

/** Resolves once the spawner thread is up (or could not be started): for tests and benchmarks. */
export function spawnerSettled(): Promise<boolean> {
  if (!worker && !workerBroken) startWorker();
  if (workerOnline || workerBroken || !worker) return Promise.resolve(workerOnline);
  const w = worker;
  return new Promise((resolve) => {
    w.once('online', () => resolve(true));
    w.once('exit', () => resolve(false));
  });
}

/**
 * Ends the spawner thread, for a process about to exit, once the spawns under way have answered: terminating it
 * alongside the shutdown's other work spares the exit a thread teardown of tens of ms. Spawns asked for afterwards
 * happen on the calling thread.
 */
export async function stopSpawner(): Promise<void> {
  const w = worker;
  workerBroken = true;
  if (!w) return;
  // A spawn under way is let finish: its launch then knows the runner's pid, and stops it.
  while (pending.size > 0 && worker === w) await new Promise<void>((r) => { spawnsSettled = r; });
  await w.terminate().then(() => {}, () => {});
}


function spawnHere(argv: string[], options: DetachedOptions): DetachedChild {
  const child = startDetached(argv, options);
  const d = new DetachedChild(child.pid);
  child.once('exit', (code, signal) => d.exited(code, signal));
  return d;
}

function startWorker(): void {
  try {
    worker = new Worker(SPAWNER_WORKER);
  } catch {
    workerBroken = true;
    return;
  }
  worker.unref(); // never what keeps the server alive
  worker.once('online', () => { workerOnline = true; });
  worker.on('message', onReply);
  worker.on('error', () => {}); // its exit follows
  worker.once('exit', () => {
    workerBroken = true;
    workerOnline = false;
    worker = null;
    // Whether those spawns happened is unknown: each fails its launch's handshake, whose cleanup kills by group.
    for (const p of pending.values()) p.reject(new Error('the spawner thread ended'));
    pending.clear();
    if (spawnsSettled) { const wake = spawnsSettled; spawnsSettled = null; wake(); }
    running.clear();
  });
}

function onReply(r: SpawnReply): void {
  if ('exit' in r) {
    running.get(r.id)?.exited(r.exit.code, r.exit.signal);
    running.delete(r.id);
    return;
  }
  const p = pending.get(r.id);
  if (!p) return;
  pending.delete(r.id);
  if (pending.size === 0 && spawnsSettled) { const wake = spawnsSettled; spawnsSettled = null; queueMicrotask(wake); }
  if ('failed' in r) {
    p.reject(Object.assign(new Error(`spawn failed: ${r.failed}`), { code: r.failed }));
    return;
  }
  const d = new DetachedChild(r.pid ?? undefined);
  if (r.pid !== null) running.set(r.id, d);
  p.resolve(d);
}
