import { spawn, type ChildProcess } from 'node:child_process';
import http from 'node:http';
import { MAIN_JS } from '../helpers/paths.js';
import { cliEnv } from '../cli/helpers.js';

/**
 * `base`: the origin (`http://127.0.0.1:<port>`); `page`: the page's own address under its secret path (where the
 * printed URL redirects, ending in `/`), the only path its cookie is sent to.
 */
export interface UiProcess { child: ChildProcess; url: string; base: string; page: string; port: number; token: string; stop: () => Promise<void>; stderr: () => string }

/** Where the printed URL redirects (the page's secret path). */
function redirectOf(url: string): Promise<string> {
  return new Promise((resolve, reject) => {
    http.get(url, (res) => { res.resume(); resolve(String(res.headers.location ?? '')); }).on('error', reject);
  });
}

/** Starts `subagents-mcp ui --no-open` as a user would and reads the URL it prints. */
export async function startUi(env: Record<string, string>, args: string[] = []): Promise<UiProcess> {
  const child = spawn(process.execPath, [MAIN_JS, 'ui', '--no-open', ...args], { env: cliEnv(env), stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stderr!.on('data', (c: Buffer) => { err += c.toString(); });
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`ui printed no URL in 30 s; stdout ${out}; stderr ${err}`)), 30_000);
    child.stdout!.on('data', (c: Buffer) => {
      out += c.toString();
      const m = /(http:\/\/127\.0\.0\.1:\d+\/\?token=[A-Za-z0-9_-]+)/.exec(out);
      if (m) { clearTimeout(timer); resolve(m[1]!); }
    });
    child.on('exit', (code) => { clearTimeout(timer); reject(new Error(`ui exited ${code}; stderr ${err}`)); });
  });
  const u = new URL(url);
  const exited = new Promise<void>((r) => child.on('exit', () => r()));
  const base = `http://127.0.0.1:${u.port}`;
  return {
    child, url, base, page: `${base}${await redirectOf(url)}`, port: Number(u.port), token: u.searchParams.get('token')!, stderr: () => err,
    stop: async () => {
      if (child.exitCode === null) child.kill('SIGTERM');
      const t = setTimeout(() => child.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(t);
    },
  };
}
