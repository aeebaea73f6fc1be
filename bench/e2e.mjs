// End to end: launch → status(waitMs, until terminal) → output, for an instant agent (`true`) and a 1000 ms agent
// (`sleep 1`); overhead = total − the agent's own spawn→exit measured in the same run. And 8 concurrent launches
// (wall) against 8 concurrent bare detached-runner handshakes (the floor's 8-way wall).
import {
  SAMPLES, handshakeFloor, handshakeFloorConcurrent, now, reapHome, report, runBench, scaled, serverEnv, spawnExitTimes,
  startServer, stats, tempHome, writeAgent, note,
} from './lib.mjs';

runBench(async () => {
  const h = tempHome();
  writeAgent(h.home, 'instant', { backend: 'command', command: ['true'] });
  writeAgent(h.home, 'second', { backend: 'command', command: ['sleep', '1'] });
  const s = await startServer(serverEnv(h));
  try {
    const endToEnd = async (agent) => {
      const t0 = now();
      const l = await s.call('launch', { agent, task: 'x' });
      const runId = l.structuredContent.runId;
      let st;
      do {
        st = (await s.call('status', { runId, waitMs: 30_000, until: 'terminal' })).structuredContent;
      } while (!['completed', 'failed', 'cancelled'].includes(st.state));
      if (st.state !== 'completed') throw new Error(`run ${runId} ${st.state}`);
      return now() - t0;
    };
    const floor = await handshakeFloor(scaled(30));
    const trueAlone = stats(await spawnExitTimes(['true'], SAMPLES));
    for (let i = 0; i < 3; i++) await endToEnd('instant');
    const instant = [];
    for (let i = 0; i < SAMPLES; i++) instant.push(await endToEnd('instant'));
    report('e2e instant agent (launch → terminal status)', instant, floor.started.median + trueAlone.median,
      { note: `floor = bare handshake ${floor.started.median.toFixed(1)} + agent alone ${trueAlone.median.toFixed(1)} ms` });

    const sleepAlone = stats(await spawnExitTimes(['sleep', '1'], scaled(10), { warm: 0 }));
    const slow = [];
    for (let i = 0; i < scaled(30); i++) slow.push(await endToEnd('second'));
    const overhead = slow.map((x) => x - sleepAlone.median);
    report('e2e 1000 ms agent, total', slow, sleepAlone.median, { note: 'floor = `sleep 1` alone' });
    report('e2e 1000 ms agent, overhead (total − agent alone)', overhead, floor.started, { note: 'floor = bare handshake proceed-seen' });

    const k = 8;
    const floor8 = await handshakeFloorConcurrent(k, scaled(30));
    const walls = [];
    for (let i = 0; i < scaled(30) + 1; i++) {
      const t0 = now();
      const ls = await Promise.all(Array.from({ length: k }, () => s.call('launch', { agent: 'instant', task: 'x' })));
      if (i > 0) walls.push(now() - t0);
      // let those runs finish before the next round (they would otherwise compete for the 2 cores)
      for (const l of ls) await s.call('status', { runId: l.structuredContent.runId, waitMs: 30_000, until: 'terminal' });
      await reapHome(h.home, 2000);
    }
    report(`${k} concurrent launches, wall`, walls, floor8, { note: `floor = ${k} concurrent bare handshakes` });
    note(`bare handshake floor: ready ${floor.ready.median.toFixed(1)} ms, proceed-seen ${floor.started.median.toFixed(1)} ms (p90 ${floor.started.p90.toFixed(1)})`);
  } finally {
    await s.close();
    await reapHome(h.home);
    h.cleanup();
  }
});
