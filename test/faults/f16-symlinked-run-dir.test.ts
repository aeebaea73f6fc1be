/**
 * F16 — a run directory replaced by a symlink while the run is live. O_NOFOLLOW guards only a path's last component:
 * with `runs/<id>` moved away and a symlink to another directory put in its place, the runner wrote its terminal
 * status and the run's output into the link's target, and `status` read them from there.
 * Expect: nothing is written through the link (the target stays as it was), the runner stops its agent and exits
 * saying why, `status` answers STATE_CORRUPT naming the symlink instead of a result read through it, and no process
 * of the run remains.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { sc, startServer, textOf, type Started } from '../helpers/server.js';
import { FAKE, launchOk, pidsWithToken, readRecord, sleep, until } from './fault-helpers.js';

function treeOf(dir: string): Record<string, string> {
  const out: Record<string, string> = {};
  const walk = (d: string) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.isFile()) out[path.relative(dir, p)] = fs.readFileSync(p, 'utf8');
    }
  };
  walk(dir);
  return out;
}

describe.skipIf(process.platform !== 'linux')('F16 a symlinked run directory', () => {
  let t: ReturnType<typeof tempStateHome>;
  let s: Started;
  beforeEach(async () => {
    t = tempStateHome();
    writeAgent(path.join(t.home, 'agents'), 'gate', { backend: 'command', command: ['node', FAKE, 'gate', path.join(t.base, 'go')] });
    s = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_KILL_GRACE_MS: '300' });
  });
  afterEach(async () => {
    await s.close();
    t.cleanup();
  });

  it('the runner never writes through the link; status names it; nothing is left running', async () => {
    const runId = await launchOk(s, { agent: 'gate', task: 'the task' });
    const token = readRecord(t.home, runId).runToken as string;
    const runDir = path.join(t.home, 'runs', runId);
    await until(() => { try { return JSON.parse(fs.readFileSync(path.join(runDir, 'status.json'), 'utf8')).steps[0].state === 'running'; } catch { return false; } }, 20_000);

    // The attacker's directory: a copy of the run's files, so a read through the link would find a whole run there.
    const target = path.join(t.base, 'elsewhere');
    fs.cpSync(runDir, target, { recursive: true, filter: (src) => !/\.sock$|\.lock$/.test(src) });
    const before = treeOf(target);
    fs.renameSync(runDir, path.join(t.base, 'moved-away'));
    fs.symlinkSync(target, runDir);
    fs.writeFileSync(path.join(t.base, 'go'), ''); // the agent answers and exits: the runner records the end

    expect(await until(() => pidsWithToken(token).length === 0, 20_000)).toBe(true);
    await sleep(300);
    const after = treeOf(target);
    const changed = Object.keys(after).filter((f) => after[f] !== before[f] && !f.endsWith('events.jsonl'));
    expect(changed, 'files written through the symlink').toEqual([]);
    expect(after['events.jsonl'] ?? '').toBe(before['events.jsonl'] ?? '');

    const r = await s.call('status', { runId });
    expect(r.isError).toBe(true);
    expect(textOf(r)).toMatch(/^STATE_CORRUPT: /);
    expect(textOf(r)).toContain(`runs/${runId} in the state home is a symlink`);
    const list = await s.call('status', {});
    expect(list.isError, textOf(list)).toBeFalsy();
    const listed = (sc(list).runs as Array<{ runId: string; state: string }>).find((x) => x.runId === runId);
    expect(listed?.state).not.toBe('completed');
  }, 90_000);
});
