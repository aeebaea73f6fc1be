/**
 * Every caller that ends a run — the runner, reconciliation, cancel's fallback and a launch that gives up — goes
 * through `endRun`, and leaves the ledger the same way for the same ended run: the run's agent slots gone, the
 * fan-out claims of its agents that never started returned to its tree, and (a top-level run) its capacity slot and
 * tree dropped. docs/architecture.md, "The life of a run".
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { ManagerContext } from '../../src/manager/context.js';
import { readIdentity, type ProcessIdentity } from '../../src/process/identity.js';
import type { Ledger } from '../../src/store/ledger.js';
import type { RunRecord, RunStatus, StepStatus } from '../../src/store/run-types.js';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';

const REPO = path.resolve(import.meta.dirname, '../..');
/** The built modules: a launch from them starts the built runner (paths derive from dist/). */
const dist = async <T>(rel: string): Promise<T> => (await import(pathToFileURL(path.join(REPO, 'dist', rel)).href)) as T;
const m = {
  ...(await dist<typeof import('../../src/config.js')>('config.js')),
  ...(await dist<typeof import('../../src/ids.js')>('ids.js')),
  ...(await dist<typeof import('../../src/lifecycle/run-lifecycle.js')>('lifecycle/run-lifecycle.js')),
  ...(await dist<typeof import('../../src/manager/cancel.js')>('manager/cancel.js')),
  ...(await dist<typeof import('../../src/manager/launch.js')>('manager/launch.js')),
  ...(await dist<typeof import('../../src/manager/reconcile.js')>('manager/reconcile.js')),
  ...(await dist<typeof import('../../src/mcp/core.js')>('mcp/core.js')),
  ...(await dist<typeof import('../../src/store/state-home.js')>('store/state-home.js')),
};

/** A process that has exited: its pid with a start time no live process has. */
function deadIdentity(): ProcessIdentity {
  const r = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], { encoding: 'utf8' });
  return { pid: Number(r.stdout), startTime: '1' };
}

const step = (index: number, agent: string, started: boolean): StepStatus => ({
  index, key: String(index), agent, state: started ? 'completed' : 'pending', exitCode: started ? 0 : null, signal: null,
  startedAt: started ? new Date().toISOString() : null, endedAt: started ? new Date().toISOString() : null,
  process: null, usage: null, costUsd: null, error: null, appendSeq: null, outputBytes: 0, outputTruncated: false,
});

