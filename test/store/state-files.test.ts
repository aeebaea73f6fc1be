/**
 * Every JSON state file is read through its schema (src/store/state-files.ts): a file that parses into something
 * else than its kind is STATE_CORRUPT naming the file and the wrong field, never its contents (docs/contract.md,
 * invariant 6).
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { LedgerFile, readStateFile, ReadyFile, RunStatusFile, SessionRecordFile } from '../../src/store/state-files.js';
import { tempStateHome } from '../helpers/state-home.js';

describe('state files', () => {
  let t: ReturnType<typeof tempStateHome>;
  let file: string;
  beforeEach(() => {
    t = tempStateHome();
    file = path.join(t.home, 'x.json');
  });
  afterEach(() => t.cleanup());

  const corrupt = (kind: Parameters<typeof readStateFile>[1], text: string): string => {
    fs.writeFileSync(file, text);
    try {
      readStateFile(file, kind, 'x.json of r-test');
    } catch (e) {
      expect((e as { code?: string }).code).toBe('STATE_CORRUPT');
      return (e as Error).message;
    }
    throw new Error('read a damaged file without complaint');
  };

  it('reads a file of its kind, keeping fields the schema does not list; a missing file is null', () => {
    expect(readStateFile(file, ReadyFile)).toBeNull();
    fs.writeFileSync(file, JSON.stringify({ pid: 12, startTime: '345', extra: true }));
    expect(readStateFile(file, ReadyFile)).toEqual({ pid: 12, startTime: '345', extra: true });
  });

  it('refuses a file of another shape, naming the file and the first wrong field but no value', () => {
    const m = corrupt(RunStatusFile, JSON.stringify({ runId: 'r', state: 'secret-value', error: null, startedAt: null, endedAt: null, steps: [] }));
    expect(m).toContain('x.json of r-test');
    expect(m).toContain('(state is wrong)');
    expect(m).not.toContain('secret-value');
    expect(corrupt(RunStatusFile, '[]')).toContain('(the top level is wrong)');
    expect(corrupt(SessionRecordFile, JSON.stringify({ sessionId: 's', startedAt: 'x', client: null, ancestors: 'nope' }))).toContain('(ancestors is wrong)');
    expect(corrupt(LedgerFile, JSON.stringify({ v: 1, roots: {}, trees: { t: { used: 'x', limit: 1, maxDepth: 1 } }, agents: {} }))).toContain('(trees.t.used is wrong)');
    expect(corrupt(ReadyFile, '{"pid":')).toMatch(/does not parse/);
  });
});
