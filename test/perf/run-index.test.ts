import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { loadSettings } from '../../src/config.js';
import { listingTiming, listVisibleRuns } from '../../src/manager/listing.js';
import { buildContext } from '../../src/mcp/core.js';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { sc, startServer, waitTerminal, type Started } from '../helpers/server.js';

const SID_A = 'session-a-0123456789abcdef';
const SID_B = 'session-b-0123456789abcdef';

/** The run index (listings read it instead of every run directory) keeps listings exactly what they were. */
describe('run index', () => {
  let t: ReturnType<typeof tempStateHome>;
  const servers: Started[] = [];
  const start = async (sid: string) => {
    const s = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_SESSION_ID: sid });
    servers.push(s);
    return s;
  };
  afterEach(async () => {
    for (const s of servers.splice(0)) await s.close();
    t.cleanup();
  });

  it('lists a session\'s runs from its index, other sessions\' never; a lost index is rebuilt from the run directories', async () => {
    t = tempStateHome();
    writeAgent(path.join(t.home, 'agents'), 'instant', { backend: 'command', command: ['true'] });
    const a = await start(SID_A);
    const b = await start(SID_B);
    const ra = sc(await a.call('launch', { agent: 'instant', task: 'x' })).runId as string;
    const rb = sc(await b.call('launch', { agent: 'instant', task: 'y' })).runId as string;
    await waitTerminal(a, ra);
    await waitTerminal(b, rb);
    const indexA = fs.readFileSync(path.join(t.home, 'index', `${SID_A}.runs`), 'utf8');
    expect(indexA.split('\n')).toContain(ra);
    expect(indexA).not.toContain(rb);
    expect(sc(await a.call('status', {})).runs.map((r: { runId: string }) => r.runId)).toEqual([ra]);
    expect(sc(await b.call('status', {})).runs.map((r: { runId: string }) => r.runId)).toEqual([rb]);
    for (const s of servers.splice(0)) await s.close();

    // An index removed (or a home from before the index): the next server rebuilds it from run.json of every run.
    fs.rmSync(path.join(t.home, 'index'), { recursive: true, force: true });
    const a2 = await start(SID_A);
    expect(sc(await a2.call('status', {})).runs.map((r: { runId: string }) => r.runId)).toEqual([ra]);
    expect(fs.existsSync(path.join(t.home, 'index', 'complete'))).toBe(true);
    expect(fs.readFileSync(path.join(t.home, 'index', `${SID_B}.runs`), 'utf8').split('\n')).toContain(rb);
    // A run removed from disk (gc) is no longer listed though its id stays in the index.
    fs.rmSync(path.join(t.home, 'runs', ra), { recursive: true, force: true });
    expect(sc(await a2.call('status', {})).runs).toEqual([]);
  });

  it('the check of unchanged run directories one process keeps is its session\'s: another session\'s context there sees none of them', async () => {
    t = tempStateHome();
    writeAgent(path.join(t.home, 'agents'), 'instant', { backend: 'command', command: ['true'] });
    const a = await start(SID_A);
    const ctxOf = (sid: string) => buildContext(loadSettings({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_SESSION_ID: sid }), {}, () => null).ctx;
    const ctxA = ctxOf(SID_A);
    const ctxB = ctxOf(SID_B);
    const ids = (ctx: ReturnType<typeof ctxOf>) => listVisibleRuns(ctx).map((r) => r.meta.runId);
    // Both look first: the run made next is one that appeared in runs/ while this process lives, which every
    // listing of the process considers (and then decides on by its own session).
    expect(ids(ctxA)).toEqual([]);
    expect(ids(ctxB)).toEqual([]);
    const ra = sc(await a.call('launch', { agent: 'instant', task: 'x' })).runId as string;
    await waitTerminal(a, ra);
    // Old enough that its directory's signature is kept; no delay between two reads of runs/ (this process only).
    const hourAgo = new Date(Date.now() - 3600_000);
    fs.utimesSync(path.join(t.home, 'runs', ra), hourAgo, hourAgo);
    const rescanMs = listingTiming.appearedRescanMs;
    listingTiming.appearedRescanMs = 0;
    try {
      expect(ids(ctxA)).toEqual([ra]);
      expect(ids(ctxA)).toEqual([ra]); // now from what it kept
      expect(ids(ctxB)).toEqual([]);
    } finally {
      listingTiming.appearedRescanMs = rescanMs;
    }
  });

  it('lists a run directory that appears without an index line (copied in, or an older version\'s) once runs/ is re-read', async () => {
    t = tempStateHome();
    writeAgent(path.join(t.home, 'agents'), 'instant', { backend: 'command', command: ['true'] });
    const a = await start(SID_A);
    const ra = sc(await a.call('launch', { agent: 'instant', task: 'x' })).runId as string;
    await waitTerminal(a, ra);
    // A copy of its record and status under a new id (what a listing reads; the runner may still be tidying the rest
    // of its directory), renamed in whole and indexed nowhere.
    const copy = `r-${'c'.repeat(24)}`;
    const tmp = path.join(t.base, copy);
    fs.mkdirSync(tmp, { mode: 0o700 });
    for (const name of ['run.json', 'status.json']) {
      const was = JSON.parse(fs.readFileSync(path.join(t.home, 'runs', ra, name), 'utf8'));
      fs.writeFileSync(path.join(tmp, name), JSON.stringify({ ...was, runId: copy, ...(name === 'run.json' ? { rootRunId: copy } : {}) }));
    }
    fs.renameSync(tmp, path.join(t.home, 'runs', copy));
    expect(fs.readFileSync(path.join(t.home, 'index', `${SID_A}.runs`), 'utf8')).not.toContain(copy);
    // runs/ is re-read at most every 2 s (every launch changes it, and a home may hold 10 000 runs): poll for it.
    let ids: string[] = [];
    for (let i = 0; i < 100 && !ids.includes(copy); i++) {
      ids = sc(await a.call('status', {})).runs.map((r: { runId: string }) => r.runId);
      if (!ids.includes(copy)) await new Promise((r) => setTimeout(r, 100));
    }
    expect(ids).toEqual(expect.arrayContaining([ra, copy]));
  });
});
