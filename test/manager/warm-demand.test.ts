import { describe, expect, it } from 'vitest';
import { BURST_POOL_CAP, WarmDemand } from '../../src/manager/warm-demand.js';

/** One launch from its claim to its answer. */
const oneLaunch = (d: WarmDemand) => { d.claimed(); return d.settled(); };

describe('WarmDemand (the warm pool\'s burst rule)', () => {
  it('a sequential loop is no burst, however many launches come between two refills', () => {
    const d = new WarmDemand(2, 300_000);
    for (let i = 0; i < 100; i++) expect(oneLaunch(d)).toBe(true);
    expect(d.refillTarget(1_000)).toBe(2);
    expect(d.size(1_001)).toBe(2);
  });

  it('launches in flight at once set the size until one idle time has passed, capped', () => {
    const d = new WarmDemand(2, 300_000);
    for (let i = 0; i < 5; i++) d.claimed();
    expect(d.inFlight).toBe(5);
    for (let i = 0; i < 4; i++) expect(d.settled()).toBe(false);
    expect(d.settled()).toBe(true);
    expect(d.refillTarget(1_000)).toBe(5);
    // A sequential loop afterwards does not shrink it within the idle time …
    oneLaunch(d);
    expect(d.refillTarget(2_000)).toBe(5);
    // … and one idle time after the burst it is the setting again.
    oneLaunch(d);
    expect(d.refillTarget(302_000)).toBe(2);
    for (let i = 0; i < 20; i++) d.claimed();
    for (let i = 0; i < 20; i++) d.settled();
    expect(d.refillTarget(303_000)).toBe(BURST_POOL_CAP);
  });

  it('a larger burst within the idle time raises the size; a smaller one keeps it', () => {
    const d = new WarmDemand(1, 10_000);
    for (let i = 0; i < 3; i++) d.claimed();
    for (let i = 0; i < 3; i++) d.settled();
    expect(d.refillTarget(0)).toBe(3);
    d.claimed(); d.claimed(); d.settled(); d.settled();
    expect(d.refillTarget(5_000)).toBe(3);
    for (let i = 0; i < 4; i++) d.claimed();
    for (let i = 0; i < 4; i++) d.settled();
    expect(d.refillTarget(6_000)).toBe(4);
    expect(d.size(15_999)).toBe(4);
    expect(d.size(16_001)).toBe(1);
  });

  it('never goes below the setting, and a settle without a claim does not count', () => {
    const d = new WarmDemand(3, 1_000);
    expect(d.settled()).toBe(true);
    expect(d.inFlight).toBe(0);
    expect(d.refillTarget(0)).toBe(3);
  });
});
