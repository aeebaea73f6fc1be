import fs from 'node:fs';
import path from 'node:path';

export interface QueueLedger {
  roots: Record<string, { runner: { pid: number } | null }>;
  trees: Record<string, { used: number }>;
  queue: Record<string, { seq: number; handoff?: { attempt: number } | null }>;
}

/** The ledger as the queue tests read it (a missing queue is an empty one). */
export function queueLedger(home: string): QueueLedger {
  try {
    const l = JSON.parse(fs.readFileSync(path.join(home, 'ledger.json'), 'utf8'));
    return { roots: l.roots ?? {}, trees: l.trees ?? {}, queue: l.queue ?? {} };
  } catch {
    return { roots: {}, trees: {}, queue: {} };
  }
}

function events(home: string, runId: string): Array<{ type: string }> {
  try {
    return fs.readFileSync(path.join(home, 'runs', runId, 'events.jsonl'), 'utf8').split('\n').filter(Boolean).flatMap((l) => {
      try { return [JSON.parse(l)]; } catch { return []; }
    });
  } catch {
    return [];
  }
}

/** How many agents of the run were started (its step-started events): a queued run's must be exactly one. */
export function stepStarts(home: string, runId: string): number {
  return events(home, runId).filter((e) => e.type === 'step-started').length;
}

/** How many runners claimed the run's start. */
export function runStarts(home: string, runId: string): number {
  return events(home, runId).filter((e) => e.type === 'started').length;
}
