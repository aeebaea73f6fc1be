import fs from 'node:fs';
import path from 'node:path';
import { isRunId } from '../ids.js';

/**
 * Where isolated steps' git worktrees live: inside the state home, never inside the user's repository, so the
 * repository's own working tree and index are never written. One directory per run, one worktree per step:
 *
 *   <home>/worktrees/<runId>/<runId>-<stepKey>/   the worktree (its name is also git's name for it)
 *   <home>/worktrees/<runId>/<stepKey>.json       which repository it belongs to, written before it is made
 *
 * This module knows only paths: it loads no git code, so the cheap question "has this run any worktree left?" costs
 * a stat.
 */
export function worktreesRoot(home: string): string {
  return path.join(home, 'worktrees');
}

export function runWorktreesDir(home: string, runId: string): string {
  if (!isRunId(runId)) throw new Error('invalid run id');
  return path.join(worktreesRoot(home), runId);
}

export function stepWorktreeDir(home: string, runId: string, stepKey: string): string {
  return path.join(runWorktreesDir(home, runId), `${runId}-${stepKey}`);
}

export function stepWorktreeMarker(home: string, runId: string, stepKey: string): string {
  return path.join(runWorktreesDir(home, runId), `${stepKey}.json`);
}

/** The branch of a step: `subagents/<runId>/<step>` or `…/<step>-<member>`. */
export function stepBranch(runId: string, stepKey: string): string {
  return `subagents/${runId}/${stepKey.replace('.', '-')}`;
}

export function hasWorktrees(home: string, runId: string): boolean {
  try { return fs.statSync(runWorktreesDir(home, runId)).isDirectory(); } catch { return false; }
}

/** Run ids that still have a worktree directory. */
export function runsWithWorktrees(home: string): string[] {
  try { return fs.readdirSync(worktreesRoot(home)).filter(isRunId); } catch { return []; }
}

/** What a marker file records. */
export interface WorktreeMarker {
  /** The repository's top level (where `git worktree` commands run). */
  repo: string;
  dir: string;
  branch: string;
  git: string;
}
