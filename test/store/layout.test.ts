import { describe, expect, it } from 'vitest';
import { isRunDirNoise } from '../../src/store/layout.js';

describe('isRunDirNoise', () => {
  it('skips what says nothing about a run\'s state', () => {
    for (const name of ['run.lock', 'events.jsonl', 'runner.log', 'ready.json', 'proceed', 'out', 'prompts', 'budget', '.status.json.123.4af.tmp']) {
      expect(isRunDirNoise(name), name).toBe(true);
    }
  });

  it('keeps what a status reader must see: the status, appends, a cancel request, a dismissal, and unnamed events', () => {
    for (const name of ['status.json', 'appends', 'children', 'cancel-request.json', 'dismissed.json', 'run.json', 'status.json.bak', null]) {
      expect(isRunDirNoise(name), String(name)).toBe(false);
    }
  });
});
