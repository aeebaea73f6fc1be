import type { ManagerContext } from '../manager/context.js';
import { collectGarbage } from '../manager/gc.js';
import { CliError, EXIT_USAGE } from './context.js';
import { formatBytes, parseAge } from '../format.js';

export async function gcCommand(ctx: ManagerContext, o: { olderThan: string; dryRun?: boolean; json?: boolean; branches?: boolean }, out: (s: string) => void): Promise<number> {
  const olderThanMs = parseAge(o.olderThan);
  if (olderThanMs === null) throw new CliError(`--older-than ${JSON.stringify(o.olderThan)} is not an age like 30d, 12h, 90m or 2w (at most 100 years)`, EXIT_USAGE);
  const r = await collectGarbage(ctx, { olderThanMs, dryRun: o.dryRun === true, branches: o.branches === true });
  if (o.json) {
    out(JSON.stringify(r, null, 2));
    return 0;
  }
  const verb = r.dryRun ? 'would remove' : 'removed';
  for (const c of r.removed) {
    const nested = c.runIds.length > 1 ? ` with ${c.runIds.length - 1} nested run(s)` : '';
    out(`${verb} ${c.rootRunId}${nested} (ended ${c.endedAt}${c.dismissed ? ', dismissed' : ''}, ${formatBytes(c.bytes)})`);
  }
  const runs = r.removed.reduce((n, c) => n + c.runIds.length, 0);
  if (r.worktreesRemoved > 0) out(`removed ${r.worktreesRemoved} worktree(s) of ended runs (their branches stay)`);
  if (o.branches) out(`${r.dryRun ? 'would delete' : 'deleted'} ${r.branchesDeleted} branch(es) of the removed runs`);
  out(`${r.dryRun ? 'dry run: ' : ''}${verb} ${runs} run(s), ${formatBytes(r.bytesFreed)} ${r.dryRun ? 'would be ' : ''}freed; kept ${r.keptActive} active and ${r.keptRecent} that ended after ${r.cutoff}`);
  return 0;
}
