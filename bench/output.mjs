// Output capture: MB/s of agent output written to the run's files, against `cat` copying the same bytes from a pipe
// to a file. The agent is `head -c N /dev/zero` (a producer that costs nothing); ours is timed by the step's own
// startedAt → endedAt (it includes the agent's spawn and the step's bookkeeping), the floor by spawn → exit of
// `sh -c 'head -c N /dev/zero | cat > file'`.
import fs from 'node:fs';
import path from 'node:path';
import { SAMPLES, cleanEnv, reapHome, report, runBench, scaled, serverEnv, spawnExitTimes, startServer, stats, tempHome, writeAgent } from './lib.mjs';

const MB = Number(process.env.BENCH_OUTPUT_MB) || 32;
const BYTES = MB * 1024 * 1024;

runBench(async () => {
  const h = tempHome();
  writeAgent(h.home, 'flood', { backend: 'command', command: ['head', '-c', String(BYTES), '/dev/zero'] });
  const s = await startServer(serverEnv(h));
  try {
    const n = scaled(30);
    const floorFile = path.join(h.base, 'cat.out');
    const ours = [];
    const floor = [];
    const nodeFloor = [];
    // The same shape in a bare node process (pipe 'data' events → writeSync), to tell Node's own cost from ours.
    const nodeCopy = `const fs=require('fs');const {spawn}=require('child_process');const fd=fs.openSync(process.argv[1],'w');
      const c=spawn('head',['-c','${BYTES}','/dev/zero'],{stdio:['ignore','pipe','ignore']});
      c.stdout.on('data',(b)=>{let o=0;while(o<b.length)o+=fs.writeSync(fd,b,o);});c.on('close',()=>fs.closeSync(fd));`;
    for (let i = 0; i < n + 1; i++) {
      const [ms] = await spawnExitTimes(['sh', '-c', `head -c ${BYTES} /dev/zero | cat > '${floorFile}'`], 1, { warm: 0, env: cleanEnv() });
      fs.rmSync(floorFile, { force: true });
      const [nodeMs] = await spawnExitTimes([process.execPath, '-e', nodeCopy, floorFile], 1, { warm: 0, env: cleanEnv() });
      fs.rmSync(floorFile, { force: true });
      const runId = (await s.call('launch', { agent: 'flood', task: 'x' })).structuredContent.runId;
      const st = (await s.call('status', { runId, waitMs: 60_000, until: 'terminal' })).structuredContent;
      const step = st.steps[0];
      if (st.state !== 'completed' || step.output.bytes !== BYTES) throw new Error(`flood run ${st.state}, ${step.output.bytes} bytes`);
      const runMs = Date.parse(step.endedAt) - Date.parse(step.startedAt);
      fs.rmSync(path.join(h.home, 'runs', runId, 'out'), { recursive: true, force: true });
      if (i > 0) { ours.push(MB / (Math.max(1, runMs) / 1000)); floor.push(MB / (ms / 1000)); nodeFloor.push(MB / (nodeMs / 1000)); }
    }
    const f = stats(floor);
    report(`output capture, ${MB} MiB`, ours, f, { unit: 'MiB/s', note: 'floor = `cat` from a pipe to a file; target ratio ≥ 0.5' });
    report(`bare node pipe → file copy, ${MB} MiB`, nodeFloor, f, { unit: 'MiB/s', note: 'a node process copying the same pipe: Node\'s own share' });
  } finally {
    await s.close();
    await reapHome(h.home);
    h.cleanup();
  }
});
