import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { LoggingMessageNotificationSchema, ResourceListChangedNotificationSchema, ResourceUpdatedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { sc, textOf, type Started } from '../helpers/server.js';
import { launchOk, release, world, type World } from '../sessions/session-helpers.js';

/** Collects a client's resource-updated and log notifications, and lets a test await the next matching one. */
function listen(s: Started) {
  const updates: string[] = [];
  const logs: Array<{ level: string; data: unknown }> = [];
  let listChanged = 0;
  let wake: (() => void) | null = null;
  s.client.setNotificationHandler(ResourceListChangedNotificationSchema, () => { listChanged++; wake?.(); });
  s.client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => { updates.push(n.params.uri); wake?.(); });
  s.client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => { logs.push({ level: n.params.level, data: n.params.data }); wake?.(); });
  /** Resolves once `cond` holds, re-checked on every notification (bounded: a hang fails the test). */
  const until = async (what: string, cond: () => boolean | Promise<boolean>, maxMs = 30_000): Promise<void> => {
    const end = Date.now() + maxMs;
    while (!(await cond())) {
      if (Date.now() > end) throw new Error(`no notification for: ${what} (updates ${JSON.stringify(updates)}, logs ${JSON.stringify(logs)})`);
      await new Promise<void>((r) => { wake = r; setTimeout(r, 1000); });
      wake = null;
    }
  };
  return { updates, logs, until, listChanged: () => listChanged };
}

async function readJson(s: Started, uri: string): Promise<Record<string, any>> {
  const r = await s.client.readResource({ uri });
  return JSON.parse((r.contents[0] as { text: string }).text);
}

