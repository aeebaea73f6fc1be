/**
 * F6 — disk faults. ENOSPC, EACCES and EROFS are injected through the store's file-system seam
 * (`overrideFsPort`, src/store/fs-port.ts) at each system call of a state write — open, write, fsync, rename (link
 * for create-once files) — of: launch (capacity ledger, the run index, run.json, status.json, the event log, the
 * catalog snapshot), append (appends/NNNNNN.json), a status update (cancel's request file; reconciliation's
 * status.json write) and the session registry (restore). The machine itself is never broken.
 *
 * In-process: the manager is driven directly, with a ManagerContext built exactly as the server builds it
 * (`buildContext`), from dist/ — so runners are the real built runner. The seam lives in this process only: the
 * faults hit the server side of each operation, which is where launch, append, cancel, reconcile and restore write.
 * (Runner-side status writes happen in the runner process: f06-runner-writes.test.ts injects them there.)
 *
 * Expect, every time: the call fails with a clear error naming the operation or the file and the errno; the previous
 * file is byte-identical; no temp file is left behind; a launch whose record could not be written starts no runner
 * and no agent, and returns its reservation; after the fault is lifted the same operation works.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { REPO } from '../helpers/paths.js';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { FAKE, pidAlive, pidsWithArg, tempFiles, until } from './fault-helpers.js';

const dist = async (p: string) => import(pathToFileURL(path.join(REPO, 'dist', p)).href);

type Op = 'open' | 'write' | 'fsync' | 'rename' | 'link' | 'mkdir';
const CODES = ['ENOSPC', 'EACCES', 'EROFS'] as const;

describe.skipIf(process.platform === 'win32')('F6 disk faults', () => {
  let t: ReturnType<typeof tempStateHome>;
  let ctx: any;
  let sessions: any;
  let m: Record<string, any>;
  let restorePort: (() => void) | null = null;
  const ac = new AbortController();

  /** Fails `op` with `code` for every file whose name (or temp name) is `name` under `under`. */
  function inject(op: Op, code: string, match: (file: string) => boolean): void {
    const fds = new Map<number, string>();
    const fail = (syscall: string, p: string) => Object.assign(new Error(`${code}: injected, ${syscall} '${p}'`), { code, syscall, path: p, errno: -1 });
    restorePort = m.overrideFsPort({
      openSync: (p: fs.PathLike, flags?: fs.OpenMode, mode?: fs.Mode) => {
        const file = String(p);
        if (op === 'open' && match(file)) throw fail('open', file);
        const fd = fs.openSync(p, flags, mode);
        // fd numbers are reused, and a failing write closes its fd with the real fs: track per open.
        if (match(file)) fds.set(fd, file);
        else fds.delete(fd);
        return fd;
      },
      writeSync: (fd: number, data: Uint8Array) => {
        if (op === 'write' && fds.has(fd)) throw fail('write', fds.get(fd)!);
        return fs.writeSync(fd, data);
      },
      fsyncSync: (fd: number) => {
        if (op === 'fsync' && fds.has(fd)) throw fail('fsync', fds.get(fd)!);
        return fs.fsyncSync(fd);
      },
      closeSync: (fd: number) => { fds.delete(fd); return fs.closeSync(fd); },
      renameSync: (a: fs.PathLike, b: fs.PathLike) => {
        if (op === 'rename' && match(String(b))) throw fail('rename', String(b));
        return fs.renameSync(a, b);
      },
      linkSync: (a: fs.PathLike, b: fs.PathLike) => {
        if (op === 'link' && match(String(b))) throw fail('link', String(b));
        return fs.linkSync(a, b);
      },
      mkdirSync: ((p: fs.PathLike, o?: fs.MakeDirectoryOptions) => {
        if (op === 'mkdir' && match(String(p))) throw fail('mkdir', String(p));
        return fs.mkdirSync(p, o);
      }) as typeof fs.mkdirSync,
    });
  }
  const named = (name: string, within?: string) => (file: string) => {
    const b = path.basename(file);
    return (b === name || (b.startsWith(`.${name}.`) && b.endsWith('.tmp'))) && (within === undefined || file.includes(within));
  };
  const lift = () => { restorePort?.(); restorePort = null; };
  const snapshot = (file: string) => (fs.existsSync(file) ? fs.readFileSync(file) : null);

  beforeAll(async () => {
    t = tempStateHome();
    const agents = path.join(t.home, 'agents');
    writeAgent(agents, 'sleeper', { backend: 'command', command: ['node', FAKE, 'sleep', '30000'] });
    writeAgent(agents, 'echo', { backend: 'command', command: ['node', FAKE, 'echo'] });
    m = {
      ...(await dist('config.js')), ...(await dist('mcp/core.js')), ...(await dist('store/state-home.js')),
      ...(await dist('store/fs-port.js')), ...(await dist('manager/launch.js')), ...(await dist('manager/append.js')),
      ...(await dist('manager/cancel.js')), ...(await dist('manager/run-status.js')), ...(await dist('manager/sessions.js')),
    };
    const env = { SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_KILL_GRACE_MS: '300', PATH: process.env.PATH, HOME: process.env.HOME };
    const settings = m.loadSettings(env, {}, t.root);
    m.openStateHome(settings.home);
    // As the server does: its locks name it, and a dead holder's lock (and what it left half written) is cleared at once.
    (await dist('manager/state-home.js')).identifyLockHolder(settings);
    ({ ctx, sessions } = m.buildContext(settings, env, () => null));
    ctx.log = () => {};
  });
  afterEach(() => lift());
  afterAll(async () => {
    lift();
    for (const id of ctx.store.listRunIds()) await m.cancelRun(ctx, id).catch(() => {});
    t.cleanup();
  });

  const launchSingle = (agent = 'echo') => m.launch(ctx, { mode: 'single', step: { agent, task: 'x' } }, { signal: ac.signal });

  // Every write of a launch, at every step of the atomic write, with each errno.
  const LAUNCH_WRITES: Array<[string, (f: string) => boolean, Op[]]> = [
    ['capacity ledger', named('ledger.json'), ['open', 'write', 'fsync', 'rename']],
    // The run index is appended to (fdatasync), not replaced: no rename.
    ['run index', (f) => f.includes(`${path.sep}index${path.sep}`) && f.endsWith('.runs'), ['open', 'write', 'fsync']],
    // The run's files are created in its hidden directory, fsynced together, and published by renaming the directory.
    ['run record', named('run.json'), ['open', 'write', 'fsync']],
    ['first status', named('status.json'), ['open', 'write', 'fsync']],
    ['event log', named('events.jsonl'), ['open', 'write']],
    ['catalog snapshot', (f) => f.includes(`${path.sep}runs${path.sep}`) && /catalog/.test(path.basename(f)), ['open', 'write', 'fsync']],
    ['run directory', (f) => path.basename(path.dirname(f)) === 'runs' && path.basename(f).startsWith('r-'), ['rename']],
  ];
  const launchCases = LAUNCH_WRITES.flatMap(([what, match, ops]) => ops.flatMap((op) => CODES.map((code) => [what, op, code, match] as const)));

  it.each(launchCases)('launch: %s fails at %s with %s → clear error, nothing started, nothing left', async (_what, op, code, match) => {
    const ledgerFile = path.join(t.home, 'ledger.json');
    const ledgerBefore = fs.existsSync(ledgerFile) ? JSON.parse(fs.readFileSync(ledgerFile, 'utf8')) : { roots: {}, trees: {} };
    const runsBefore = ctx.store.listRunIds().sort();
    inject(op, code, match);
    let err: any = null;
    try { await launchSingle(); } catch (e) { err = e; }
    lift();
    expect(err).not.toBeNull();
    expect(err.name).toBe('SubagentError');
    expect(err.message).toContain(code);
    expect(err.message).toMatch(/could not write/);
    expect(err.message).not.toMatch(/internal error occurred/);
    // Nothing started, nothing held, nothing left behind.
    expect(ctx.store.listRunIds().sort()).toEqual(runsBefore);
    expect(pidsWithArg(path.join(t.home, 'runs'))).toEqual([]);
    expect(tempFiles(t.home)).toEqual([]);
    const ledgerAfter = fs.existsSync(ledgerFile) ? JSON.parse(fs.readFileSync(ledgerFile, 'utf8')) : { roots: {}, trees: {} };
    expect(ledgerAfter.roots).toEqual(ledgerBefore.roots);
    expect(ledgerAfter.trees).toEqual(ledgerBefore.trees);
  });

  it('a ledger write refused after a previous one leaves ledger.json byte-identical', async () => {
    const ok = await launchSingle();
    const ledgerFile = path.join(t.home, 'ledger.json');
    // The runner returns its slot just after it records the end: wait for both, so nothing else writes meanwhile.
    await until(() => ctx.store.readStatus(ok.runId)?.state === 'completed'
      && Object.keys(JSON.parse(fs.readFileSync(ledgerFile, 'utf8')).roots).length === 0, 20_000);
    const before = snapshot(ledgerFile);
    expect(before).not.toBeNull();
    for (const op of ['write', 'rename'] as const) {
      inject(op, 'ENOSPC', named('ledger.json'));
      await expect(launchSingle()).rejects.toThrow(/capacity ledger.*ENOSPC/);
      lift();
      expect(snapshot(ledgerFile)).toEqual(before);
    }
    expect(tempFiles(t.home)).toEqual([]);
  });

  describe('on a running chain', () => {
    let runId: string;
    beforeAll(async () => {
      runId = (await m.launch(ctx, { mode: 'chain', chain: [{ agent: 'sleeper', task: 'x' }] }, { signal: ac.signal })).runId;
      // The launch answers once the runner claimed its start; the step's own writes (agent slot, status, budget and
      // prompt files, each through a temp file) follow. Once the step's status and its ledger slot both name the
      // agent (written side by side) the runner writes nothing until the agent ends, so the temp-file checks below
      // see only what the appends leave.
      const statusFile = path.join(t.home, 'runs', runId, 'status.json');
      const slotNamesAgent = () => Object.entries(JSON.parse(fs.readFileSync(path.join(t.home, 'ledger.json'), 'utf8')).agents ?? {})
        .some(([key, slot]: [string, any]) => key.startsWith(`${runId}:`) && slot.agent != null);
      expect(await until(() => JSON.parse(fs.readFileSync(statusFile, 'utf8')).steps[0]?.process != null && slotNamesAgent(), 20_000)).toBe(true);
    });

    it('the first append: appends/ cannot be made (ENOSPC) → refused, nothing appended, fan-out claim returned', async () => {
      const tree = () => JSON.parse(fs.readFileSync(path.join(t.home, 'ledger.json'), 'utf8')).trees[runId];
      const usedBefore = tree().used;
      const appendsDir = path.join(t.home, 'runs', runId, 'appends');
      expect(fs.existsSync(appendsDir)).toBe(false); // made by a run's first append
      inject('mkdir', 'ENOSPC', (f) => f === appendsDir);
      const err: any = await m.appendStep(ctx, runId, { agent: 'echo', task: 'more' }).catch((e: unknown) => e);
      lift();
      expect(err?.name).toBe('SubagentError');
      expect(err.message).toMatch(/could not record the appended step \(ENOSPC\)/);
      expect(fs.existsSync(appendsDir)).toBe(false);
      expect(tree().used).toBe(usedBefore);
    });

    it.each(CODES.flatMap((code) => (['open', 'write', 'fsync', 'rename'] as Op[]).map((op) => [op, code] as const)))(
      'append: appends/NNNNNN.json fails at %s with %s → refused, nothing appended, fan-out claim returned', async (op, code) => {
        const tree = () => JSON.parse(fs.readFileSync(path.join(t.home, 'ledger.json'), 'utf8')).trees[runId];
        const usedBefore = tree().used;
        const appendsDir = path.join(t.home, 'runs', runId, 'appends');
        const appendFiles = () => (fs.existsSync(appendsDir) ? fs.readdirSync(appendsDir) : []); // made by the first append
        const filesBefore = appendFiles();
        inject(op, code, (f) => f.startsWith(appendsDir));
        const err: any = await m.appendStep(ctx, runId, { agent: 'echo', task: 'more' }).catch((e: unknown) => e);
        lift();
        expect(err?.name).toBe('SubagentError');
        expect(err.message).toMatch(new RegExp(`could not record the appended step \\(${code}\\)`));
        expect(appendFiles()).toEqual(filesBefore);
        expect(tree().used).toBe(usedBefore);
        expect(tempFiles(t.home)).toEqual([]);
      });

    it('append works again once the fault is lifted', async () => {
      const r = await m.appendStep(ctx, runId, { agent: 'echo', task: 'more' });
      expect(r.pendingAppends).toBe(1);
    });

    it.each(CODES.flatMap((code) => (['open', 'write', 'fsync', 'rename'] as Op[]).map((op) => [op, code] as const)))(
      'cancel: the request file refused at %s with %s → clear error, status.json unchanged, run still live', async (op, code) => {
      const statusFile = path.join(t.home, 'runs', runId, 'status.json');
      const before = snapshot(statusFile);
      inject(op, code, named('cancel-request.json'));
      const err: any = await m.cancelRun(ctx, runId).catch((e: unknown) => e);
      lift();
      expect(err?.message).toMatch(new RegExp(`could not write cancel-request\\.json of run ${runId} \\(${code}\\)`));
      expect(snapshot(statusFile)).toEqual(before);
      expect(ctx.store.readStatus(runId).state).toBe('running');
      expect(tempFiles(t.home)).toEqual([]);
    });
  });

  // Each on a run of its own: the fault hits the status write that records a dead runner's run as lost.
  it.each([['write', 'EROFS'], ['fsync', 'EIO'], ['rename', 'ENOSPC'], ['rename', 'EACCES']] as const)(
    'reconcile: status.json refused at %s (%s) after the runner died → file unchanged, next pass ends the run', async (op, code) => {
      const { runId } = await launchSingle('sleeper');
      const statusFile = path.join(t.home, 'runs', runId, 'status.json');
      const { pid: runner, startTime } = ctx.store.readStatus(runId).runner as { pid: number; startTime: string };
      process.kill(runner, 'SIGKILL');
      expect(await until(() => !pidAlive(runner), 5000)).toBe(true);
      // Killed at any moment, the runner may have been writing a file (here planted so that every case has them): its
      // step's prompt, whose temp goes with the pass that finds it gone even when that pass's end write fails; or the
      // ledger, inside its section: the lock it left names it, and whoever takes the ledger next (this pass, returning
      // the run's capacity) clears that lock and the temp with it.
      const prompts = path.join(t.home, 'runs', runId, 'prompts');
      fs.mkdirSync(prompts, { recursive: true });
      fs.writeFileSync(path.join(prompts, `.0.system.md.${runner}.7fb377e.tmp`), 'half');
      const ledgerLock = path.join(t.home, 'ledger.json.lock');
      fs.mkdirSync(ledgerLock);
      fs.symlinkSync(JSON.stringify({ pid: runner, startTime, host: os.hostname() }), path.join(ledgerLock, 'holder-killed-runner'));
      fs.writeFileSync(path.join(t.home, `.ledger.json.${runner}.3a.tmp`), 'half');
      const before = snapshot(statusFile);
      inject(op, code, named('status.json', runId));
      const seen = await m.freshStatus(ctx, runId).catch((e: unknown) => e);
      lift();
      expect(snapshot(statusFile)).toEqual(before);
      expect(seen.state ?? seen.code).toBe('running'); // not ended yet: the write did not happen
      expect(tempFiles(t.home)).toEqual([]);
      expect(fs.existsSync(ledgerLock)).toBe(false);
      const after = await m.freshStatus(ctx, runId);
      expect(after.state).toBe('failed');
      expect(after.error.code).toBe('RUNNER_LOST');
    });

  it.each(CODES.flatMap((code) => (['open', 'write', 'fsync', 'rename'] as Op[]).map((op) => [op, code] as const)))(
    'restore: the session registry write refused at %s with %s → clear error, registry file unchanged', async (op, code) => {
    const other = m.buildContext(m.loadSettings({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root }, {}, t.root), {}, () => null);
    await other.sessions.register(null);
    const mine = path.join(t.home, 'sessions', `${encodeURIComponent(ctx.sessionId)}.json`);
    await sessions.register(null);
    const before = snapshot(mine);
    const linksOf = (id: string) => { try { return fs.readdirSync(path.join(t.home, 'lineage', id)).sort(); } catch { return []; } };
    const linksBefore = linksOf(ctx.sessionId);
    inject(op, code, (f) => f.includes(`${path.sep}sessions${path.sep}`));
    const err: any = await m.restore(ctx, sessions, [other.ctx.sessionId]).catch((e: unknown) => e);
    lift();
    expect(err?.name).toBe('SubagentError');
    expect(err.message).toMatch(new RegExp(`could not write the session registry .*\\(${code}\\)`));
    expect(snapshot(mine)).toEqual(before);
    expect(tempFiles(t.home)).toEqual([]);
    // Nor does a link file of the refused restore outlive it.
    expect(linksOf(ctx.sessionId)).toEqual(linksBefore);
    const ok = await m.restore(ctx, sessions, [other.ctx.sessionId]);
    expect(ok.lineage).toContain(other.ctx.sessionId);
  });
});
