/**
 * Connections to the Redis of distributed mode. Every call is bounded: a Redis that does not answer makes a tool
 * answer BUSY with the reason within its bound (docs/scale-out.md, "Failures"), never hang; the client reconnects by
 * itself and the next call works once Redis is back. The URL is a credential: no message built here contains it.
 */
import { Redis, type RedisOptions } from 'ioredis';
import { SubagentError } from '../../errors.js';
import { defineScripts, type ScriptedRedis } from './scripts.js';

/** How long one Redis call may take before the caller answers BUSY. */
export const REDIS_CALL_MS = 5000;

export interface ConnectOptions {
  /** BullMQ's blocking worker connection needs `maxRetriesPerRequest: null` and an offline queue. */
  blocking?: boolean;
  /** For Redis' CLIENT LIST: which program this connection is. */
  name?: string;
}

/** A client of `url` with our scripts defined; lazy: it connects at its first command. */
export function connect(url: string, o: ConnectOptions = {}): ScriptedRedis {
  const options: RedisOptions = {
    lazyConnect: true,
    connectTimeout: 3000,
    // Reconnect forever, at most every second: a restarted Redis is picked up again without a restart of ours.
    retryStrategy: (times) => Math.min(100 * times, 1000),
    ...(o.blocking
      ? { maxRetriesPerRequest: null, enableOfflineQueue: true }
      : { maxRetriesPerRequest: 1, enableOfflineQueue: false, commandTimeout: REDIS_CALL_MS }),
    ...(o.name ? { connectionName: o.name } : {}),
  };
  const r = new Redis(url, options);
  // Errors are reported where a call fails (as BUSY); the client's own error events would otherwise be unhandled.
  r.on('error', () => {});
  return defineScripts(r);
}

/** Why Redis could not be used, in words safe to show: the error's kind, never the URL or a password. */
export function redisReason(e: unknown): string {
  const code = typeof e === 'object' && e !== null && 'code' in e ? String((e as { code: unknown }).code) : '';
  const msg = e instanceof Error ? e.message : String(e);
  if (code === 'ECONNREFUSED') return 'the connection was refused (ECONNREFUSED)';
  if (code) return `a connection error (${code.replace(/[^A-Z0-9_]/g, '').slice(0, 32)})`;
  if (/timed? ?out/i.test(msg)) return 'it did not answer in time';
  if (/NOAUTH|WRONGPASS|NOPERM/.test(msg)) return `it refused the credentials or the command (${/NOAUTH|WRONGPASS|NOPERM/.exec(msg)![0]})`;
  if (/writeable|offline|closed|Connection is closed|ready/i.test(msg)) return 'it is not reachable (not connected)';
  if (/READONLY|LOADING|MISCONF|OOM/.test(msg)) return `it refused the write (${/READONLY|LOADING|MISCONF|OOM/.exec(msg)![0]})`;
  return 'it failed the call';
}

/**
 * Resolves once the client is connected (starting a lazy one), within the caller's bound: commands are never queued
 * while Redis is away (no offline queue), so a call that answered BUSY can never take effect later. Rejects with the
 * error of the first connection attempt that fails after the call began (a refused connection is answered BUSY at
 * once, naming the refusal, not at the end of the bound): the error of an attempt that had failed before is not
 * taken, since Redis may have come back since.
 */
export async function ready(r: Redis): Promise<void> {
  if (r.status === 'ready') return;
  if (r.status === 'wait') r.connect().catch(() => {});
  await new Promise<void>((resolve, reject) => {
    let attempting = r.status === 'connecting' || r.status === 'connect';
    const off = () => { r.off('ready', done); r.off('error', failed); r.off('connecting', started); };
    const done = () => { off(); resolve(); };
    const failed = (e: unknown) => { if (attempting) { off(); reject(e); } };
    const started = () => { attempting = true; };
    r.on('ready', done);
    r.on('error', failed);
    r.on('connecting', started);
    if (r.status === 'ready') done();
  });
}

/**
 * Runs one Redis operation within `ms`; any failure or a late answer becomes BUSY naming the reason. `op` is told
 * whether its caller still waits: past the bound it must not start a command (the caller was answered BUSY).
 */
export async function bounded<T>(what: string, op: (stillWanted: () => boolean) => Promise<T>, ms = REDIS_CALL_MS): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  let answered = false;
  const late = new Promise<never>((_, reject) => { timer = setTimeout(() => { answered = true; reject(new Error('timed out')); }, ms); });
  try {
    return await Promise.race([op(() => !answered), late]);
  } catch (e) {
    if (e instanceof SubagentError) throw e;
    throw new SubagentError('BUSY', `Redis could not ${what}: ${redisReason(e)}. Check that Redis is running and reachable from this server (subagents-mcp doctor), then retry; runs already on workers keep going.`);
  } finally {
    clearTimeout(timer);
  }
}