describe('one run lifecycle: the same accounting from every caller', () => {
  let t: ReturnType<typeof tempStateHome>;
  let ctx: ManagerContext;
  let holders: ChildProcess[];
  /** The record of a real two-step chain (`fail`, then `echo`): the frozen agents the fabricated runs reuse. */
  let template: RunRecord;

  /** A live process in its own group, standing in for a runner that does not answer. */
  const liveHolder = async (): Promise<ProcessIdentity> => {
    const c = spawn('sleep', ['60'], { stdio: 'ignore', detached: true });
    holders.push(c);
    await new Promise((r) => c.once('spawn', r));
    return readIdentity(c.pid!)!;
  };
  const ledger = (): Ledger => JSON.parse(fs.readFileSync(path.join(t.home, 'ledger.json'), 'utf8')) as Ledger;

  beforeEach(async () => {
    t = tempStateHome();
    holders = [];
    const dir = path.join(t.home, 'agents');
    writeAgent(dir, 'fail', { backend: 'command', command: ['/bin/sh', '-c', 'exit 3'] });
    writeAgent(dir, 'echo', { backend: 'command', command: ['/bin/cat'] });
    const settings = m.loadSettings({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_KILL_GRACE_MS: '100' });
    m.openStateHome(settings.home);
    ctx = m.buildContext(settings, {}, () => null).ctx;
    const r = await m.launch(ctx, { mode: 'chain', cwd: t.root, chain: [{ agent: 'fail', task: 'a' }, { agent: 'echo', task: 'b' }] }, { signal: new AbortController().signal });
    await until(() => ['failed', 'completed'].includes(ctx.store.readStatus(r.runId)!.state));
    template = ctx.store.readRecord(r.runId)!;
  });
  afterEach(() => {
    for (const c of holders) try { process.kill(-c.pid!, 'SIGKILL'); } catch { /* gone */ }
    t.cleanup();
  });

  /**
   * Writes a run made from the template: nested (depth 1, in the tree of a live root `R`) or top-level, with its first
   * step started and its second never started (one fan-out claim to return), and a ledger that holds what it held.
   */
  function fabricate(o: { nested: boolean; state: 'starting' | 'running'; runner: ProcessIdentity | null }): { runId: string; rootRunId: string } {
    const runId = m.newRunId();
    const rootRunId = o.nested ? m.newRunId() : runId;
    const record: RunRecord = { ...template, runId, rootRunId, depth: o.nested ? 1 : 0, parentRunId: o.nested ? rootRunId : null, parentStepKey: o.nested ? '0' : null, killGraceMs: 100 };
    const status: RunStatus = {
      v: 1, runId, state: o.state, error: null, startedAt: o.state === 'running' ? new Date().toISOString() : null, endedAt: null,
      updatedAt: new Date().toISOString(), runner: o.runner, appendsTaken: 0, survivors: [],
      steps: [step(0, 'fail', o.state === 'running'), step(1, 'echo', false)],
    };
    const dir = path.join(t.home, 'runs', runId);
    fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
    fs.writeFileSync(path.join(dir, 'run.json'), JSON.stringify(record));
    fs.writeFileSync(path.join(dir, 'status.json'), JSON.stringify(status));
    const at = new Date().toISOString();
    const holder = o.runner ?? deadIdentity();
    const l: Ledger = {
      v: 1,
      roots: { [rootRunId]: { at, server: holder, runner: o.nested ? readIdentity(process.pid)! : holder } },
      trees: { [rootRunId]: { used: 3, limit: 10, maxDepth: 3 } },
      agents: { [`${runId}:0`]: { runner: holder, agent: null, at, root: rootRunId }, [`${runId}:reserved:0`]: { runner: holder, agent: null, at, root: rootRunId } },
    };
    fs.writeFileSync(path.join(t.home, 'ledger.json'), JSON.stringify(l));
    return { runId, rootRunId };
  }

  /** What every caller must leave for a nested run: no slot of it, its one unstarted claim back, the root untouched. */
  function expectNestedAccounting(runId: string, rootRunId: string): void {
    const l = ledger();
    expect(Object.keys(l.agents).filter((k) => k.startsWith(`${runId}:`))).toEqual([]);
    expect(l.trees[rootRunId]!.used).toBe(2);
    expect(l.roots[rootRunId]).toBeDefined();
  }

  /** For a top-level run: its slots, its capacity slot and its tree are gone. */
  function expectTopLevelAccounting(runId: string): void {
    const l = ledger();
    expect(Object.keys(l.agents).filter((k) => k.startsWith(`${runId}:`))).toEqual([]);
    expect(l.roots[runId]).toBeUndefined();
    expect(l.trees[runId]).toBeUndefined();
  }

  for (const nested of [true, false]) {
    const expectAccounting = (ids: { runId: string; rootRunId: string }) => nested ? expectNestedAccounting(ids.runId, ids.rootRunId) : expectTopLevelAccounting(ids.runId);
    const kind = nested ? 'a nested run' : 'a top-level run';

    it(`endRun itself, for ${kind}`, async () => {
      const ids = fabricate({ nested, state: 'running', runner: deadIdentity() });
      const r = await m.endRun(ctx, ctx.store.readRecord(ids.runId)!, { state: 'failed', error: { code: 'RUNNER_LOST', message: 'x' } });
      expect(r.ours).toBe(true);
      expect(r.status.steps.map((s) => s.state)).toEqual(['completed', 'skipped']);
      expectAccounting(ids);
      // A second end of the same run is refused by the compare-and-set, and returns nothing twice.
      const again = await m.endRun(ctx, ctx.store.readRecord(ids.runId)!, { state: 'cancelled', error: null });
      expect(again.ours).toBe(false);
      expect(again.status.state).toBe('failed');
      expectAccounting(ids);
    });

    it(`reconciliation of a lost runner, for ${kind}`, async () => {
      const ids = fabricate({ nested, state: 'running', runner: deadIdentity() });
      await m.reconcileRun(ctx, ids.runId);
      expect(ctx.store.readStatus(ids.runId)!.error?.code).toBe('RUNNER_LOST');
      expectAccounting(ids);
    });

    it(`cancel's fallback for a runner that does not answer, for ${kind}`, async () => {
      // Before the lifecycle was one, this path did not return a nested run's unstarted fan-out claims.
      const ids = fabricate({ nested, state: 'running', runner: await liveHolder() });
      const r = await m.cancelRun(ctx, ids.runId);
      expect(r.state).toBe('cancelled');
      expectAccounting(ids);
    }, 20_000);

    it(`the runner's own end, for ${kind}`, async () => {
      const ids = fabricate({ nested, state: 'starting', runner: null });
      // The built runner's supervisor, in a process of its own (it claims the start, runs `fail`, never starts `echo`).
      const supervise = pathToFileURL(path.join(REPO, 'dist', 'runner', 'supervise.js')).href;
      const layout = pathToFileURL(path.join(REPO, 'dist', 'store', 'layout.js')).href;
      const identity = pathToFileURL(path.join(REPO, 'dist', 'process', 'identity.js')).href;
      const script = `
        const fs = await import('node:fs');
        const { supervise } = await import(${JSON.stringify(supervise)});
        const { Layout } = await import(${JSON.stringify(layout)});
        const { readIdentity } = await import(${JSON.stringify(identity)});
        const paths = new Layout(process.argv[1]).run(process.argv[2]);
        const record = JSON.parse(fs.readFileSync(paths.record, 'utf8'));
        process.exitCode = await supervise(record, paths, readIdentity(process.pid));
      `;
      const r = spawnSync(process.execPath, ['--input-type=module', '-e', script, t.home, ids.runId], { encoding: 'utf8', timeout: 30_000 });
      expect(r.status, r.stderr).toBe(0);
      const s = ctx.store.readStatus(ids.runId)!;
      expect(s.state).toBe('failed');
      expect(s.steps.map((st) => st.state)).toEqual(['failed', 'skipped']);
      expectAccounting(ids);
    }, 40_000);
  }

  it("a run supervised by another host process, through the state ports that host passes", async () => {
    const ids = fabricate({ nested: false, state: 'starting', runner: null });
    // A host that is not the detached runner (as a worker would be) supervises the run with ports of its own: here the
    // file ports behind a wrapper that counts the calls, so the test sees the supervision use them and nothing else.
    const supervise = pathToFileURL(path.join(REPO, 'dist', 'runner', 'supervise.js')).href;
    const ports = pathToFileURL(path.join(REPO, 'dist', 'lifecycle', 'state-ports.js')).href;
    const identity = pathToFileURL(path.join(REPO, 'dist', 'process', 'identity.js')).href;
    const script = `
      const fs = await import('node:fs');
      const { supervise } = await import(${JSON.stringify(supervise)});
      const { fileStatePorts } = await import(${JSON.stringify(ports)});
      const { readIdentity } = await import(${JSON.stringify(identity)});
      const files = fileStatePorts(process.argv[1]);
      const calls = {};
      const counted = (o, what) => new Proxy(o, { get(t, k) {
        const v = Reflect.get(t, k, t);
        return typeof v === 'function' ? (...a) => { calls[what + '.' + String(k)] = (calls[what + '.' + String(k)] ?? 0) + 1; return v.apply(t, a); } : v;
      } });
      const paths = files.layout.run(process.argv[2]);
      const record = JSON.parse(fs.readFileSync(paths.record, 'utf8'));
      const host = { processSignals: false, ports: { layout: files.layout, store: counted(files.store, 'store'), ledger: counted(files.ledger, 'ledger') } };
      const code = await supervise(record, paths, readIdentity(process.pid), null, host);
      process.stdout.write(JSON.stringify({ code, calls }));
    `;
    const r = spawnSync(process.execPath, ['--input-type=module', '-e', script, t.home, ids.runId], { encoding: 'utf8', timeout: 30_000 });
    expect(r.status, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout) as { code: number; calls: Record<string, number> };
    expect(out.code).toBe(0);
    // The start claim and the end are status writes through the store passed; the agent slot and the run's return
    // to the ledger go through the ledger passed.
    expect(out.calls['store.update']).toBeGreaterThanOrEqual(1);
    expect(out.calls['ledger.change']).toBeGreaterThanOrEqual(2);
    const s = ctx.store.readStatus(ids.runId)!;
    expect(s.state).toBe('failed');
    expect(s.steps.map((st) => st.state)).toEqual(['failed', 'skipped']);
    expectTopLevelAccounting(ids.runId);
  }, 40_000);

  it('the ledger goes back before the end is visible: a client that sees the end can launch into the slot', async () => {
    const ids = fabricate({ nested: false, state: 'running', runner: deadIdentity() });
    const statusFile = path.join(t.home, 'runs', ids.runId, 'status.json');
    const seen: string[] = [];
    // The file ledger, with a look at the stored status before and after each change it makes.
    const ledgerPort: ManagerContext['ledger'] = {
      read: () => ctx.ledger.read(),
      peek: () => ctx.ledger.peek(),
      change: async (fn, o) => {
        seen.push((JSON.parse(fs.readFileSync(statusFile, 'utf8')) as RunStatus).state);
        const v = await ctx.ledger.change(fn, o);
        seen.push((JSON.parse(fs.readFileSync(statusFile, 'utf8')) as RunStatus).state);
        return v;
      },
    };
    const r = await m.endRun({ store: ctx.store, ledger: ledgerPort }, ctx.store.readRecord(ids.runId)!, { state: 'failed', error: { code: 'RUNNER_LOST', message: 'x' } });
    expect([r.ours, r.ledgerReturned]).toEqual([true, true]);
    expect(seen).toEqual(['running', 'running']);
    expect(ctx.store.readStatus(ids.runId)!.state).toBe('failed');
    expectTopLevelAccounting(ids.runId);
  });

  it('a runner ending its own run writes the end while the ledger goes back, and it shows only after', async () => {
    const me = readIdentity(process.pid)!;
    const ids = fabricate({ nested: false, state: 'running', runner: me });
    const runDir = path.join(t.home, 'runs', ids.runId);
    const statusFile = path.join(runDir, 'status.json');
    const seen: Array<{ state: string; temps: number }> = [];
    const look = () => seen.push({
      state: (JSON.parse(fs.readFileSync(statusFile, 'utf8')) as RunStatus).state,
      temps: fs.readdirSync(runDir).filter((n) => n.startsWith('.status.json.') && n.endsWith('.tmp')).length,
    });
    const ledgerPort: ManagerContext['ledger'] = {
      read: () => ctx.ledger.read(),
      peek: () => ctx.ledger.peek(),
      change: async (fn, o) => { look(); const v = await ctx.ledger.change(fn, o); look(); return v; },
    };
    const runnerStatus = ctx.store.readStatus(ids.runId)!;
    const r = await ctx.store.withRunLock(ids.runId, () => m.endRun({ store: ctx.store, ledger: ledgerPort }, ctx.store.readRecord(ids.runId)!,
      { state: 'completed', error: null }, { locked: true, runnerStatus, ledgerDurable: false }));
    expect([r.ours, r.ledgerReturned, r.status.state]).toEqual([true, true, 'completed']);
    // The end's file was on its way to the disk during the ledger's section; the old status showed throughout.
    expect(seen).toEqual([{ state: 'running', temps: 1 }, { state: 'running', temps: 1 }]);
    const stored = ctx.store.readStatus(ids.runId)!;
    expect([stored.state, stored.updatedAt]).toEqual(['completed', r.status.updatedAt]);
    expect(fs.readdirSync(runDir).filter((n) => n.endsWith('.tmp'))).toEqual([]);
    expectTopLevelAccounting(ids.runId);
  });

  it('an end whose status write is refused and retried returns the ledger once (a nested run refunds its claims once)', async () => {
    const ids = fabricate({ nested: true, state: 'running', runner: deadIdentity() });
    const record = ctx.store.readRecord(ids.runId)!;
    let refuse = true;
    // The file store, its terminal write refused once (after the ledger's return, which comes first).
    const store = new Proxy(ctx.store, {
      get(target, key, receiver) {
        if (key !== 'updateLocked') return Reflect.get(target, key, receiver) as unknown;
        return (...args: Parameters<typeof target.updateLocked>) => {
          if (!refuse) return target.updateLocked(...args);
          refuse = false;
          throw Object.assign(new Error('ENOSPC: injected'), { code: 'ENOSPC' });
        };
      },
    });
    let returned = false;
    const end = () => m.endRun({ store, ledger: ctx.ledger }, record, { state: 'failed', error: { code: 'RUNNER_LOST', message: 'x' } }, { ledgerReturned: returned, onLedgerReturned: () => { returned = true; } });
    await expect(end()).rejects.toThrow('ENOSPC');
    expect(returned).toBe(true);
    expect(ctx.store.readStatus(ids.runId)!.state).toBe('running');
    const r = await end();
    expect([r.ours, r.ledgerReturned]).toEqual([true, true]);
    expectNestedAccounting(ids.runId, ids.rootRunId); // its one unstarted claim back once: used 3 -> 2
  });

  it('a launch that gives up at the handshake', async () => {
    const aborted = new AbortController();
    aborted.abort();
    const err = await m.launch(ctx, { mode: 'chain', cwd: t.root, chain: [{ agent: 'fail', task: 'a' }, { agent: 'echo', task: 'b' }] }, { signal: aborted.signal }).catch((e: unknown) => e);
    expect((err as { code?: string }).code).toBe('HANDSHAKE_FAILED');
    const runId = fs.readdirSync(path.join(t.home, 'runs')).find((id) => id !== template.runId && !id.startsWith('.'))!;
    const s = ctx.store.readStatus(runId)!;
    expect([s.state, s.error?.code]).toEqual(['failed', 'HANDSHAKE_FAILED']);
    expect(s.steps.map((st) => st.state)).toEqual(['skipped', 'skipped']);
    expectTopLevelAccounting(runId);
  }, 20_000);
});

async function until(pred: () => boolean, maxMs = 20_000): Promise<void> {
  const end = Date.now() + maxMs;
  while (!pred()) {
    if (Date.now() > end) throw new Error('condition not reached');
    await new Promise((r) => setTimeout(r, 20));
  }
}
