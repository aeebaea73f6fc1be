/**
 * A private redis-server for one test file: the Debian package's binary started by the test on a free loopback port,
 * with its own temp data dir and AOF on (docs/scale-out.md, "Persistence"), in the foreground, stopped by `stop()`.
 * Never a system service.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

export const REDIS_SERVER = [process.env.SUBAGENTS_TEST_REDIS_SERVER ?? '/usr/bin/redis-server', '/usr/local/bin/redis-server'].find((p) => fs.existsSync(p)) ?? null;

export interface RedisInstance {
  url: string;
  port: number;
  dir: string;
  /** Stops the server (SIGTERM, SIGKILL after 5 s); with `keepData`, the data dir stays for a restart. */
  stop: (o?: { keepData?: boolean }) => Promise<void>;
  /** Starts it again on the same port and data dir (after `stop({ keepData: true })`). */
  restart: () => Promise<void>;
  log: () => string;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(port));
    });
  });
}

/** Resolves once the port accepts a PING, or rejects after `maxMs`. */
async function awaitPing(port: number, maxMs: number, child: ChildProcess): Promise<void> {
  const end = Date.now() + maxMs;
  while (Date.now() < end) {
    if (child.exitCode !== null) throw new Error(`redis-server exited with ${child.exitCode}`);
    const ok = await new Promise<boolean>((resolve) => {
      const c = net.connect(port, '127.0.0.1');
      c.setTimeout(500, () => { c.destroy(); resolve(false); });
      c.once('error', () => resolve(false));
      c.once('connect', () => c.write('PING\r\n'));
      c.once('data', (d) => { c.destroy(); resolve(d.toString().startsWith('+PONG')); });
    });
    if (ok) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`redis-server did not answer on port ${port} within ${maxMs} ms`);
}

export async function startRedis(): Promise<RedisInstance> {
  if (!REDIS_SERVER) throw new Error('redis-server is not installed (apt-get install redis-server; .ci/run does it)');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sa-redis-'));
  const port = await freePort();
  let out = '';
  let child: ChildProcess;
  const boot = async () => {
    child = spawn(REDIS_SERVER!, ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--appendonly', 'yes',
      '--appendfsync', 'always', '--daemonize', 'no', '--save', '', '--protected-mode', 'yes', '--loglevel', 'warning'],
    { stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout!.on('data', (c: Buffer) => { out += c.toString(); });
    child.stderr!.on('data', (c: Buffer) => { out += c.toString(); });
    await awaitPing(port, 15_000, child);
  };
  await boot();
  const stopChild = async () => {
    const c = child;
    if (c.exitCode !== null || c.signalCode !== null) return;
    const exited = new Promise<void>((r) => c.once('exit', () => r()));
    c.kill('SIGTERM');
    const t = setTimeout(() => c.kill('SIGKILL'), 5000);
    await exited;
    clearTimeout(t);
  };
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    dir,
    stop: async (o = {}) => {
      await stopChild();
      if (!o.keepData) fs.rmSync(dir, { recursive: true, force: true });
    },
    restart: async () => { await stopChild(); await boot(); },
    log: () => out,
  };
}
