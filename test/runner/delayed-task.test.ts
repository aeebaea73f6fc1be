import { describe, expect, it } from 'vitest';
import { DelayedTask } from '../../src/runner/delayed-task.js';

describe('DelayedTask', () => {
  it('settled before its delay, the work never starts', async () => {
    const t = new DelayedTask(60_000);
    let started = false;
    t.schedule(async () => { started = true; });
    await t.settle();
    expect(started).toBe(false);
  });

  it('settled after the work started, it waits for the work to finish (a failure is swallowed)', async () => {
    const t = new DelayedTask(0);
    let finish!: () => void;
    const events: string[] = [];
    const begun = new Promise<void>((resolve) => {
      t.schedule(async () => {
        events.push('started');
        resolve();
        await new Promise<void>((r) => { finish = r; });
        events.push('finished');
        throw new Error('ignored');
      });
    });
    await begun;
    const settled = t.settle().then(() => events.push('settled'));
    await Promise.resolve();
    expect(events).toEqual(['started']);
    finish();
    await settled;
    expect(events).toEqual(['started', 'finished', 'settled']);
  });

  it('a later schedule replaces work that has not started', async () => {
    const t = new DelayedTask(0);
    const ran: number[] = [];
    const second = new Promise<void>((resolve) => {
      t.schedule(async () => { ran.push(1); });
      t.schedule(async () => { ran.push(2); resolve(); });
    });
    await second;
    await t.settle();
    expect(ran).toEqual([2]);
  });
});
