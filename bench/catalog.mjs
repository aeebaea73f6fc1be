// Catalog size: `launch` and `agents` latency with 30 agent files in the state home against the same with one, each
// home with its own server, sampled in turn. Every launch reads the catalog again (an edit takes effect at the next
// launch) and freezes it for nested launches, so what a launch costs must not grow much with the agents a user keeps.
import fs from 'node:fs';
import path from 'node:path';
import { SAMPLES, now, reapHome, report, runBench, serverEnv, startServer, tempHome, writeAgent } from './lib.mjs';

const MANY = Number(process.env.BENCH_CATALOG_AGENTS) || 30;

runBench(async () => {
  const small = tempHome();
  const large = tempHome();
  writeAgent(small.home, 'instant', { backend: 'command', command: ['true'] });
  writeAgent(large.home, 'instant', { backend: 'command', command: ['true'] });
  // Modelled on a real collection: a paragraph of prompt each, a tool list, a handful of backends.
  const backends = ['claude', 'codex', 'gemini', 'command'];
  for (let i = 1; i < MANY; i++) {
    const backend = backends[i % backends.length];
    writeAgent(large.home, `agent-${i}`, {
      backend, ...(backend === 'command' ? { command: ['true'] } : { tools: ['Read', 'Grep', 'Glob'] }), timeoutMs: 600000,
    }, `You are agent ${i}. ${'Review the change for correctness and say what you found. '.repeat(12)}`);
  }
  const servers = [await startServer(serverEnv(small)), await startServer(serverEnv(large))];
  const launches = [[], []];
  const lists = [[], []];
  try {
    for (let i = 0; i < SAMPLES + 3; i++) {
      for (const k of i % 2 ? [0, 1] : [1, 0]) {
        const s = servers[k];
        let t0 = now();
        const runId = (await s.call('launch', { agent: 'instant', task: 'x' })).structuredContent.runId;
        const launchMs = now() - t0;
        await s.call('status', { runId, waitMs: 30_000, until: 'terminal' });
        t0 = now();
        const listed = (await s.call('agents', {})).structuredContent.agents.length;
        const listMs = now() - t0;
        if (k === 1 && listed < MANY) throw new Error(`the large catalog lists ${listed} agents`);
        if (i >= 3) { launches[k].push(launchMs); lists[k].push(listMs); }
      }
    }
    const files = fs.readdirSync(path.join(large.home, 'agents')).length;
    report(`launch, ${files} agent files / 1`, launches[1], [...launches[0]].sort((a, b) => a - b)[launches[0].length >> 1], { note: 'floor = the same launch with one agent file; interleaved' });
    report(`agents tool, ${files} agent files / 1`, lists[1], [...lists[0]].sort((a, b) => a - b)[lists[0].length >> 1], { note: 'floor = the same call with one agent file; interleaved' });
  } finally {
    for (const s of servers) await s.close();
    for (const h of [small, large]) { await reapHome(h.home); h.cleanup(); }
  }
});
