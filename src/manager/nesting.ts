import { createHash } from 'node:crypto';
import fs from 'node:fs';
import { isRunId } from '../ids.js';
import type { RunStore } from '../store/ports.js';
import { BudgetGrantFile, readStateFile, type DistributedLink } from '../store/state-files.js';
import { isTerminalRun } from '../store/run-types.js';

/** A server started by an agent of a running step: its launches join that step's run tree. */
export interface NestingContext {
  parentRunId: string;
  parentStepKey: string;
  rootRunId: string;
  /** The parent run's depth; a nested run is one deeper. */
  parentDepth: number;
  secretHash: string;
  /**
   * Set when the parent is a worker's run (docs/scale-out.md, "Nested delegation"): the Redis, pool and distributed
   * run id of the parent, from the step's 0600 budget file. Launches then go to that Redis, under that run.
   */
  redis?: DistributedLink;
}

/**
 * Validates SUBAGENTS_BUDGET against the hashes the parent's runner stored for its running steps. Anything invalid
 * or expired yields null: the server is then top-level (docs/contract.md, "Nesting and isolation"), and no error reveals why.
 */
export function resolveNesting(env: NodeJS.ProcessEnv, store: RunStore): NestingContext | null {
  const secret = env.SUBAGENTS_BUDGET;
  const parentRunId = env.SUBAGENTS_PARENT_RUN_ID;
  if (!secret || !parentRunId || !isRunId(parentRunId) || secret.length < 22) return null;
  const secretHash = createHash('sha256').update(secret).digest('hex');
  return checkNesting(store, parentRunId, secretHash);
}

/** Re-checked at every nested launch: the secret is only good while its step runs. */
export function checkNesting(store: RunStore, parentRunId: string, secretHash: string): NestingContext | null {
  try {
    const paths = store.paths(parentRunId);
    if (!fs.existsSync(paths.budgetFile(secretHash))) return null;
    const grant = readStateFile<{ stepKey: string; redis?: DistributedLink }>(paths.budgetFile(secretHash), BudgetGrantFile);
    const record = store.readRecord(parentRunId);
    const status = store.readStatus(parentRunId);
    if (!grant || !record || !status || isTerminalRun(status.state)) return null;
    const step = findStep(status.steps, grant.stepKey);
    if (!step || step.state !== 'running') return null;
    return {
      parentRunId, parentStepKey: grant.stepKey, rootRunId: record.rootRunId, parentDepth: record.depth, secretHash,
      ...(grant.redis ? { redis: grant.redis } : {}),
    };
  } catch {
    return null;
  }
}

function findStep<T extends { key: string; members?: T[] }>(steps: T[], key: string): T | undefined {
  for (const s of steps) {
    if (s.key === key) return s;
    const m = s.members?.find((x) => x.key === key);
    if (m) return m;
  }
  return undefined;
}
