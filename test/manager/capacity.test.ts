/**
 * A top-level launch at a full state home is refused from a lock-free read of the ledger when every slot in it is
 * held beyond doubt; whenever a slot might be prunable (a dead runner, a dead launching server), or the ledger does
 * not parse, the locked reservation decides. SPEC §7.4: slots of dead runners come back.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { loadSettings } from '../../src/config.js';
import { buildContext } from '../../src/mcp/core.js';
import { pruneRoots, refusalWithoutLock } from '../../src/manager/capacity.js';
import { readIdentity, type ProcessIdentity } from '../../src/process/identity.js';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { sc, startServer, textOf, waitTerminal } from '../helpers/server.js';
import { CAT } from '../helpers/runs.js';

/** A process that has exited: its pid with a start time no live process has. */
function deadIdentity(): ProcessIdentity {
  const r = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], { encoding: 'utf8' });
  return { pid: Number(r.stdout), startTime: '1' };
}

function writeLedger(home: string, roots: Record<string, { server: ProcessIdentity; runner: ProcessIdentity | null }>): void {
  const at = new Date().toISOString();
  const ledger = {
    v: 1,
    roots: Object.fromEntries(Object.entries(roots).map(([id, r]) => [id, { at, server: r.server, runner: r.runner, handshakeMs: 10_000 }])),
    trees: Object.fromEntries(Object.keys(roots).map((id) => [id, { used: 1, limit: 64, maxDepth: 3 }])),
    agents: {},
  };
  fs.writeFileSync(path.join(home, 'ledger.json'), JSON.stringify(ledger));
}

