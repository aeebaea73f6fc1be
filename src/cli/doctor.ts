import path from 'node:path';
import type { ManagerContext } from '../manager/context.js';
import { runDoctor } from '../manager/doctor.js';
import { formatBytes, printable, table } from '../format.js';

/** Prints the doctor report; exit 1 when something is wrong enough that a server would refuse to work. */
export async function doctorCommand(ctx: ManagerContext, version: string, o: { json?: boolean }, out: (s: string) => void): Promise<number> {
  const r = await runDoctor(ctx, version);
  const code = r.problems.length ? 1 : 0;
  if (o.json) {
    out(JSON.stringify(r, null, 2));
    return code;
  }
  // Paths, names and reasons come from the file system and agent files: shown with their control characters escaped.
  const p = printable;
  const mark = (ok: boolean) => (ok ? 'ok  ' : 'FAIL');
  out(`subagents-mcp ${r.version} · node ${r.node} · ${r.platform}`);
  out(`run as: ${r.command} <command>`);
  out('');
  out('State home');
  out(`  ${mark(r.home.problems.length === 0)}  ${p(r.home.path)}  (from ${r.home.source})`);
  if (!r.home.exists) {
    if (r.home.problems.length === 0) out('        does not exist yet; the first server creates it (mode 700)');
  } else out(`        mode ${r.home.mode}, ${r.home.runs} run(s), ${formatBytes(r.home.bytes)}`);
  for (const x of r.home.problems) out(`        ${p(x)}`);
  out('');
  out('Limits and settings in force (flag > environment > default)');
  out(table(['  SETTING', 'FROM', 'VALUE'], r.settings.map((s) => [`  ${s.env}`, s.source, p(s.value)])));
  out(`  capacity now: ${r.capacity.activeRuns} of ${r.capacity.maxActiveRuns === 0 ? 'unlimited' : r.capacity.maxActiveRuns} active runs, ${r.capacity.liveAgents} of ${r.capacity.maxAgents} agent processes`);
  out(`  queue now: ${r.capacity.queued} of ${r.capacity.maxQueued} launches waiting${r.capacity.oldestQueuedMs !== null ? `, the oldest for ${Math.round(r.capacity.oldestQueuedMs / 1000)} s` : ''}`);
  out('');
  out('Backends');
  for (const b of r.backends) {
    const state = b.usable ? 'ok  ' : b.found ? 'FAIL' : '--  ';
    out(`  ${state}  ${b.backend.padEnd(9)}${b.bin ? `${b.bin}${b.version ? `  (${b.version})` : ''}` : ''}${b.problem ? `${b.bin ? '  ' : ''}${b.problem}` : ''}`);
  }
  out('');
  out(`Agents (project ${p(r.agents.projectDir)}: ${r.agents.projectTrusted ? 'trusted' : 'not trusted'})`);
  for (const a of r.agents.available) {
    out(`  ${a.available ? 'ok  ' : '--  '}  ${p(a.name)} (${a.backend}, ${a.source}${a.trusted ? '' : ', untrusted'})${a.problem ? `: ${p(a.problem)}` : ''}`);
    for (const w of a.warnings ?? []) out(`        warning: ${p(w)}`);
  }
  if (r.agents.refused.length) {
    out('  refused:');
    for (const f of r.agents.refused) out(`    ${p(f.name ?? path.basename(f.path))} (${f.source}) ${p(f.path)}: ${p(f.reason)}`);
  }
  out('');
  out('Environment passed to agents (names only, never values)');
  out(`  pass-through set here: ${r.passThrough.set.length ? r.passThrough.set.join(' ') : '(none)'}`);
  for (const c of r.passThrough.credentials) {
    if (c.known.length) out(`  ${c.backend} credentials set: ${c.set.length ? c.set.join(' ') : '(none)'}`);
  }
  if (r.passThrough.blocked.length) out(`  set but never passed: ${r.passThrough.blocked.join(' ')}`);
  out('');
  if (r.distributed) {
    const d = r.distributed;
    out(`Distributed mode (pool ${d.pool})`);
    out(`  ${mark(d.reachable)}  Redis ${d.url}${d.reachable ? `: version ${d.version}, persistence ${d.persistence?.aof ? 'AOF' : d.persistence?.rdb ? 'RDB snapshots only' : 'OFF'}` : `: ${d.problem}`}`);
    if (d.reachable) {
      out(`  runs now: ${d.active} active, ${d.queued} queued (across every server and worker)`);
      if (!d.workers.length) out('  workers seen: none');
      for (const w of d.workers) out(`  worker ${w.id} on ${w.host}: pool ${w.pool}, ${w.running} of ${w.concurrency} running, last heartbeat ${Math.round(w.lastSeenMs / 1000)} s ago`);
    }
    out('');
  }
  out('Runs needing attention');
  if (!r.attention.length) out('  none');
  for (const a of r.attention) out(`  ${a.runId} (${a.state}): ${p(a.problem)}`);
  out('');
  for (const w of r.warnings) out(`warning: ${p(w)}`);
  for (const x of r.problems) out(`problem: ${p(x)}`);
  out(r.problems.length ? `${r.problems.length} problem(s) found` : 'no problems found');
  return code;
}
