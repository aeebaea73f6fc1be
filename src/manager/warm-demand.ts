/**
 * How many idle runners a server's warm pool aims for (docs/architecture.md, "Warm runners"): the setting, or after a
 * burst the burst's size (up to `BURST_POOL_CAP`) for one idle time. A burst's size is the most launches in flight at
 * once — from taking a runner to the launch's answer — since the last refill, not how many came: a refill may be
 * seconds away, and a sequential loop's launches of those seconds are one at a time. Time is the caller's monotonic
 * milliseconds (`performance.now()`), passed in so the rule is a plain function of what happened.
 */

/** After a burst the pool is refilled to the burst's size (for one idle time), up to this many runners. */
export const BURST_POOL_CAP = 8;

export class WarmDemand {
  /** Launches between taking a runner and their answer. */
  private inFlightNow = 0;
  /** The most in flight at once since the last refill. */
  private demand = 0;
  private peak = { size: 0, at: 0 };

  constructor(private readonly setting: number, private readonly idleMs: number) {}

  get inFlight(): number {
    return this.inFlightNow;
  }

  /** A launch took (or tried to take) a runner. */
  claimed(): void {
    this.inFlightNow++;
    this.demand = Math.max(this.demand, this.inFlightNow);
  }

  /** That launch has its answer; true when none is in flight any more (the refill's moment). */
  settled(): boolean {
    this.inFlightNow = Math.max(0, this.inFlightNow - 1);
    return this.inFlightNow === 0;
  }

  /** At a refill: the demand since the last one is counted, and the size to fill to is returned. */
  refillTarget(nowMs: number): number {
    if (this.demand >= this.peak.size || nowMs - this.peak.at > this.idleMs) this.peak = { size: this.demand, at: nowMs };
    this.demand = 0;
    return this.size(nowMs);
  }

  /** The size the last refill settled on, without counting a new demand (what a claim tells its runner). */
  size(nowMs: number): number {
    const burst = nowMs - this.peak.at > this.idleMs ? 0 : this.peak.size;
    return Math.max(this.setting, Math.min(burst, BURST_POOL_CAP));
  }
}
