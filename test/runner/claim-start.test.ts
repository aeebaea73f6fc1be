import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { claimStartQuickly } from '../../src/runner/claim-start.js';
import { RunPaths } from '../../src/store/layout.js';

const me = { pid: process.pid, startTime: '12345' };

describe('claimStartQuickly', () => {
  let dir: string;
  let paths: RunPaths;
  const status = (state: string) => ({ v: 1, runId: 'r-x', state, error: null, startedAt: null, endedAt: null, updatedAt: 'then', runner: null, steps: [], appendsTaken: 0, survivors: [] });
  const stored = () => JSON.parse(fs.readFileSync(paths.status, 'utf8'));
  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sa-claim-'));
    paths = new RunPaths(dir);
  });
  afterEach(() => { fs.rmSync(dir, { recursive: true, force: true }); });

  it('claims a starting run (running, its runner, startedAt) and returns the run lock', () => {
    fs.writeFileSync(paths.status, JSON.stringify(status('starting')));
    const claimed = claimStartQuickly(paths, me);
    expect(claimed).toMatchObject({ state: 'running', runner: me });
    expect(stored()).toEqual(claimed);
    expect(stored().startedAt).not.toBeNull();
    expect(fs.existsSync(`${paths.lockTarget}.lock`)).toBe(false);
    expect(fs.readdirSync(dir).filter((n) => n.endsWith('.tmp'))).toEqual([]);
  });

  it('leaves a held run lock alone and claims nothing (the supervisor then waits for the lock)', () => {
    fs.writeFileSync(paths.status, JSON.stringify(status('starting')));
    fs.mkdirSync(`${paths.lockTarget}.lock`);
    expect(claimStartQuickly(paths, me)).toBeNull();
    expect(stored().state).toBe('starting');
    expect(fs.existsSync(`${paths.lockTarget}.lock`)).toBe(true); // still the holder's
  });

  it.each(['failed', 'cancelled', 'running'])('claims nothing from a run that is %s (an abandoned launch stays abandoned)', (state) => {
    fs.writeFileSync(paths.status, JSON.stringify(status(state)));
    expect(claimStartQuickly(paths, me)).toBeNull();
    expect(stored().state).toBe(state);
    expect(fs.existsSync(`${paths.lockTarget}.lock`)).toBe(false);
  });

  it('claims nothing from a damaged status and returns the lock', () => {
    fs.writeFileSync(paths.status, '{"state":"star');
    expect(claimStartQuickly(paths, me)).toBeNull();
    expect(fs.existsSync(`${paths.lockTarget}.lock`)).toBe(false);
  });
});
