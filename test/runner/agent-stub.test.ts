/**
 * The pre-started agent process of a warm runner (src/runner/agent-stub.ts). An agent that a stub becomes must be
 * indistinguishable from one spawned the usual way: the same environment (nothing the shell adds), working directory,
 * umask, open descriptors, signal dispositions, stdin and exit status. Invocations the stub cannot reproduce exactly
 * are refused (spawned as before), and a stub never outlives its runner.
 */
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { AgentStub, stubScript, type StubInvocation } from '../../src/runner/agent-stub.js';

const HAS_DASH = process.platform === 'linux' && ['/bin/dash', '/usr/bin/dash'].some((p) => fs.existsSync(p));

/** What a process shows of itself: the environment it was started with, cwd, umask, descriptors, ignored/blocked signals, its stdin. */
const PROBE = `#!/bin/sh
# Signal masks first, with builtins only: while this shell forks a child it blocks every signal for a moment, and a
# child reading the shell's status then would see that.
while IFS= read -r l; do case $l in SigBlk:*|SigIgn:*) echo "$l" ;; esac; done < /proc/$$/status
tr '\\0' '\\n' < /proc/$$/environ | LC_ALL=C sort
echo "cwd=$(pwd)"
echo "umask=$(umask)"
echo "fds=$(ls /proc/$$/fd | LC_ALL=C sort -n | tr '\\n' ' ')"
echo "stdin=$(cat)"
exit 7
`;

interface Seen { out: string; code: number | null }

