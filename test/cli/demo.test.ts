import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAIN_JS } from '../helpers/paths.js';
import { tempStateHome } from '../helpers/state-home.js';
import { cli, cliEnv, type CliResult } from './helpers.js';

/** util-linux `script`, which gives a command a pseudo-terminal; absent on macOS (BSD script) and minimal images. */
const SCRIPT = (process.env.PATH ?? '').split(path.delimiter).map((d) => path.join(d, 'script'))
  .find((f) => { try { fs.accessSync(f, fs.constants.X_OK); return true; } catch { return false; } });

/** `subagents-mcp <args>` on a pseudo-terminal (`script -qec`), CI unset: Progress draws only on a terminal and not in CI. */
function cliOnPty(args: string[], env: Record<string, string>, timeoutMs = 60_000): Promise<CliResult> {
  const quote = (a: string) => `'${a.replace(/'/g, `'\\''`)}'`;
  const full = { ...cliEnv(env), SHELL: '/bin/sh' };
  delete (full as Record<string, string | undefined>).CI;
  return new Promise((resolve, reject) => {
    const child = spawn(SCRIPT!, ['-qec', [process.execPath, MAIN_JS, ...args].map(quote).join(' '), '/dev/null'], { env: full, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => { stdout += c.toString(); });
    child.stderr.on('data', (c: Buffer) => { stderr += c.toString(); });
    const timer = setTimeout(() => { child.kill('SIGKILL'); reject(new Error(`script ${args.join(' ')} did not exit within ${timeoutMs} ms; output: ${stdout}`)); }, timeoutMs);
    child.on('error', (e) => { clearTimeout(timer); reject(e); });
    child.on('close', (code) => { clearTimeout(timer); resolve({ code, stdout, stderr }); });
  });
}

describe('demo', { timeout: 180_000 }, () => {
  let t: ReturnType<typeof tempStateHome>;
  beforeAll(() => { t = tempStateHome('sa-demo-'); });
  afterAll(() => t.cleanup());

  it('runs a real MCP session with the bundled agent, printing plain progress lines when not on a terminal', async () => {
    const r = await cli(['demo'], { SUBAGENTS_HOME: t.home }, { timeoutMs: 60_000 });
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain('agents: demo-summarizer');
    expect(r.stdout).toMatch(/launched r-\S+ \(session s-\S+\)/);
    expect(r.stdout).not.toContain('\r'); // no in-place redraws in a pipe
    expect(r.stdout).toMatch(/^ {2}completed, step completed after /m);
    expect(r.stdout).toContain('# Report from demo-summarizer');
    const runId = /launched (r-\S+)/.exec(r.stdout)![1]!;
    const runs = JSON.parse((await cli(['runs', '--json'], { SUBAGENTS_HOME: t.home })).stdout);
    expect(runs.runs).toHaveLength(1);
    expect(runs.runs[0]).toMatchObject({ runId, state: 'completed', label: 'demo', agents: ['demo-summarizer'] });
  });

  it.skipIf(!SCRIPT)('on a terminal, redraws one progress line in place, clears it, and ends successfully', async () => {
    const own = tempStateHome('sa-demo-pty-');
    let r: CliResult;
    try {
      r = await cliOnPty(['demo'], { SUBAGENTS_HOME: own.home });
    } finally {
      own.cleanup();
    }
    expect(r.code, r.stdout + r.stderr).toBe(0);
    // The pty turns every \n into \r\n; the progress line is the one drawn with carriage return + erase-line.
    const draws = r.stdout.match(/\r\u001b\[2K {2}(starting|running|completed) · [^\r\n]* of output · [^\r\n]*/g) ?? [];
    expect(draws.length, r.stdout).toBeGreaterThan(0);
    expect(draws.at(-1)).toMatch(/^\r\u001b\[2K {2}completed · /);
    // The line is erased before the result is printed, and no plain progress lines (the pipe form) are written.
    const last = r.stdout.lastIndexOf(draws.at(-1)!);
    const runLine = r.stdout.search(/run r-\S+ completed in /);
    expect(runLine).toBeGreaterThan(last);
    expect(r.stdout.slice(last + draws.at(-1)!.length, runLine)).toContain('\r\u001b[2K');
    expect(r.stdout).not.toMatch(/^ {2}completed, step completed after /m);
    expect(r.stdout).toContain('# Report from demo-summarizer');
  });
});
