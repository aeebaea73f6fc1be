import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { isSubagentError } from '../../src/errors.js';
import { newRunId } from '../../src/ids.js';
import { appendEvent, readEvents } from '../../src/store/event-log.js';
import { readJsonFile, readTextNoFollow } from '../../src/store/json-file.js';
import { Layout } from '../../src/store/layout.js';
import { withLock } from '../../src/store/lock.js';
import { REPO } from '../helpers/paths.js';
import { FileRunStore } from '../../src/store/run-store.js';
import type { RunRecord, RunStatus } from '../../src/store/run-types.js';
import { checkStateHome, openStateHome } from '../../src/store/state-home.js';

let dir: string;
beforeEach(() => { dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'sa-store-'))); });
afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

describe('json files', () => {
  it('a missing file is null; a garbled one is STATE_CORRUPT naming the file, never quoting it', () => {
    const f = path.join(dir, 'status.json');
    expect(readJsonFile(f)).toBeNull();
    fs.writeFileSync(f, '{"state":"run');
    let err: unknown;
    try { readJsonFile(f, 'status.json of r-x'); } catch (e) { err = e; }
    expect(isSubagentError(err, 'STATE_CORRUPT')).toBe(true);
    expect((err as Error).message).toContain('status.json of r-x');
    expect((err as Error).message).toContain('13 bytes');
    expect((err as Error).message).not.toContain('"state"');
  });

  it('a symlink is never read through (STATE_CORRUPT), and the target stays unread', () => {
    const secret = path.join(dir, 'elsewhere.json');
    fs.writeFileSync(secret, '{"secret":true}');
    const f = path.join(dir, 'run.json');
    fs.symlinkSync(secret, f);
    expect(() => readTextNoFollow(f)).toThrow(/symlink/);
    let err: unknown;
    try { readJsonFile(f); } catch (e) { err = e; }
    expect(isSubagentError(err, 'STATE_CORRUPT')).toBe(true);
  });
});

describe('event log', () => {
  it('appends JSON lines (0600) and readers skip torn, garbled and non-object lines, counting them', () => {
    const f = path.join(dir, 'events.jsonl');
    appendEvent(f, { type: 'created' });
    fs.appendFileSync(f, '{"type":"torn","x":\n');
    fs.appendFileSync(f, 'garbage\n[1,2]\n42\n\n');
    appendEvent(f, { type: 'ended', state: 'completed' });
    fs.appendFileSync(f, '{"type":"half');
    const { events, skipped } = readEvents(f);
    expect(events.map((e) => e.type)).toEqual(['created', 'ended']);
    expect(events[1]).toMatchObject({ state: 'completed' });
    expect(typeof events[0]!.ts).toBe('string');
    expect(skipped).toBe(5);
    expect(fs.statSync(f).mode & 0o777).toBe(0o600);
  });

  it('an absent log reads as empty; appending through a symlink is refused', () => {
    expect(readEvents(path.join(dir, 'none.jsonl'))).toEqual({ events: [], skipped: 0 });
    const target = path.join(dir, 'victim');
    fs.writeFileSync(target, '');
    fs.symlinkSync(target, path.join(dir, 'events.jsonl'));
    expect(() => appendEvent(path.join(dir, 'events.jsonl'), { type: 'x' })).toThrow();
    expect(fs.readFileSync(target, 'utf8')).toBe('');
  });
});

describe('run store: status compare-and-set', () => {
  async function makeRun(store: FileRunStore): Promise<string> {
    const runId = newRunId();
    const record = { v: 1, runId, steps: [], mode: 'single' } as unknown as RunRecord;
    const status: RunStatus = {
      v: 1, runId, state: 'running', error: null, startedAt: null, endedAt: null, updatedAt: new Date().toISOString(),
      runner: null, steps: [], appendsTaken: 0, survivors: [],
    };
    await (await store.publish(store.prepare(record, status))).durable;
    return runId;
  }

  it('a run\'s first log line is written as it is published: its time is when the run appears, not when it was prepared', async () => {
    openStateHome(path.join(dir, 'home'));
    const store = new FileRunStore(new Layout(path.join(dir, 'home')));
    const runId = newRunId();
    const record = { v: 1, runId, steps: [], mode: 'single' } as unknown as RunRecord;
    const status: RunStatus = {
      v: 1, runId, state: 'running', error: null, startedAt: null, endedAt: null, updatedAt: new Date().toISOString(),
      runner: null, steps: [], appendsTaken: 0, survivors: [],
    };
    const prepared = store.prepare(record, status);
    // A launch's publish waits for its reservation and fsyncs (seconds under load): a watcher that shows lines in time
    // order must not find the run later with a first line timed before lines it has shown meanwhile.
    let published = 0;
    const gate = new Promise((r) => setTimeout(r, 300)).then(() => { published = Date.now(); });
    await (await store.publish(prepared, gate)).durable;
    const [first] = readEvents(store.paths(runId).events).events;
    expect(first).toMatchObject({ type: 'created', mode: 'single', steps: 0 });
    expect(Date.parse(first!.ts)).toBeGreaterThanOrEqual(published);
  });

  it('the first terminal state wins; later writers get the stored one back and the file never changes again', async () => {
    openStateHome(path.join(dir, 'home'));
    const store = new FileRunStore(new Layout(path.join(dir, 'home')));
    const runId = await makeRun(store);
    const done = await store.update(runId, (s) => ({ ...s, state: 'completed', endedAt: 'then' }));
    expect(done.state).toBe('completed');
    const before = fs.readFileSync(store.paths(runId).status, 'utf8');
    let called = false;
    const again = await store.update(runId, (s) => { called = true; return { ...s, state: 'failed' }; });
    expect(called).toBe(false);
    expect(again.state).toBe('completed');
    expect(fs.readFileSync(store.paths(runId).status, 'utf8')).toBe(before);
  });

  it('a damaged status.json is STATE_CORRUPT for that run only', async () => {
    openStateHome(path.join(dir, 'home'));
    const store = new FileRunStore(new Layout(path.join(dir, 'home')));
    const bad = await makeRun(store);
    const good = await makeRun(store);
    fs.writeFileSync(store.paths(bad).status, '{"v":1,"sta');
    expect(() => store.readStatus(bad)).toThrow(/does not parse/);
    await expect(store.update(bad, (s) => s)).rejects.toMatchObject({ code: 'STATE_CORRUPT' });
    expect(store.readStatus(good)!.state).toBe('running');
  });

  it('run ids that are not ids never become paths', () => {
    const layout = new Layout(path.join(dir, 'home'));
    for (const id of ['../../x', 'r-../../etc', '', `r-${'A'.repeat(23)}/`]) expect(() => layout.runDir(id), id).toThrow(/invalid run id/);
    expect(new FileRunStore(layout).exists('../../x')).toBe(false);
  });
});