describe('capacity refusal without the ledger lock', () => {
  let t: ReturnType<typeof tempStateHome>;
  let holders: ChildProcess[] = [];
  /** Live processes standing in for runners that hold slots. */
  const liveHolder = async (): Promise<ProcessIdentity> => {
    const c = spawn('sleep', ['60'], { stdio: 'ignore' });
    holders.push(c);
    await new Promise((r) => c.once('spawn', r));
    return readIdentity(c.pid!)!;
  };
  beforeEach(() => {
    t = tempStateHome();
    holders = [];
  });
  afterEach(() => {
    for (const c of holders) c.kill('SIGKILL');
    t.cleanup();
  });

  const ctxWith = (maxActive: number) => {
    const settings = loadSettings({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_MAX_ACTIVE_RUNS: String(maxActive) });
    return buildContext(settings, {}, () => null).ctx;
  };

  it('refuses only when every slot is provably held', async () => {
    const me = readIdentity(process.pid)!;
    const [a, b] = [await liveHolder(), await liveHolder()];
    // Full: two bound roots with live runners, cap 2.
    writeLedger(t.home, { 'r-a': { server: me, runner: a }, 'r-b': { server: me, runner: b } });
    expect(refusalWithoutLock(ctxWith(2))).toBe('2 of 2 active runs');
    // Room left: the locked path admits.
    expect(refusalWithoutLock(ctxWith(3))).toBeNull();
    // Unlimited.
    expect(refusalWithoutLock(ctxWith(0))).toBeNull();
    // An unbound root whose launching server lives is held (its handshake is under way).
    writeLedger(t.home, { 'r-a': { server: me, runner: a }, 'r-b': { server: me, runner: null } });
    expect(refusalWithoutLock(ctxWith(2))).toBe('2 of 2 active runs');
    // A bound root whose runner is dead may be prunable: not decided here.
    writeLedger(t.home, { 'r-a': { server: me, runner: a }, 'r-b': { server: me, runner: deadIdentity() } });
    expect(refusalWithoutLock(ctxWith(2))).toBeNull();
    // An unbound root whose launching server is dead is reclaimed under the lock: not decided here.
    writeLedger(t.home, { 'r-a': { server: me, runner: a }, 'r-b': { server: deadIdentity(), runner: null } });
    expect(refusalWithoutLock(ctxWith(2))).toBeNull();
    // A damaged ledger is rebuilt under the lock.
    fs.writeFileSync(path.join(t.home, 'ledger.json'), '{"v":1,"roots":');
    expect(refusalWithoutLock(ctxWith(2))).toBeNull();
  });

  it('a launch at a full home is refused while another process holds the ledger lock; a dead runner\'s slot still comes back', async () => {
    writeAgent(path.join(t.home, 'agents'), 'echo', { backend: 'command', command: [CAT] });
    const s = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_MAX_ACTIVE_RUNS: '2' });
    const lockDir = path.join(t.home, 'ledger.json.lock');
    let refresh: NodeJS.Timeout | undefined;
    try {
      const a = await liveHolder();
      const b = await liveHolder();
      writeLedger(t.home, { 'r-a': { server: a, runner: a }, 'r-b': { server: b, runner: b } });
      // Another process holds the lock and keeps it fresh: a launch that waited for it would answer BUSY after 5 s.
      fs.mkdirSync(lockDir);
      refresh = setInterval(() => { const now = new Date(); fs.utimesSync(lockDir, now, now); }, 500);
      const refused = await s.call('launch', { agent: 'echo', task: 'x', queue: false });
      expect(refused.isError).toBe(true);
      expect(textOf(refused)).toMatch(/^CAPACITY_EXHAUSTED: 2 of 2 active runs in this state home \(SUBAGENTS_MAX_ACTIVE_RUNS\)\. None of them belong to this session/);
      const runsDir = path.join(t.home, 'runs');
      expect(fs.existsSync(runsDir) ? fs.readdirSync(runsDir) : []).toEqual([]); // no run directory, not even a hidden one
      clearInterval(refresh);
      fs.rmdirSync(lockDir);

      // One holder dies: the lock-free read cannot prove the home full, and the locked reservation reclaims its slot.
      holders[1]!.kill('SIGKILL');
      await new Promise((r) => holders[1]!.once('exit', r));
      const admitted = sc(await s.call('launch', { agent: 'echo', task: 'x' }));
      expect((await waitTerminal(s, admitted.runId)).state).toBe('completed');
    } finally {
      clearInterval(refresh);
      await s.close();
    }
  });

  it('a root bound early to a warm runner is its launching server\'s until the run has its proceed', async () => {
    const idle = await liveHolder(); // stands in for an idle runner of the pool, which lives on whatever the launch does
    const me = readIdentity(process.pid)!;
    const ctx = ctxWith(1);
    const early = (server: ProcessIdentity, runner = idle) => {
      const at = new Date().toISOString();
      fs.writeFileSync(path.join(t.home, 'ledger.json'), JSON.stringify({
        v: 1,
        roots: { 'r-earlybound00000000000000': { at, server, runner, handshakeMs: 10_000, boundEarly: true } },
        trees: { 'r-earlybound00000000000000': { used: 1, limit: 64, maxDepth: 3 } },
        agents: { 'r-earlybound00000000000000:reserved:0': { runner, agent: null, at, root: 'r-earlybound00000000000000' } },
      }));
    };
    const prune = () => ctx.ledger.change((l) => { pruneRoots(l, 10_000, ctx.store); });
    const ledger = () => JSON.parse(fs.readFileSync(path.join(t.home, 'ledger.json'), 'utf8'));

    // Its launching server lives: held (the launch is under way), by the lock-free read too.
    early(me);
    expect(refusalWithoutLock(ctx)).toBe('1 of 1 active runs');
    await prune();
    expect(ledger().roots['r-earlybound00000000000000'].boundEarly).toBe(true);
    // Its runner dead (it may have been told to proceed since the flag was last looked at): not decided lock-free.
    early(me, deadIdentity());
    expect(refusalWithoutLock(ctx)).toBeNull();

    // Its launching server died before proceed: the runner alive proves nothing (it may never be told the run, or serve
    // another). Not decided lock-free; pruned under the lock, its reserved agent slot with it.
    early(deadIdentity());
    expect(refusalWithoutLock(ctx)).toBeNull();
    await prune();
    expect(ledger().roots).toEqual({});
    expect(ledger().agents).toEqual({});
    expect(ledger().trees).toEqual({});

    // The run has its proceed: an ordinary bound root, held while its runner lives, whoever launched it.
    early(deadIdentity());
    const runDir = path.join(t.home, 'runs', 'r-earlybound00000000000000');
    fs.mkdirSync(runDir, { recursive: true });
    fs.writeFileSync(path.join(runDir, 'proceed'), '{}');
    await prune();
    expect(ledger().roots['r-earlybound00000000000000'].runner).toEqual(idle);
    expect(ledger().roots['r-earlybound00000000000000'].boundEarly).toBeUndefined();
    expect(ledger().agents['r-earlybound00000000000000:reserved:0']).toBeDefined();
    expect(refusalWithoutLock(ctx)).toBe('1 of 1 active runs');
  });
});