describe.skipIf(!HAS_DASH)('AgentStub', () => {
  let dir: string;
  let probe: string;
  let cwd: string;
  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sa-stub-'));
    probe = path.join(dir, 'probe.sh');
    fs.writeFileSync(probe, PROBE, { mode: 0o755 });
    cwd = fs.mkdirSync(path.join(dir, "a dir with 'quotes' and $dollar"), { recursive: true })!;
  });
  afterEach(() => { fs.rmSync(dir, { recursive: true, force: true }); });

  const env = () => ({ PATH: '/usr/bin:/bin', HOME: dir, SUBAGENTS_RUN_TOKEN: 'tok', ODD: "it's \"quoted\"\nand $(not run) `either`" });

  async function viaStub(inv: StubInvocation, task: string): Promise<Seen> {
    const stub = await AgentStub.start(dir);
    expect(stub).not.toBeNull();
    const parts: Buffer[] = [];
    stub!.onChunk = (c) => parts.push(Buffer.from(c));
    const script = stubScript(inv);
    expect(script).not.toBeNull();
    const closed = stub!.channel?.closed;
    const exit = new Promise<number | null>((r) => stub!.child.once('exit', (code) => r(code)));
    stub!.exec(script!);
    stub!.child.stdin!.end(task);
    const code = await exit;
    await closed;
    stub!.release();
    stub!.child.stderr?.destroy();
    return { out: Buffer.concat(parts).toString(), code };
  }

  async function viaSpawn(inv: StubInvocation, task: string): Promise<Seen> {
    const previous = process.umask(inv.umask);
    const child = spawn(inv.argv[0]!, inv.argv.slice(1), { cwd: inv.cwd, env: inv.env, stdio: ['pipe', 'pipe', 'pipe'] });
    process.umask(previous);
    let out = '';
    child.stdout.on('data', (c: Buffer) => { out += c.toString(); });
    child.stdin.end(task);
    const code = await new Promise<number | null>((r) => child.once('close', (c) => r(c)));
    return { out, code };
  }

  it('becomes an agent indistinguishable from a spawned one', async () => {
    const inv: StubInvocation = { argv: [probe, "an 'arg'", '$HOME'], env: env(), cwd, umask: 0o027, stdin: true };
    const stubbed = await viaStub(inv, 'the task');
    const spawned = await viaSpawn(inv, 'the task');
    expect(stubbed.code).toBe(7);
    expect(stubbed.out).toBe(spawned.out);
    expect(stubbed.out).toContain(`cwd=${cwd}`);
    expect(stubbed.out).toContain('umask=0027');
    expect(stubbed.out).toContain('stdin=the task');
    expect(stubbed.out).toContain(`ODD=it's "quoted"`);
    expect(stubbed.out).not.toMatch(/^(PWD|OLDPWD|SHLVL|_)=/m);
  });

  it('hands hostile argv and environment words to the agent literally: nothing in them is run', async () => {
    const marker = path.join(dir, 'injected');
    const args = ['-x', `$(touch ${marker})`, `\`touch ${marker}\``, `; touch ${marker}`, `it's\nmulti; line`, '*', '\\'];
    const printer = path.join(dir, 'print-args.sh');
    fs.writeFileSync(printer, '#!/bin/sh\nfor a in "$@"; do printf "<%s>" "$a"; done\nprintf "|%s" "$EVIL"\n', { mode: 0o755 });
    const inv: StubInvocation = { argv: [printer, ...args], env: { PATH: '/usr/bin:/bin', EVIL: `$(touch ${marker})'` }, cwd, umask: 0o022, stdin: false };
    const seen = await viaStub(inv, '');
    expect(seen.out).toBe(`${args.map((a) => `<${a}>`).join('')}|$(touch ${marker})'`);
    expect(fs.existsSync(marker)).toBe(false);
  });

  it('gives an agent without a task on stdin /dev/null, as spawn does', async () => {
    const seen = await viaStub({ argv: [probe], env: env(), cwd, umask: 0o022, stdin: false }, 'not read');
    expect(seen.out).toContain('stdin=\n');
  });

  it('finds a bare command on the PATH of the agent environment', async () => {
    const seen = await viaStub({ argv: ['probe.sh'], env: { PATH: `/nonexistent:${dir}:/usr/bin:/bin` }, cwd, umask: 0o022, stdin: true }, 'x');
    expect(seen.code).toBe(7);
    expect(seen.out).toContain(`PATH=/nonexistent:${dir}:/usr/bin:/bin`);
  });

  it('refuses what it cannot start exactly as spawn would (the agent is spawned instead)', () => {
    const ok: StubInvocation = { argv: [probe], env: env(), cwd, umask: 0o022, stdin: true };
    expect(stubScript(ok)).not.toBeNull();
    expect(stubScript({ ...ok, argv: [path.join(dir, 'missing')] })).toBeNull();
    expect(stubScript({ ...ok, argv: ['missing-command-xyz'] })).toBeNull();
    expect(stubScript({ ...ok, argv: [path.join(dir, 'probe-not-executable')] })).toBeNull();
    expect(stubScript({ ...ok, cwd: path.join(dir, 'gone') })).toBeNull();
    expect(stubScript({ ...ok, env: { ...env(), PWD: '/elsewhere' } })).toBeNull();
    expect(stubScript({ ...ok, env: { ...env(), 'NOT-A-NAME': '1' } })).toBeNull();
    expect(stubScript({ ...ok, argv: [probe, 'x'.repeat(100 * 1024)] })).toBeNull();
  });

  it('an unused stub exits when disposed of, and leaves nothing open', async () => {
    const stub = await AgentStub.start(dir);
    const pid = stub!.child.pid!;
    await stub!.dispose();
    expect(alive(pid)).toBe(false);
    expect(fs.readdirSync(dir).filter((f) => f.startsWith('.stub'))).toEqual([]);
  });

  it('a stub whose runner dies exits on its own', async () => {
    // A runner stand-in that starts a stub, reports its pid, then is SIGKILLed.
    const src = path.resolve('src/runner/agent-stub.ts');
    const host = spawn(process.execPath, ['--import', 'tsx', '-e', `import(${JSON.stringify(src)}).then(async (m) => { const s = await m.AgentStub.start(${JSON.stringify(dir)}); console.log(s.child.pid); setInterval(() => {}, 1000); })`], { stdio: ['ignore', 'pipe', 'inherit'] });
    const stubPid = await new Promise<number>((resolve) => host.stdout.once('data', (c: Buffer) => resolve(Number(c.toString().trim()))));
    expect(alive(stubPid)).toBe(true);
    host.kill('SIGKILL');
    await waitFor(() => !alive(stubPid));
    expect(alive(stubPid)).toBe(false);
  });
});

function alive(pid: number): boolean {
  const r = spawnSync('ps', ['-o', 'stat=', '-p', String(pid)], { encoding: 'utf8' });
  return r.status === 0 && !r.stdout.trim().startsWith('Z');
}

async function waitFor(cond: () => boolean, maxMs = 10_000): Promise<void> {
  const end = Date.now() + maxMs;
  while (!cond() && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
}