describe('state home', () => {
  it('is created 0700 with its private subdirectories', () => {
    const home = path.join(dir, 'a', 'b', 'home');
    openStateHome(home);
    expect(fs.statSync(home).mode & 0o777).toBe(0o700);
    for (const sub of ['runs', 'agents', 'locks']) expect(fs.statSync(path.join(home, sub)).mode & 0o777, sub).toBe(0o700);
  });

  it('returns the names it read in runs/, after removing the half-built run directory of a writer that is gone', () => {
    const home = path.join(dir, 'home');
    openStateHome(home);
    const runId = newRunId();
    fs.mkdirSync(path.join(home, 'runs', runId));
    // pid 2^22 + 1 is above Linux's pid_max: no process can hold it.
    const orphan = `.${newRunId()}.${2 ** 22 + 1}.0a1b.tmp`;
    fs.mkdirSync(path.join(home, 'runs', orphan));
    const { runs } = openStateHome(home);
    expect(runs!.names).toContain(runId);
    expect(fs.existsSync(path.join(home, 'runs', orphan))).toBe(false);
    expect(fs.existsSync(path.join(home, 'runs', runId))).toBe(true);
  });

  it('refuses a symlink, a file, and a group- or world-writable directory, with the fix in the message', () => {
    const real = path.join(dir, 'real');
    fs.mkdirSync(real, { mode: 0o700 });
    fs.symlinkSync(real, path.join(dir, 'link'));
    expect(() => openStateHome(path.join(dir, 'link'))).toThrow(/is a symlink/);
    fs.writeFileSync(path.join(dir, 'file'), '');
    expect(checkStateHome(path.join(dir, 'file')).problems.join()).toMatch(/not a directory/);
    const loose = path.join(dir, 'loose');
    fs.mkdirSync(loose);
    fs.chmodSync(loose, 0o775);
    expect(() => openStateHome(loose)).toThrow(`group- or world-writable (mode 775); run: chmod 700 ${loose}`);
    expect(fs.readdirSync(loose)).toEqual([]);
  });
});

describe('lock', () => {
  it('excludes a second holder, who gets BUSY after waiting its bound', async () => {
    const target = path.join(dir, 'ledger.json');
    let inner: unknown;
    await withLock(target, async () => {
      inner = await withLock(target, () => 'got it', { waitMs: 150, what: 'capacity ledger' }).catch((e: unknown) => e);
    });
    expect(isSubagentError(inner, 'BUSY')).toBe(true);
    expect((inner as Error).message).toMatch(/capacity ledger lock stayed held for 150 ms/);
    expect(await withLock(target, () => 'free again')).toBe('free again');
  });

  it('settleLocks (before exit) lets a held section finish and release, and a waiting one give up at once', () => {
    // In its own process: settling is for good (the process is about to exit).
    const target = path.join(dir, 'ledger.json');
    const script = `
      import { withLock, settleLocks } from ${JSON.stringify(path.join(REPO, 'dist', 'store', 'lock.js'))};
      const target = process.argv[1];
      let heldDone = false;
      const held = withLock(target, async () => { await new Promise((r) => setTimeout(r, 300)); heldDone = true; });
      await new Promise((r) => setTimeout(r, 50));
      const waiting = withLock(target, () => 'got it').catch((e) => e.code + ': ' + e.message);
      await settleLocks();
      process.stdout.write(JSON.stringify({ heldDone, waiting: await waiting, lockLeft: (await import('node:fs')).existsSync(target + '.lock') }));
      await held;
      process.exit(0);`;
    const out = execFileSync(process.execPath, ['--input-type=module', '-e', script, target], { encoding: 'utf8' });
    const r = JSON.parse(out);
    expect(r.heldDone).toBe(true);
    expect(r.waiting).toMatch(/^BUSY: this process is exiting/);
    expect(r.lockLeft).toBe(false);
    expect(fs.existsSync(`${target}.lock`)).toBe(false);
  });
});

