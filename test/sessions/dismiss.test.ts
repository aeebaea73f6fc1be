import { afterEach, describe, expect, it } from 'vitest';
import { sc, textOf, waitTerminal } from '../helpers/server.js';
import { launchOk, release, world, type World } from './session-helpers.js';

describe('dismiss', () => {
  let w: World;
  afterEach(async () => { await w.cleanup(); });

  it('refuses an active run without cancel, never frees capacity, cancels with cancel: true', async () => {
    w = world({ env: { SUBAGENTS_MAX_ACTIVE_RUNS: '1' } });
    const s = await w.start();
    const run = await launchOk(s, { agent: 'gate', task: 'hold the only slot' });
    const refused = await s.call('dismiss', { runId: run.runId });
    expect(refused.isError).toBe(true);
    expect(textOf(refused)).toMatch(/^RUN_ACTIVE: .*cancel: true/);
    // The refusal left it listed, and it still holds the only slot.
    expect(sc(await s.call('status', {})).runs.map((r: any) => r.runId)).toEqual([run.runId]);
    const full = await s.call('launch', { agent: 'echo', task: 'no room', queue: false });
    expect(textOf(full)).toMatch(/^CAPACITY_EXHAUSTED: /);
    expect(textOf(full)).toContain(run.runId);

    const d = await s.call('dismiss', { runId: run.runId, cancel: true });
    expect(d.isError).toBeFalsy();
    expect(sc(d)).toEqual({ sessionId: run.sessionId, runId: run.runId, state: 'cancelled', dismissed: true, cancelled: true });
    // Cancelling freed the slot (the run ended); dismissing alone would not have.
    const next = await launchOk(s, { agent: 'echo', task: 'room again' });
    await waitTerminal(s, next.runId);
    const again = sc(await s.call('dismiss', { runId: run.runId, cancel: true }));
    expect(again).toEqual({ sessionId: run.sessionId, runId: run.runId, state: 'cancelled', dismissed: true, cancelled: false });
  });

  it('hides a finished run from listings, idempotently; it stays readable by id and listed with all: true', async () => {
    w = world();
    const s = await w.start();
    const keep = await launchOk(s, { agent: 'echo', task: 'kept' });
    const gone = await launchOk(s, { agent: 'echo', task: 'dismissed output' });
    await waitTerminal(s, keep.runId);
    await waitTerminal(s, gone.runId);
    const d1 = sc(await s.call('dismiss', { runId: gone.runId }));
    expect(d1).toEqual({ sessionId: gone.sessionId, runId: gone.runId, state: 'completed', dismissed: true, cancelled: false });
    const d2 = sc(await s.call('dismiss', { runId: gone.runId }));
    expect(d2).toEqual(d1);

    const list = sc(await s.call('status', {}));
    expect(list.runs.map((r: any) => r.runId)).toEqual([keep.runId]);
    const all = sc(await s.call('status', { all: true }));
    expect(all.runs.map((r: any) => [r.runId, r.dismissed])).toEqual([[gone.runId, true], [keep.runId, false]]);
    const byId = sc(await s.call('status', { runId: gone.runId }));
    expect(byId).toMatchObject({ state: 'completed', dismissed: true });
    expect(byId.output.text).toBe('dismissed output');

    const res = await s.client.listResources();
    expect(res.resources.map((r) => r.name)).toEqual([keep.runId]);
    const out = await s.client.readResource({ uri: `subagents://runs/${gone.runId}/output` });
    expect((out.contents[0] as { text: string }).text).toBe('dismissed output');
    // A dismissed run is not adopted by a later session.
    const b = await w.start();
    const r = sc(await b.call('restore', { lineage: [gone.sessionId] }));
    expect(r.runs.map((x: any) => x.runId)).toEqual([keep.runId]);
    expect(r.adopted).toBe(1);
    release(w.gates.gate!);
  });
});
