/**
 * The server's keyed reads of a run's status.json and run.json (src/manager/run-peek.ts): a file is read again exactly
 * when it was replaced, the value handed out cannot be changed by a caller, and a run directory swapped for a symlink
 * is refused by the home guard even after an earlier read was remembered.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadSettings } from '../../src/config.js';
import { buildContext } from '../../src/mcp/core.js';
import { peekRecord, peekStatus } from '../../src/manager/run-peek.js';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { sc, startServer, waitTerminal } from '../helpers/server.js';
import { CAT } from '../helpers/runs.js';

describe('keyed reads of a run\'s status and record', () => {
  let t: ReturnType<typeof tempStateHome>;
  let runId: string;
  beforeAll(async () => {
    t = tempStateHome();
    writeAgent(path.join(t.home, 'agents'), 'echo', { backend: 'command', command: [CAT] });
    const s = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root });
    try {
      runId = sc(await s.call('launch', { agent: 'echo', task: 'peek' })).runId as string;
      expect((await waitTerminal(s, runId)).state).toBe('completed');
    } finally {
      await s.close();
    }
  });
  afterAll(() => t.cleanup());

  it('reads a replaced file again, hands out a frozen value, and refuses a symlinked run directory', () => {
    const { ctx } = buildContext(loadSettings({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root }), {}, () => null);
    const dir = path.join(t.home, 'runs', runId);
    const file = path.join(dir, 'status.json');

    const first = peekStatus(ctx, runId);
    expect(first.status?.state).toBe('completed');
    expect(Object.isFrozen(first.status)).toBe(true);
    expect(Object.isFrozen(first.status!.steps[0])).toBe(true);
    expect(peekStatus(ctx, runId).status).toBe(first.status); // unchanged file: the same read

    // Replaced whole, as every writer does: a new inode under the name.
    const next = { ...JSON.parse(fs.readFileSync(file, 'utf8')), label: 'replaced' };
    fs.writeFileSync(`${file}.tmp`, JSON.stringify(next));
    fs.renameSync(`${file}.tmp`, file);
    const second = peekStatus(ctx, runId);
    expect(second.key).not.toBe(first.key);
    expect((second.status as unknown as { label: string }).label).toBe('replaced');

    const record = peekRecord(ctx, runId);
    expect(record?.runId).toBe(runId);
    expect(peekRecord(ctx, runId)).toBe(record);

    // The run directory swapped for a symlink to a copy of itself: the copy's files are other inodes, so the look
    // reads, and the guard refuses the path.
    const copy = path.join(t.base, 'elsewhere');
    fs.cpSync(dir, copy, { recursive: true });
    fs.rmSync(dir, { recursive: true, force: true });
    fs.symlinkSync(copy, dir);
    expect(() => peekStatus(ctx, runId)).toThrow(/STATE_CORRUPT|symlink/);
    expect(() => peekRecord(ctx, runId)).toThrow(/STATE_CORRUPT|symlink/);
  });
});
