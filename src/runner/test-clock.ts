/**
 * Test seam for the reliability matrix (F9): `SUBAGENTS_TEST_FAULT=clock:<offsetMs>@<afterMs>` steps this process's
 * wall clock (`Date`) by `offsetMs`, `afterMs` after start — what an NTP step or `date -s` does to a running process.
 * Monotonic time (`performance.now`, timers) is left alone, as the kernel leaves CLOCK_MONOTONIC alone. Nothing sets
 * the variable but the fault suite; the agents never see it (SUBAGENTS_* is never passed to them). Built-ins only.
 */
export function installClockJump(spec: string | undefined): void {
  const m = /^clock:([+-]?\d+)@(\d+)$/.exec(spec ?? '');
  if (!m) return;
  const offset = Number(m[1]);
  const after = Number(m[2]);
  const RealDate = Date;
  const t0 = performance.now();
  const shift = (): number => (performance.now() - t0 >= after ? offset : 0);
  class JumpingDate extends RealDate {
    constructor(...args: unknown[]) {
      if (args.length === 0) super(RealDate.now() + shift());
      else super(...(args as [string | number]));
    }
    static override now(): number {
      return RealDate.now() + shift();
    }
  }
  globalThis.Date = JumpingDate as DateConstructor;
}
