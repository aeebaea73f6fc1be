/**
 * Runs the members of a parallel group: at most `concurrency` at once, started in index order. Once `stopAfter`
 * says so for an outcome (failFast and a member failed), or `signal` aborts, no more members start; the caller aborts
 * the running ones. Members that never started have a null outcome.
 */
export async function runMembers<T>(
  count: number,
  concurrency: number,
  signal: AbortSignal,
  runOne: (index: number) => Promise<T>,
  stopAfter: (outcome: T) => boolean,
): Promise<Array<T | null>> {
  const queue = Array.from({ length: count }, (_, j) => j);
  const outcomes: Array<T | null> = queue.map(() => null);
  let stopLaunching = false;
  const worker = async () => {
    while (queue.length && !stopLaunching && !signal.aborted) {
      const j = queue.shift()!;
      const o = await runOne(j);
      outcomes[j] = o;
      if (stopAfter(o)) stopLaunching = true;
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, count) }, worker));
  return outcomes;
}
