/**
 * A worker's first contact with its Redis (docs/scale-out.md, "Failures"). A Redis that is not up yet is waited for,
 * with one line saying why and one when it answers: a worker started with its Redis (a machine's boot, a compose
 * file) must neither exit nor sit silent. Credentials or rights Redis refuses end the worker: waiting never cures them.
 */
import type { Redis } from 'ioredis';
import { ready, redisReason, REDIS_CALL_MS } from '../store/redis/connection.js';

/** How long after a failed try the next one starts. */
const RETRY_MS = 1000;

/** True once Redis answers a PING; false when it refuses the worker (the reason is logged). */
export async function awaitRedis(r: Redis, where: string, log: (line: string) => void): Promise<boolean> {
  let waiting = false;
  // One try at a time: a try that outlives its bound (a Redis that accepts and answers nothing) is joined, not
  // doubled, so no listeners pile up on the client while it is away.
  let attempt: Promise<unknown> | null = null;
  for (;;) {
    attempt ??= ready(r).then(() => r.ping()).finally(() => { attempt = null; });
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([attempt, new Promise((_, reject) => { timer = setTimeout(() => reject(new Error('timed out')), REDIS_CALL_MS); })]);
      if (waiting) log(`Redis at ${where} answers now`);
      return true;
    } catch (e) {
      const reason = redisReason(e);
      if (/NOAUTH|WRONGPASS|NOPERM/.test(reason)) {
        log(`Redis at ${where} refused the worker: ${reason}. Fix the user, password or rights in --redis or SUBAGENTS_REDIS_URL, then start the worker again.`);
        return false;
      }
      if (!waiting) log(`Redis at ${where} does not answer: ${reason}. Waiting for it (the worker takes runs once it answers; Ctrl-C stops it).`);
      waiting = true;
      await new Promise((res) => setTimeout(res, RETRY_MS));
    } finally {
      clearTimeout(timer);
    }
  }
}
