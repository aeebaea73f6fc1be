/**
 * The command line over Redis (docs/scale-out.md): `runs`, `show`, `logs`, `cancel` and `dismiss` when
 * SUBAGENTS_REDIS_URL (or --redis) is set, seeing every session's runs as in local mode.
 */
import type { ManagerContext } from '../manager/context.js';
import { isTerminalRun, type RunState } from '../store/run-types.js';
import { formatAge, parseAge, table } from '../format.js';
import { CliError, EXIT_FAILURE, EXIT_OK, EXIT_USAGE } from './context.js';

type Out = (s: string) => void;

function distributed(ctx: ManagerContext) {
  if (!ctx.distributed) throw new CliError('not in distributed mode');
  return ctx.distributed;
}

export async function distributedRuns(ctx: ManagerContext, o: { json?: boolean; state?: string; all?: boolean }, out: Out): Promise<number> {
  const wanted = o.state ? new Set(o.state.split(',').map((w) => w.trim().toLowerCase())) : null;
  const match = (state: string) => !wanted || wanted.has(state) || (wanted.has('active') && !isTerminalRun(state as RunState)) || (wanted.has('terminal') && isTerminalRun(state as RunState));
  const runs = (await distributed(ctx).everyRun(o.all === true)).filter((r) => match(r.state));
  if (o.json) { out(JSON.stringify(runs, null, 2)); return EXIT_OK; }
  if (!runs.length) { out('no runs'); return EXIT_OK; }
  out(table(['RUN', 'STATE', 'MODE', 'AGENTS', 'CREATED', 'SESSION'], runs.map((r) => [
    r.runId, r.state + (r.error ? ` (${r.error.code})` : ''), r.mode, r.agents.join(','), formatAge(r.createdAt), r.sessionId,
  ])));
  return EXIT_OK;
}

export async function distributedShow(ctx: ManagerContext, arg: string, out: Out): Promise<number> {
  const d = distributed(ctx);
  const runId = await d.resolveRunId(arg);
  const answer = await d.status(ctx, { runId, outputBytes: 64 * 1024 }, { signal: new AbortController().signal });
  const { kind: _kind, ...view } = answer;
  out(JSON.stringify(view, null, 2));
  return EXIT_OK;
}

/** The run's output: its steps' output so far; with `follow`, as it arrives until the run ends (exit 0 only if completed). */
export async function distributedLogs(ctx: ManagerContext, arg: string, o: { follow?: boolean }, write: (s: string) => void): Promise<number> {
  const d = distributed(ctx);
  const runId = await d.resolveRunId(arg);
  const sent = new Map<string, number>();
  const signal = new AbortController().signal;
  for (;;) {
    const answer = await d.status(ctx, { runId, ...(o.follow ? { waitMs: 5000 } : {}) }, { signal });
    if (answer.kind !== 'run') return EXIT_FAILURE;
    const leaves = answer.steps.flatMap((s) => s.members ?? [s]);
    const keys = answer.mode === 'parallel' ? leaves.map((s) => `0.${s.index}`) : leaves.map((s) => String(s.index));
    for (const key of keys) {
      let offset = sent.get(key) ?? 0;
      for (;;) {
        const { buf } = await d.readBytes(ctx, runId, { step: key }, offset, 1024 * 1024);
        if (!buf.length) break;
        write(buf.toString('utf8'));
        offset += buf.length;
      }
      sent.set(key, offset);
    }
    if (!o.follow || isTerminalRun(answer.state as RunState)) return !o.follow || answer.state === 'completed' ? EXIT_OK : EXIT_FAILURE;
  }
}

export async function distributedCancel(ctx: ManagerContext, arg: string, out: Out): Promise<number> {
  const d = distributed(ctx);
  const runId = await d.resolveRunId(arg);
  const r = await d.cancel(ctx, runId);
  if (!isTerminalRun(r.state as RunState)) throw new CliError(`run ${runId} is still ${r.state}; its worker did not stop it within the grace. Retry, or check the worker.`);
  out(r.state === 'cancelled' ? `run ${runId} cancelled` : `run ${runId} had already ended: ${r.state}`);
  return EXIT_OK;
}

export async function distributedDismiss(ctx: ManagerContext, arg: string, o: { cancel?: boolean }, out: Out): Promise<number> {
  const d = distributed(ctx);
  const runId = await d.resolveRunId(arg);
  try {
    const r = await d.dismiss(ctx, runId, o.cancel === true);
    out(`run ${runId} dismissed (${r.cancelled ? 'cancelled first, ' : ''}${r.state})`);
    return EXIT_OK;
  } catch (e) {
    if ((e as { code?: string }).code === 'RUN_ACTIVE') throw new CliError(`run ${runId} is still active; dismiss --cancel stops it first, or wait for it to end.`);
    throw e;
  }
}

export async function distributedGc(ctx: ManagerContext, o: { olderThan: string; dryRun?: boolean; json?: boolean; branches?: boolean }, out: Out): Promise<number> {
  const olderThanMs = parseAge(o.olderThan);
  if (olderThanMs === null) throw new CliError(`--older-than ${JSON.stringify(o.olderThan)} is not an age like 30d, 12h, 90m or 2w (at most 100 years)`, EXIT_USAGE);
  const r = await distributed(ctx).collectGarbage(olderThanMs, o.dryRun === true, o.branches === true);
  if (o.json) { out(JSON.stringify(r, null, 2)); return EXIT_OK; }
  const verb = r.dryRun ? 'would remove' : 'removed';
  for (const c of r.removed) out(`${verb} ${c.runId} (ended ${c.endedAt}${c.dismissed ? ', dismissed' : ''})`);
  out(`${r.dryRun ? 'dry run: ' : ''}${verb} ${r.removed.length} run(s) from Redis; kept ${r.keptActive} active and ${r.keptRecent} that ended more recently`);
  if (r.branchesAsked) out(`asked the workers that ran ${r.branchesAsked} isolated run(s) to delete their branches (each in its own machine's checkout)`);
  return EXIT_OK;
}
