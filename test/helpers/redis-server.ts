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
  /** SIGSTOP / SIGCONT: a Redis that holds its connections and answers nothing, then goes on. */
  pause: () => void;
  resume: () => void;
  log: () => string;
}

/**
 * Ports for the tests' Redis come from below the kernel's ephemeral range: the kernel never hands one out for a
 * `listen(0)` or an outgoing connection, so a port released across a restart cannot be taken meanwhile by another
 * test's client or server. Two test files picking the same port are told apart (the loser's redis-server exits on
 * bind, or the answering server is not ours) and the loser picks again.
 */
function candidatePort(): number {
  let low = 32768;
  try { low = Number(fs.readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]) || low; } catch { /* not Linux */ }
  const top = Math.max(12_000, Math.min(low, 65_536));
  const bottom = Math.max(1024, top - 12_000);
  return bottom + Math.floor(Math.random() * (top - bottom));
}

/**
 * Resolves once the port answers as our redis-server (INFO names the child's pid: another test's Redis on the same
 * port is not mistaken for ours), or rejects when the child exits (the port was taken) or after `maxMs`.
 */
async function awaitOwnPing(port: number, maxMs: number, child: ChildProcess): Promise<void> {
  const end = Date.now() + maxMs;
  const exited = () => child.exitCode !== null || child.signalCode !== null;
  while (Date.now() < end) {
    if (exited()) throw new Error(`redis-server exited with ${child.exitCode ?? child.signalCode}`);
    const ok = await new Promise<boolean>((resolve) => {
      const c = net.connect(port, '127.0.0.1');
      let got = '';
      c.setTimeout(2000, () => { c.destroy(); resolve(false); });
      c.once('error', () => resolve(false));
      c.once('connect', () => c.write('INFO server\r\n'));
      c.on('data', (d) => {
        got += d.toString();
        const pid = /process_id:(\d+)\r\n/.exec(got);
        if (pid || got.startsWith('-')) { c.destroy(); resolve(pid !== null && Number(pid[1]) === child.pid); }
      });
    });
    if (ok) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`redis-server did not answer on port ${port} within ${maxMs} ms`);
}

export async function startRedis(): Promise<RedisInstance> {
  if (!REDIS_SERVER) throw new Error('redis-server is not installed (apt-get install redis-server; .ci/run does it)');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sa-redis-'));
  let port = 0;
  let out = '';
  let child: ChildProcess | null = null;
  // A test process that dies leaves no redis-server behind.
  const killOnExit = () => { child?.kill('SIGKILL'); };
  process.once('exit', killOnExit);
  const bootOn = async (p: number) => {
    const c = spawn(REDIS_SERVER!, ['--port', String(p), '--bind', '127.0.0.1', '--dir', dir, '--appendonly', 'yes',
      '--appendfsync', 'always', '--daemonize', 'no', '--save', '', '--protected-mode', 'yes', '--loglevel', 'warning'],
    { stdio: ['ignore', 'pipe', 'pipe'] });
    child = c;
    c.stdout!.on('data', (d: Buffer) => { out += d.toString(); });
    c.stderr!.on('data', (d: Buffer) => { out += d.toString(); });
    try {
      await awaitOwnPing(p, 20_000, c);
    } catch (e) {
      c.kill('SIGKILL');
      throw e;
    }
  };
  // A port another test file took meanwhile: another one (the URL is not handed out yet).
  for (let attempt = 1; ; attempt++) {
    port = candidatePort();
    try { await bootOn(port); break; } catch (e) { if (attempt >= 10) throw new Error(`${(e as Error).message}: ${out.slice(-500)}`); }
  }
  // A restart keeps the port (clients hold the URL). Outside the ephemeral range nothing but a test's Redis binds it;
  // a bind that fails all the same (the old socket not yet released) is retried for a bounded time.
  const boot = async () => {
    const end = Date.now() + 20_000;
    for (;;) {
      try { return await bootOn(port); } catch (e) {
        if (Date.now() > end) throw new Error(`${(e as Error).message}: ${out.slice(-500)}`);
        await new Promise((r) => setTimeout(r, 250));
      }
    }
  };
  const stopChild = async () => {
    const c = child!;
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
      if (!o.keepData) process.off('exit', killOnExit);
      if (!o.keepData) fs.rmSync(dir, { recursive: true, force: true });
    },
    restart: async () => { await stopChild(); await boot(); },
    pause: () => { child?.kill('SIGSTOP'); },
    resume: () => { child?.kill('SIGCONT'); },
    log: () => out,
  };
}
