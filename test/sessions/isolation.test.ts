import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sc, textOf, waitTerminal, type Started } from '../helpers/server.js';
import { fakeRunId, launchOk, rejection, sessionIdOf, world, type World } from './session-helpers.js';

/**
 * SPEC §4.8 isolation: a session that did not launch or adopt a run cannot see, read, append to, cancel or dismiss it,
 * whatever id it guesses or copies; every answer is the one a run that does not exist gets.
 */
describe('isolation between unrelated sessions', () => {
  let w: World;
  let owner: Started;
  let other: Started;
  let active: string;
  let done: string;
  const missing = fakeRunId();

  beforeAll(async () => {
    w = world();
    owner = await w.start();
    active = (await launchOk(owner, { agent: 'gate', task: 'secret task text', label: 'private' })).runId;
    done = (await launchOk(owner, { chain: [{ agent: 'echo', task: 'finished private output' }] })).runId;
    await waitTerminal(owner, done);
    other = await w.start();
  });
  afterAll(async () => { await w.cleanup(); });

  /** The other session's answer for `runId`, with the id replaced: must equal the answer for a run that does not exist. */
  const same = (forRun: string, forMissing: string, runId: string) => expect(forRun).toBe(forMissing.split(missing).join(runId));

  it('every tool answers RUN_NOT_FOUND with the text of a nonexistent run', async () => {
    const calls: Array<[string, (id: string) => Record<string, unknown>]> = [
      ['status', (id) => ({ runId: id })],
      ['status', (id) => ({ runId: id, waitMs: 500 })],
      ['status', (id) => ({ runId: id, waitMs: 500, until: 'terminal' })],
      ['append', (id) => ({ runId: id, step: { agent: 'echo', task: 'injected' } })],
      ['cancel', (id) => ({ runId: id })],
      ['dismiss', (id) => ({ runId: id })],
      ['dismiss', (id) => ({ runId: id, cancel: true })],
    ];
    for (const [tool, args] of calls) {
      const miss = await other.call(tool, args(missing));
      expect(miss.isError, `${tool} on a missing run`).toBe(true);
      expect(textOf(miss)).toMatch(/^RUN_NOT_FOUND: /);
      for (const id of [active, done]) {
        const r = await other.call(tool, args(id));
        expect(r.isError, `${tool} on another session's run`).toBe(true);
        expect(r.structuredContent).toBeUndefined();
        same(textOf(r), textOf(miss), id);
        expect(textOf(r)).not.toContain('secret');
      }
    }
    // Nothing happened to the owner's runs.
    const still = sc(await owner.call('status', { runId: active }));
    expect(still).toMatchObject({ state: 'running', dismissed: false, pendingAppends: 0 });
    expect(sc(await owner.call('status', { runId: done }))).toMatchObject({ state: 'completed', dismissed: false });
  });

  it('resources: read and subscribe give the not-found error; list and completion do not offer them', async () => {
    const suffixes = ['', '/output', '/events', '/steps/0/output', '/output?offset=0&length=10'];
    for (const suffix of suffixes) {
      const missMsg = await rejection(other.client.readResource({ uri: `subagents://runs/${missing}${suffix}` }));
      expect(missMsg).toMatch(/not found/i);
      for (const id of [active, done]) {
        const msg = await rejection(other.client.readResource({ uri: `subagents://runs/${id}${suffix}` }));
        same(msg, missMsg, id);
      }
    }
    // The not-found error is JSON-RPC -32602 (InvalidParams), as SEP-2164 standardised and the TypeScript SDK answers.
    const err = await other.client.readResource({ uri: `subagents://runs/${active}` }).then(() => null, (e: { code?: number }) => e);
    expect(err?.code).toBe(-32602);
    const subMiss = await rejection(other.client.subscribeResource({ uri: `subagents://runs/${missing}` }));
    same(await rejection(other.client.subscribeResource({ uri: `subagents://runs/${active}` })), subMiss, active);
    // Malformed and path-like ids are refused the same way, without touching the file system.
    for (const uri of ['subagents://runs/../../etc/passwd', 'subagents://runs/%E0%A4%A', 'subagents://runs/r-x/steps/0/output']) {
      expect(await rejection(other.client.readResource({ uri }))).toMatch(/not found/i);
    }

    const listed = await other.client.listResources();
    expect(listed.resources).toEqual([]);
    const completion = await other.client.complete({ ref: { type: 'ref/resource', uri: 'subagents://runs/{runId}' }, argument: { name: 'runId', value: 'r-' } });
    expect(completion.completion.values).toEqual([]);
    const steps = await other.client.complete({
      ref: { type: 'ref/resource', uri: 'subagents://runs/{runId}/steps/{index}/output' }, argument: { name: 'index', value: '' },
      context: { arguments: { runId: active } },
    });
    expect(steps.completion.values).toEqual([]);
    for (const q of [{}, { all: true }]) expect(sc(await other.call('status', q)).runs).toEqual([]);

    // The owner sees them everywhere.
    const mine = await owner.client.listResources();
    expect(mine.resources.map((r) => r.uri).sort()).toEqual([`subagents://runs/${active}`, `subagents://runs/${done}`].sort());
    const c = await owner.client.complete({ ref: { type: 'ref/resource', uri: 'subagents://runs/{runId}' }, argument: { name: 'runId', value: 'r-' } });
    expect(c.completion.values.sort()).toEqual([active, done].sort());
  });

  it('restore with a guessed or unknown session id adopts nothing', async () => {
    const r = sc(await other.call('restore', { lineage: [`s-${'A'.repeat(24)}`, active] }));
    expect(r.adopted).toBe(0);
    expect(r.unknown.length).toBe(2);
    expect(r.runs).toEqual([]);
    expect(textOf(await other.call('status', { runId: active }))).toMatch(/^RUN_NOT_FOUND: /);
    // The owner's session id is the capability: with it, the runs are adopted (the designed way in).
    const ownerSession = await sessionIdOf(owner);
    const ok = sc(await other.call('restore', { lineage: [ownerSession] }));
    expect(ok.adopted).toBe(2);
  });
});
