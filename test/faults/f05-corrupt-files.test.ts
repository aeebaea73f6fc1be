/**
 * F5 — torn and corrupt state files (SPEC §8.6). Real server over stdio, real runs; then files are damaged the way a
 * crash or a disk leaves them: a status.json cut mid-write, one that is empty / NUL-filled / valid JSON of the wrong
 * shape, garbage in the middle of an event log, an unparseable session registry file.
 * Expect: status by id answers STATE_CORRUPT naming the file — for that run only (a live run's runner, the status's
 * single writer, rewrites it from memory at its next write); listings still return every run
 * (the damaged one marked STATE_CORRUPT), the other runs stay readable and usable, the events resource skips the
 * garbled lines, restore still works over a damaged session file, and the server keeps serving new launches.
 * Skipping is not hiding: `doctor` lists a run whose event log has unparsable lines and a session registry file that
 * does not parse, each naming the file; `show` counts the skipped lines.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { sc, startServer, textOf, waitTerminal, type Started } from '../helpers/server.js';
import { cli } from '../cli/helpers.js';
import { FAKE, sleep } from './fault-helpers.js';

describe('F5 torn and corrupt state files', () => {
  let t: ReturnType<typeof tempStateHome>;
  let s: Started;
  let env: Record<string, string>;
  beforeEach(async () => {
    t = tempStateHome();
    writeAgent(path.join(t.home, 'agents'), 'echo', { backend: 'command', command: ['node', FAKE, 'echo'] });
    env = { SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root };
    s = await startServer(env);
  });
  afterEach(async () => {
    await s.close();
    t.cleanup();
  });

  const runFile = (runId: string, name: string) => path.join(t.home, 'runs', runId, name);

  it('a damaged status is STATE_CORRUPT for that run only; listings, other runs and new launches keep working', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 6; i++) {
      const r = await s.call('launch', { agent: 'echo', task: `task ${i}` });
      expect(r.isError, textOf(r)).toBeFalsy();
      ids.push(sc(r).runId);
    }
    for (const id of ids) expect((await waitTerminal(s, id)).state).toBe('completed');
    const [torn, empty, nul, shape, garbledEvents, fine] = ids as [string, string, string, string, string, string];

    const full = fs.readFileSync(runFile(torn, 'status.json'), 'utf8');
    fs.writeFileSync(runFile(torn, 'status.json'), full.slice(0, Math.floor(full.length / 2))); // cut mid-write
    fs.writeFileSync(runFile(empty, 'status.json'), '');
    fs.writeFileSync(runFile(nul, 'status.json'), Buffer.alloc(512)); // what some file systems leave after a crash
    fs.writeFileSync(runFile(shape, 'status.json'), JSON.stringify({ v: 1, hello: 'world' })); // parses, is not a status
    const ev = fs.readFileSync(runFile(garbledEvents, 'events.jsonl'), 'utf8').split('\n');
    ev.splice(1, 0, '\u0000\u0000{{{ garbage not json', '[1,2,3]', '{"torn":');
    fs.writeFileSync(runFile(garbledEvents, 'events.jsonl'), ev.join('\n'));

    for (const id of [torn, empty, nul, shape]) {
      const r = await s.call('status', { runId: id });
      expect(r.isError).toBe(true);
      expect(r.structuredContent).toBeUndefined();
      expect(textOf(r)).toMatch(/^STATE_CORRUPT: /);
      expect(textOf(r)).toContain(`status.json of ${id}`);
      expect(textOf(r)).not.toContain('hello'); // never quotes the contents
    }

    // Listing: every run is there, the damaged ones marked, the rest as they were.
    const list = await s.call('status', {});
    expect(list.isError, textOf(list)).toBeFalsy();
    const runs = sc(list).runs as Array<Record<string, any>>;
    expect(runs.map((r) => r.runId).sort()).toEqual([...ids].sort());
    for (const r of runs) {
      if ([torn, empty, nul, shape].includes(r.runId)) expect(r.error?.code).toBe('STATE_CORRUPT');
      else expect(r.state).toBe('completed');
    }
    // A list long-poll does not fail on them either.
    const waited = await s.call('status', { waitMs: 200 });
    expect(waited.isError, textOf(waited)).toBeFalsy();

    // The run with a garbled event log is fully usable: status, output, events (garbled lines skipped), dismiss.
    const g = sc(await s.call('status', { runId: garbledEvents }));
    expect(g.state).toBe('completed');
    expect(g.output.text).toBe('task 4');
    const events = await s.client.readResource({ uri: `subagents://runs/${garbledEvents}/events` });
    const text = (events.contents[0] as { text: string }).text;
    for (const line of text.split('\n').filter(Boolean)) expect(() => JSON.parse(line)).not.toThrow();
    expect(text).toContain('"created"');
    // ... and the damage is visible: doctor names the run and its file, show counts the skipped lines.
    const doctor = await cli(['doctor'], env);
    const eventsFile = runFile(garbledEvents, 'events.jsonl');
    expect(doctor.stdout).toContain(`${garbledEvents} (completed): its event log ${eventsFile} has 3 unparsable line(s)`);
    expect(doctor.stdout).not.toMatch(new RegExp(`${fine} \\(completed\\): its event log`));
    const show = await cli(['show', garbledEvents], env);
    expect(show.stdout).toMatch(/events: .*events\.jsonl \(\d+ events; 3 unparsable line\(s\) skipped: the file is damaged\)/);
    expect(sc(await s.call('dismiss', { runId: fine })).dismissed).toBe(true);

    // Other tools on a damaged run refuse cleanly, naming the file; the server does not go down.
    for (const [tool, args] of [['cancel', { runId: torn }], ['dismiss', { runId: torn }]] as const) {
      const r = await s.call(tool, args);
      expect(r.isError).toBe(true);
      expect(textOf(r)).toMatch(/^STATE_CORRUPT: .*status\.json of /);
    }
    await expect(s.client.readResource({ uri: `subagents://runs/${torn}` })).rejects.toThrow();

    // Still serving: a new run launches and completes.
    const n = sc(await s.call('launch', { agent: 'echo', task: 'after the damage' }));
    expect((await waitTerminal(s, n.runId)).output.text).toBe('after the damage');
    expect(s.stderr()).not.toMatch(/internal error/);
  });

  it('a run.json that holds null or is gone is STATE_CORRUPT for that run, over tools and resources alike', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push(sc(await s.call('launch', { agent: 'echo', task: `task ${i}` })).runId);
    for (const id of ids) expect((await waitTerminal(s, id)).state).toBe('completed');
    const [nullRecord, goneRecord, fine] = ids as [string, string, string];
    fs.writeFileSync(runFile(nullRecord, 'run.json'), 'null');
    fs.rmSync(runFile(goneRecord, 'run.json'));
    for (const id of [nullRecord, goneRecord]) {
      const r = await s.call('status', { runId: id });
      expect(r.isError).toBe(true);
      expect(textOf(r)).toMatch(new RegExp(`^STATE_CORRUPT: run\\.json of ${id} `));
      // A resource read fails with the same coded text, never a JavaScript error's.
      const read = s.client.readResource({ uri: `subagents://runs/${id}` });
      await expect(read).rejects.toThrow(new RegExp(`STATE_CORRUPT: run\\.json of ${id} `));
    }
    expect(sc(await s.call('status', { runId: fine })).state).toBe('completed');
    expect(s.stderr()).not.toMatch(/internal error/);

    // The command line, which sees every run, shows them as damaged instead of leaving them out; gc can remove them.
    const listed = JSON.parse((await cli(['runs', '--json'], env)).stdout).runs as Array<Record<string, any>>;
    for (const id of [nullRecord, goneRecord]) {
      const row = listed.find((r) => r.runId === id);
      expect(row?.state).toBe('unreadable');
      expect(row?.error.code).toBe('STATE_CORRUPT');
    }
    const doctor = (await cli(['doctor'], env)).stdout;
    expect(doctor).toContain(`${goneRecord} (corrupt): run.json of ${goneRecord} is missing`);
    expect(doctor).toContain(`${nullRecord} (corrupt): run.json of ${nullRecord} parses but is not what it should be`);
    const gc = JSON.parse((await cli(['gc', '--older-than', '0s', '--json'], env)).stdout);
    expect(gc.removed.flatMap((c: any) => c.runIds).sort()).toEqual([...ids].sort());
    for (const id of ids) expect(fs.existsSync(path.join(t.home, 'runs', id))).toBe(false);
  });

  it('a status torn while its run is live is rewritten by the runner (its single writer), and the run ends normally', async () => {
    writeAgent(path.join(t.home, 'agents'), 'pause', { backend: 'command', command: ['node', FAKE, 'sleep', '2000'] });
    const r = await s.call('launch', { agent: 'pause', task: 'x' });
    expect(r.isError, textOf(r)).toBeFalsy();
    const id = sc(r).runId as string;
    const file = runFile(id, 'status.json');
    const text = fs.readFileSync(file, 'utf8');
    fs.writeFileSync(file, text.slice(0, 40)); // torn while the agent runs
    const mid = await s.call('status', { runId: id });
    expect(textOf(mid)).toMatch(/^STATE_CORRUPT: |"state"/); // corrupt until the runner's next write, never a crash
    // Bounded wait: STATE_CORRUPT answers are expected until the runner's next write repairs the file.
    let fin: Record<string, any> = {};
    for (let i = 0; i < 120 && !['completed', 'failed', 'cancelled'].includes(fin.state); i++) {
      const st = await s.call('status', { runId: id, waitMs: 500 });
      fin = st.isError ? {} : sc(st);
      if (st.isError) await new Promise((res) => setTimeout(res, 250));
    }
    expect(fin.state).toBe('completed');
    expect(fin.output.text).toContain('slept');
    expect(() => JSON.parse(fs.readFileSync(file, 'utf8'))).not.toThrow();
    expect(fs.readFileSync(runFile(id, 'events.jsonl'), 'utf8')).toContain('"status-repaired"');
  });

  it('a status damaged while a client long-polls it answers STATE_CORRUPT to that client, and the server keeps serving', async () => {
    writeAgent(path.join(t.home, 'agents'), 'pause', { backend: 'command', command: ['node', FAKE, 'sleep', '8000'] });
    const id = sc(await s.call('launch', { agent: 'pause', task: 'x' })).runId as string;
    const file = runFile(id, 'status.json');
    const text = fs.readFileSync(file, 'utf8');
    let settled = false;
    const waiting = s.call('status', { runId: id, waitMs: 20_000, until: 'terminal' })
      .then((r) => ({ r, lost: null }), (e: Error) => ({ r: null, lost: e.message })) // a crashed server closes the connection
      .finally(() => { settled = true; });
    // Damaged again and again (the agent sleeps, so its runner writes nothing meanwhile) until the waiter answers:
    // the damage lands while it waits, not only before it looked.
    await sleep(300);
    for (let i = 0; i < 100 && !settled; i++) {
      fs.writeFileSync(file, text.slice(0, 40));
      await sleep(100);
    }
    const { r, lost } = await waiting;
    expect(lost).toBeNull();
    expect(r!.isError, textOf(r!)).toBe(true);
    expect(textOf(r!)).toMatch(/^STATE_CORRUPT: .*status\.json of /);
    const list = await s.call('status', {});
    expect(list.isError, textOf(list)).toBeFalsy();
    expect(s.stderr()).not.toMatch(/internal error|Unhandled|Error:/);
    await s.call('cancel', { runId: id });
  });

  it('an unparseable session registry file does not hide runs: restore adopts them and listings work', async () => {
    const first = sc(await s.call('status', {})).sessionId as string;
    const l = sc(await s.call('launch', { agent: 'echo', task: 'from the first session' }));
    await waitTerminal(s, l.runId);
    await s.close();

    const sessionFile = path.join(t.home, 'sessions', `${encodeURIComponent(first)}.json`);
    expect(fs.existsSync(sessionFile)).toBe(true);
    fs.writeFileSync(sessionFile, '{"v":1,"sessionId":"' + first.slice(0, 5)); // torn

    s = await startServer(env);
    const r = await s.call('restore', { lineage: [first] });
    expect(r.isError, textOf(r)).toBeFalsy();
    // Rebuilt around, and named: doctor warns about the file (its own server is gone, nobody rewrites it).
    expect((await cli(['doctor'], env)).stdout).toContain(`warning: session registry file ${sessionFile} does not parse`);
    expect(sc(r).runs.map((x: any) => x.runId)).toContain(l.runId);
    const st = sc(await s.call('status', { runId: l.runId }));
    expect(st.state).toBe('completed');
    expect(st.adopted).toBe(true);

    // The server's own registry file damaged while it runs: its own runs stay visible.
    const mine = sc(await s.call('status', {})).sessionId as string;
    fs.writeFileSync(path.join(t.home, 'sessions', `${encodeURIComponent(mine)}.json`), Buffer.alloc(64));
    const n = sc(await s.call('launch', { agent: 'echo', task: 'own run' }));
    await waitTerminal(s, n.runId);
    const ids = (sc(await s.call('status', {})).runs as Array<{ runId: string }>).map((x) => x.runId);
    expect(ids).toContain(n.runId);
  });
});