describe('resource subscriptions and run-end messages', () => {
  let w: World;
  afterEach(async () => { await w.cleanup(); });

  it('a subscribed run is updated on each state change, by its runner and by another server process; its end is logged', async () => {
    w = world({ gates: ['gate', 'gate2', 'gate3'] });
    const a = await w.start();
    const l = listen(a);
    const run = await launchOk(a, { chain: [{ agent: 'gate', task: 'one' }, { agent: 'gate2', task: 'two after {previous}' }] });
    const uri = `subagents://runs/${run.runId}`;
    await a.client.subscribeResource({ uri });
    await a.client.subscribeResource({ uri: `${uri}/output` });
    const updatesOf = (u: string) => l.updates.filter((x) => x === u).length;
    await l.until('list changed after launch', () => l.listChanged() > 0);

    // Runner-made changes: step 0 ends and step 1 starts.
    let seen = updatesOf(uri);
    release(w.gates.gate!);
    await l.until('step 0 completed', async () => updatesOf(uri) > seen && (await readJson(a, uri)).steps[0].state === 'completed');

    // A change made by another server process: B adopts the run and appends a step.
    const b = await w.start();
    expect(sc(await b.call('restore', { lineage: [run.sessionId] })).adopted).toBe(1);
    seen = updatesOf(uri);
    const ap = await b.call('append', { runId: run.runId, step: { agent: 'echo', task: 'three' } });
    expect(ap.isError, textOf(ap)).toBeFalsy();
    await l.until('append from another process', async () => updatesOf(uri) > seen && (await readJson(a, uri)).pendingAppends + (await readJson(a, uri)).steps.length >= 3);

    seen = updatesOf(uri);
    const outSeen = updatesOf(`${uri}/output`);
    release(w.gates.gate2!);
    await l.until('run completed', async () => updatesOf(uri) > seen && (await readJson(a, uri)).state === 'completed');
    await l.until('output updated', () => updatesOf(`${uri}/output`) > outSeen);
    const fin = await readJson(a, uri);
    expect(fin.steps.map((x: any) => x.state)).toEqual(['completed', 'completed', 'completed']);
    await l.until('end logged', () => l.logs.some((m) => String(m.data).includes(`run ${run.runId} completed`)));
    expect(l.logs.find((m) => String(m.data).includes(run.runId))!.level).toBe('info');

    // Cancelled by another process: the owner hears of it too.
    const run2 = await launchOk(a, { agent: 'gate3', task: 'to be cancelled elsewhere' });
    await a.client.subscribeResource({ uri: `subagents://runs/${run2.runId}` });
    const c = await b.call('cancel', { runId: run2.runId });
    expect(sc(c).state).toBe('cancelled');
    await l.until('cancel from another process', async () => l.updates.includes(`subagents://runs/${run2.runId}`)
      && (await readJson(a, `subagents://runs/${run2.runId}`)).state === 'cancelled');
    await l.until('cancel logged', () => l.logs.some((m) => String(m.data) === `run ${run2.runId} cancelled`));
    // Each ended run is announced once; the adopting server B announces runs of its lineage as well, A's are A's.
    expect(l.logs.filter((m) => String(m.data).includes(run.runId)).length).toBe(1);
    // Unsubscribed: no more updates for that URI.
    await a.client.unsubscribeResource({ uri });
  });

  it('list changes: a dismiss here, and one by another process (no change in runs/: the audit of every run sees it), are announced', async () => {
    w = world();
    const a = await w.start();
    const l = listen(a);
    const one = await launchOk(a, { agent: 'echo', task: 'one' });
    const two = await launchOk(a, { agent: 'echo', task: 'two' });
    for (const r of [one, two]) expect(sc(await a.call('status', { runId: r.runId, waitMs: 20_000, until: 'terminal' })).state).toBe('completed');
    await l.until('list changed after the launches', () => l.listChanged() > 0);
    await a.client.ping();
    const listed = async () => (await a.client.listResources()).resources.map((r) => r.uri).filter((u) => u.startsWith('subagents://runs/'));
    let seen = l.listChanged();
    expect(sc(await a.call('dismiss', { runId: one.runId })).dismissed).toBe(true);
    await l.until('list changed after a dismiss here', () => l.listChanged() > seen);
    expect(await listed()).not.toContain(`subagents://runs/${one.runId}`);
    // Another server process of the lineage dismisses the other run: nothing in runs/ changes, the audit sees it.
    const b = await w.start();
    expect(sc(await b.call('restore', { lineage: [one.sessionId] })).adopted).toBeGreaterThan(0);
    seen = l.listChanged();
    expect(sc(await b.call('dismiss', { runId: two.runId })).dismissed).toBe(true);
    await l.until('list changed after a dismiss elsewhere', () => l.listChanged() > seen, 30_000);
    expect(await listed()).not.toContain(`subagents://runs/${two.runId}`);
  });

  it('listings take long-ended runs by one look at their directory: a dismissal elsewhere and a removal still show', async () => {
    w = world();
    const a = await w.start();
    const l = listen(a);
    const runs = [];
    for (const task of ['one', 'two', 'three']) runs.push(await launchOk(a, { agent: 'echo', task }));
    for (const r of runs) expect(sc(await a.call('status', { runId: r.runId, waitMs: 20_000, until: 'terminal' })).state).toBe('completed');
    const [one, two, three] = runs as [typeof runs[0], typeof runs[0], typeof runs[0]];
    const listed = async () => (await a.client.listResources()).resources.map((r) => r.uri);
    const dirOf = (runId: string) => path.join(w.t.home, 'runs', runId);
    // Ended an hour ago, as far as their directories say: their signatures are old enough to be trusted.
    const hourAgo = new Date(Date.now() - 3600_000);
    for (const r of runs) fs.utimesSync(dirOf(r.runId), hourAgo, hourAgo);
    // A dismissal here brings an audit, which records those signatures.
    let seen = l.listChanged();
    expect(sc(await a.call('dismiss', { runId: one.runId })).dismissed).toBe(true);
    await l.until('list changed after a dismiss here', () => l.listChanged() > seen);
    // Another process dismisses `two`: only its directory changes (a file made in it).
    const b = await w.start();
    expect(sc(await b.call('restore', { lineage: [one.sessionId] })).adopted).toBeGreaterThan(0);
    for (const r of runs) fs.utimesSync(dirOf(r.runId), hourAgo, hourAgo); // undo the adoption marker's change
    await a.client.ping();
    seen = l.listChanged();
    expect(sc(await b.call('dismiss', { runId: two.runId })).dismissed).toBe(true);
    // A's own listing looks at the changed directory at once, whatever its watcher has seen.
    const ids = (r: { runs: Array<{ runId: string; dismissed: boolean }> }) => r.runs.filter((x) => !x.dismissed).map((x) => x.runId);
    expect(ids(sc(await a.call('status', {})))).toEqual([three.runId]);
    expect(sc(await a.call('status', { all: true })).runs.find((x: { runId: string }) => x.runId === two.runId).dismissed).toBe(true);
    await l.until('list changed after a dismiss elsewhere', () => l.listChanged() > seen, 30_000);
    expect(await listed()).not.toContain(`subagents://runs/${two.runId}`);
    expect(await listed()).toContain(`subagents://runs/${three.runId}`);
    // `three` is removed from disk (as gc would): the audit finds its directory gone.
    seen = l.listChanged();
    fs.rmSync(dirOf(three.runId), { recursive: true, force: true });
    await l.until('list changed after a removal', () => l.listChanged() > seen, 30_000);
    expect(await listed()).not.toContain(`subagents://runs/${three.runId}`);
  });

  it('logging/setLevel warning suppresses the run-end message; resources/updated still arrives', async () => {
    w = world();
    const a = await w.start();
    const l = listen(a);
    await a.client.setLoggingLevel('warning');
    const run = await launchOk(a, { agent: 'gate', task: 'quiet' });
    const uri = `subagents://runs/${run.runId}`;
    await a.client.subscribeResource({ uri });
    release(w.gates.gate!);
    await l.until('terminal update', async () => l.updates.includes(uri) && (await readJson(a, uri)).state === 'completed');
    // The message would have been queued with the terminal update, before this round trip's answer.
    await a.client.ping();
    expect(l.logs).toEqual([]);
    // Restoring a finished run into a new session does not announce its (old) end.
    const b = await w.start();
    const lb = listen(b);
    expect(sc(await b.call('restore', { lineage: [run.sessionId] })).adopted).toBe(1);
    // The scan that announces the new list entry would also have sent the (spurious) end message, before it.
    await lb.until('list changed after restore', () => lb.listChanged() > 0);
    await b.client.ping();
    expect(lb.logs).toEqual([]);
  });
});
