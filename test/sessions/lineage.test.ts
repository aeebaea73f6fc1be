import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { afterEach, describe, expect, it } from 'vitest';
import { REPO } from '../helpers/paths.js';
import { sc, startServer, textOf, waitTerminal } from '../helpers/server.js';
import { fakeRunId, launchOk, release, sessionIdOf, waitForFile, world, type World } from './session-helpers.js';

const run = promisify(execFile);

describe('sessions: restore by lineage across server generations', () => {
  let w: World;
  afterEach(async () => { await w.cleanup(); });

  it('A launches and is SIGKILLed; B restores [A]; C restores [B] only; the run completes and C reads its output', async () => {
    w = world();
    const a = await w.start();
    const run = await launchOk(a, { agent: 'gate', task: 'three generations of output', label: 'gen' });
    const sessA = run.sessionId;
    expect(run.state).toBe('running');
    process.kill(a.pid, 'SIGKILL');
    await a.close();

    const b = await w.start();
    const sessB = await sessionIdOf(b);
    expect(sessB).not.toBe(sessA);
    const hidden = await b.call('status', { runId: run.runId });
    expect(hidden.isError).toBe(true);
    expect(textOf(hidden)).toMatch(/^RUN_NOT_FOUND: /);
    expect(sc(await b.call('status', {})).runs).toEqual([]);

    const rb = await b.call('restore', { lineage: [sessA] });
    expect(rb.isError).toBeFalsy();
    expect(sc(rb)).toMatchObject({ sessionId: sessB, adopted: 1, unknown: [] });
    expect(sc(rb).lineage).toEqual([sessB, sessA]);
    expect(sc(rb).runs.map((x: any) => [x.runId, x.adopted, x.state])).toEqual([[run.runId, true, 'running']]);
    const seenB = sc(await b.call('status', { runId: run.runId }));
    expect(seenB).toMatchObject({ runId: run.runId, sessionId: sessA, adopted: true, state: 'running' });

    // Idempotent; unknown ids are reported, not fatal.
    const unknownId = `s-${'x'.repeat(24)}`;
    const again = sc(await b.call('restore', { lineage: [unknownId, sessA, 'short'] }));
    expect(again.adopted).toBe(0);
    expect(again.unknown.sort()).toEqual([unknownId, 'short'].sort());
    expect(again.runs.map((x: any) => x.runId)).toEqual([run.runId]);

    // B's record: its client from initialize and its ancestor, private to the user.
    const recFile = path.join(w.t.home, 'sessions', `${sessB}.json`);
    expect(JSON.parse(fs.readFileSync(recFile, 'utf8'))).toMatchObject({ sessionId: sessB, client: { name: 'test-client', version: '1.0.0' }, ancestors: [sessA] });
    expect(fs.statSync(recFile).mode & 0o777).toBe(0o600);

    const c = await w.start();
    const sessC = await sessionIdOf(c);
    const rc = sc(await c.call('restore', { lineage: [sessB] }));
    expect(rc.adopted).toBe(1);
    expect(rc.lineage).toEqual([sessC, sessB, sessA]);
    expect(sc(await c.call('status', { runId: run.runId }))).toMatchObject({ adopted: true, state: 'running' });
    expect(sc(await c.call('status', {})).runs.map((x: any) => x.runId)).toEqual([run.runId]);

    // Runs the adopted sessions start later are seen too (B is alive and launches after C restored).
    const later = await launchOk(b, { agent: 'echo', task: 'started later by B' });
    const lateSeen = sc(await c.call('status', { runId: later.runId }));
    expect(lateSeen).toMatchObject({ sessionId: sessB, adopted: true });

    // A cycle (B restores its own descendant C) is ignored; nothing hangs, nothing new is adopted.
    const cyc = sc(await b.call('restore', { lineage: [sessC] }));
    expect(cyc.adopted).toBe(0);
    expect(new Set(cyc.lineage)).toEqual(new Set([sessA, sessB, sessC]));
    expect(sc(await c.call('restore', { lineage: [sessB] })).lineage).toEqual([sessC, sessB, sessA]);

    release(w.gates.gate!);
    const fin = await waitTerminal(c, run.runId);
    expect(fin.state).toBe('completed');
    expect(fin.adopted).toBe(true);
    expect(fin.output.text).toBe('three generations of output');
    const res = await c.client.readResource({ uri: `subagents://runs/${run.runId}/output` });
    expect((res.contents[0] as { text: string }).text).toBe('three generations of output');
    // The adopting session may act on the run like its own: dismiss it.
    const d = await c.call('dismiss', { runId: run.runId });
    expect(sc(d)).toMatchObject({ dismissed: true, cancelled: false });
  }, 120_000);

  it('the registry deleted or truncated while servers run: restore still works, nothing is lost', async () => {
    w = world();
    const a = await w.start();
    const run = await launchOk(a, { agent: 'gate', task: 'survives the registry' });
    const sessA = run.sessionId;
    const b = await w.start();
    const sessB = await sessionIdOf(b);
    expect(sc(await b.call('restore', { lineage: [sessA] })).adopted).toBe(1);
    const c = await w.start();
    const sessC = await sessionIdOf(c);
    expect(sc(await c.call('restore', { lineage: [sessB] })).adopted).toBe(1);
    const sessionsDir = path.join(w.t.home, 'sessions');

    // 1. Truncate or garble every session file while all three servers run.
    fs.readdirSync(sessionsDir).forEach((f, i) => {
      if (i % 3 === 0) fs.truncateSync(path.join(sessionsDir, f), 0);
      else fs.writeFileSync(path.join(sessionsDir, f), i % 3 === 1 ? '{"v":1,"sessionId":"s-' : 'null');
    });
    expect(sc(await c.call('status', { runId: run.runId })).adopted).toBe(true);
    const d = await w.start();
    const rd = sc(await d.call('restore', { lineage: [sessC] }));
    expect(rd.unknown).toEqual([]);
    expect(rd.runs.map((x: any) => x.runId)).toEqual([run.runId]);
    // Live servers write their own records back (they keep them in memory).
    for (const id of [sessA, sessB, sessC]) {
      await waitForFile(sessionsDir, (n) => n === `${id}.json` && fs.readFileSync(path.join(sessionsDir, n), 'utf8').startsWith('{"v":1') && fs.readFileSync(path.join(sessionsDir, n), 'utf8').endsWith('}'));
    }
    expect(JSON.parse(fs.readFileSync(path.join(sessionsDir, `${sessC}.json`), 'utf8')).ancestors).toEqual([sessB]);

    // 2. Delete the whole registry after B and C are gone: their lineage is rebuilt from the adoption markers.
    for (const s of [b, c]) { process.kill(s.pid, 'SIGKILL'); await s.close(); }
    fs.rmSync(sessionsDir, { recursive: true, force: true });
    const e = await w.start();
    const re = sc(await e.call('restore', { lineage: [sessC] }));
    expect(re.unknown).toEqual([]);
    expect(re.adopted).toBe(1);
    expect(re.runs.map((x: any) => x.runId)).toEqual([run.runId]);
    const f = await w.start();
    const rf = sc(await f.call('restore', { lineage: [sessB] }));
    expect(rf.unknown).toEqual([]);
    expect(rf.runs.map((x: any) => x.runId)).toEqual([run.runId]);
    // The run's own session still sees it, and a later run of A reaches E through the rebuilt lineage.
    const later = await launchOk(a, { agent: 'echo', task: 'after the registry was lost' });
    expect(sc(await e.call('status', { runId: later.runId })).adopted).toBe(true);
    release(w.gates.gate!);
    expect((await waitTerminal(e, run.runId)).output.text).toBe('survives the registry');
    // A, still running, writes its record back on its own: at its next look at the registry (a listing, or the run
    // watcher's poll), not at any given call, so wait for it.
    await waitForFile(sessionsDir, (n) => n === `${sessA}.json`);
  }, 150_000); // six servers: a bound on hangs that holds on a loaded two-core machine, not a speed check

  it('a link to a session with no runs yet survives the loss of the adopting session\'s file', async () => {
    w = world();
    const a = await w.start();
    const sessA = await sessionIdOf(a);
    const b = await w.start();
    const sessB = await sessionIdOf(b);
    // A has no runs yet: B's link to it is not in any run's adoption marker.
    expect(sc(await b.call('restore', { lineage: [sessA] }))).toMatchObject({ adopted: 0, unknown: [], runs: [] });
    await b.close();
    fs.rmSync(path.join(w.t.home, 'sessions', `${sessB}.json`));
    const run = await launchOk(a, { agent: 'gate', task: 'after the link lost its session file' });
    const c = await w.start();
    const rc = sc(await c.call('restore', { lineage: [sessB] }));
    expect(rc.unknown).toEqual([]);
    expect(rc.adopted).toBe(1);
    expect(rc.lineage).toEqual([await sessionIdOf(c), sessB, sessA]);
    expect(rc.runs.map((x: any) => x.runId)).toEqual([run.runId]);
    expect(sc(await c.call('status', { runId: run.runId }))).toMatchObject({ sessionId: sessA, adopted: true });
  }, 120_000);

  it('servers sharing one session id restore concurrently: no ancestor is lost from the shared record', async () => {
    w = world();
    // Four sessions with a run each, and four servers of one shared session id, each restoring one of them at once.
    const ancestors = await Promise.all(Array.from({ length: 4 }, () => w.start()));
    const runs = await Promise.all(ancestors.map((s, i) => launchOk(s, { agent: 'echo', task: `ancestor ${i}` })));
    const shared = `s-shared-${'q'.repeat(20)}`;
    const twins = await Promise.all(Array.from({ length: 4 }, () => w.start({ SUBAGENTS_SESSION_ID: shared })));
    const results = await Promise.all(twins.map((t, i) => t.call('restore', { lineage: [runs[i]!.sessionId] })));
    for (const r of results) expect(r.isError, textOf(r)).toBeFalsy();
    const rec = JSON.parse(fs.readFileSync(path.join(w.t.home, 'sessions', `${shared}.json`), 'utf8'));
    expect([...rec.ancestors].sort()).toEqual(runs.map((r) => r.sessionId).sort());
    // A later server restoring the shared id alone sees every ancestor's run.
    const d = await w.start();
    const rd = sc(await d.call('restore', { lineage: [shared] }));
    expect(rd.unknown).toEqual([]);
    expect(rd.runs.map((x: any) => x.runId).sort()).toEqual(runs.map((r) => r.runId).sort());
  }, 150_000); // nine servers on a loaded two-core machine: a bound on hangs, not a speed check

  it('restore merges into the record under its lock: held by another process, it refuses BUSY having changed nothing', async () => {
    w = world();
    const a = await w.start();
    const sessA = await sessionIdOf(a);
    const shared = `s-locked-${'k'.repeat(20)}`;
    const s = await w.start({ SUBAGENTS_SESSION_ID: shared });
    expect(await sessionIdOf(s)).toBe(shared);
    // Another process of the same session id, in the middle of its own read-merge-write of the record.
    const other = `s-other-${'o'.repeat(20)}`;
    const gate = path.join(w.t.base, 'holder');
    fs.mkdirSync(gate);
    const registryJs = pathToFileURL(path.join(REPO, 'dist', 'store', 'session-registry.js')).href;
    const script = `
      const fs = await import('node:fs');
      const { FileSessionRegistry } = await import(${JSON.stringify(registryJs)});
      const [home, id, anc, gate] = process.argv.slice(1);
      const reg = new FileSessionRegistry(home);
      await reg.withRecord(id, async () => {
        const rec = reg.read(id);
        fs.writeFileSync(gate + '/held', '');
        while (!fs.existsSync(gate + '/release')) await new Promise((r) => setTimeout(r, 20));
        reg.write({ ...rec, ancestors: [...rec.ancestors, anc] });
      });`;
    const holder = run(process.execPath, ['--input-type=module', '-e', script, w.t.home, shared, other, gate]);
    await waitForFile(gate, (n) => n === 'held');
    const busy = await s.call('restore', { lineage: [sessA] });
    expect(busy.isError).toBe(true);
    expect(textOf(busy)).toMatch(/^BUSY: the session registry lock stayed held .*retry in a moment\.$/);
    release(gate);
    await holder;
    const rec = () => JSON.parse(fs.readFileSync(path.join(w.t.home, 'sessions', `${shared}.json`), 'utf8'));
    expect(rec().ancestors).toEqual([other]);
    expect(fs.existsSync(path.join(w.t.home, 'lineage', shared))).toBe(false);
    expect(sc(await s.call('restore', { lineage: [sessA] })).unknown).toEqual([]);
    expect([...rec().ancestors].sort()).toEqual([other, sessA].sort());
  }, 120_000);

  it('a nested server (started by an agent of a run) refuses restore', async () => {
    w = world();
    const a = await w.start();
    const sessA = await sessionIdOf(a);
    const run = await launchOk(a, { agent: 'gate', task: 'parent of a nested server' });
    const envFile = await waitForFile(w.gates.gate!, (n) => n.endsWith('.env.json'));
    const agentEnv = JSON.parse(fs.readFileSync(envFile, 'utf8')) as Record<string, string>;
    expect(agentEnv.SUBAGENTS_BUDGET).toBeTruthy();
    const nestedEnv: Record<string, string> = { SUBAGENTS_ROOTS: w.t.root };
    for (const k of ['SUBAGENTS_HOME', 'SUBAGENTS_PARENT_RUN_ID', 'SUBAGENTS_ROOT_RUN_ID', 'SUBAGENTS_DEPTH', 'SUBAGENTS_BUDGET']) nestedEnv[k] = agentEnv[k]!;
    const nested = await startServer(nestedEnv);
    w.servers.push(nested);
    const r = await nested.call('restore', { lineage: [sessA] });
    expect(r.isError).toBe(true);
    expect(r.structuredContent).toBeUndefined();
    expect(textOf(r)).toMatch(/^INVALID_INPUT: restore is not available to a nested server/);
    // Refused before any other check: even a malformed call gets the same answer.
    expect(textOf(await nested.call('restore', {}))).toMatch(/^INVALID_INPUT: restore is not available to a nested server/);
    // It did not adopt anything: the parent's run stays invisible to it.
    expect(textOf(await nested.call('status', { runId: run.runId }))).toMatch(/^RUN_NOT_FOUND: /);
    expect(textOf(await nested.call('status', { runId: fakeRunId() }))).toMatch(/^RUN_NOT_FOUND: /);
  });
});
