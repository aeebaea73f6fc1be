import { spawn } from 'node:child_process';
import { MAIN_JS } from '../helpers/paths.js';

export interface CliResult { code: number | null; stdout: string; stderr: string }

/** The environment a CLI process gets: only what is given, plus PATH and HOME (no NODE_OPTIONS of the test runner). */
export function cliEnv(extra: Record<string, string>): Record<string, string> {
  return { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? '/tmp', LANG: 'C', ...extra };
}

/** Runs `subagents-mcp <args>` as a user would: a real process, its exit code, stdout and stderr. Bounded in time. */
export function cli(args: string[], env: Record<string, string>, o: { cwd?: string; timeoutMs?: number } = {}): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [MAIN_JS, ...args], { env: cliEnv(env), cwd: o.cwd, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => { stdout += c.toString(); });
    child.stderr.on('data', (c: Buffer) => { stderr += c.toString(); });
    const timer = setTimeout(() => { child.kill('SIGKILL'); reject(new Error(`subagents-mcp ${args.join(' ')} did not exit within ${o.timeoutMs ?? 60_000} ms; stderr: ${stderr}`)); }, o.timeoutMs ?? 60_000);
    child.on('error', (e) => { clearTimeout(timer); reject(e); });
    child.on('close', (code) => { clearTimeout(timer); resolve({ code, stdout, stderr }); });
  });
}

/** A CLI process the test reads while it runs (logs --follow). */
export function cliStream(args: string[], env: Record<string, string>) {
  const child = spawn(process.execPath, [MAIN_JS, ...args], { env: cliEnv(env), stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  const waiters: Array<() => void> = [];
  child.stdout.on('data', (c: Buffer) => { stdout += c.toString(); for (const w of waiters.splice(0)) w(); });
  child.stderr.on('data', (c: Buffer) => { stderr += c.toString(); });
  const exited = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
  let done = false;
  void exited.then(() => { done = true; for (const w of waiters.splice(0)) w(); });
  return {
    child,
    exited,
    stdout: () => stdout,
    stderr: () => stderr,
    get done() { return done; },
    /** Resolves once stdout contains `text`; rejects if the process exits first or after `maxMs`. */
    async waitFor(text: string, maxMs = 30_000): Promise<void> {
      const end = Date.now() + maxMs;
      while (!stdout.includes(text)) {
        if (done) throw new Error(`exited before printing ${JSON.stringify(text)}; stdout: ${stdout}; stderr: ${stderr}`);
        if (Date.now() > end) throw new Error(`no ${JSON.stringify(text)} after ${maxMs} ms; stdout: ${stdout}`);
        await new Promise<void>((r) => { waiters.push(r); setTimeout(r, 1000); });
      }
    },
  };
}
