// Wake-up: from the runner's terminal write of status.json to the client receiving the status(waitMs) answer.
// The write is the rename that publishes it. This process watches the run's directory too, so it sees that rename at
// the moment the server does; the figure is rename seen → answer, plus the floor's median for the event's delivery
// (the floor is a whole write, rename and wake, so this overstates, never flatters). Floor: a plain child process
// renames a file carrying its own sub-ms wall-clock stamp while this process waits on fs.watch.
// A second line keeps the earlier, looser bound: the write time taken as the latest of the status's `updatedAt` (set
// before the write and its fsync, whole milliseconds) and the file's mtime and ctime (the kernel's coarse tick).
import fs from 'node:fs';
import path from 'node:path';
import { SAMPLES, reapHome, report, runBench, serverEnv, startServer, tempHome, wallNow, watchFloor, writeAgent } from './lib.mjs';

runBench(async () => {
  const h = tempHome();
  writeAgent(h.home, 'short', { backend: 'command', command: ['sleep', '0.3'] });
  const s = await startServer(serverEnv(h));
  try {
    const floorDir = path.join(h.base, 'floor');
    fs.mkdirSync(floorDir);
    const floor = await watchFloor(floorDir, SAMPLES);
    const xs = [];
    const bound = [];
    for (let i = 0; i < SAMPLES + 2; i++) {
      const l = await s.call('launch', { agent: 'short', task: 'x' });
      const runId = l.structuredContent.runId;
      const file = path.join(h.home, 'runs', runId, 'status.json');
      // The clock is read before the file: the read is this watcher's cost, not the server's.
      let sawAt = null;
      const watcher = fs.watch(path.dirname(file), (_event, name) => {
        if (name !== 'status.json' || sawAt !== null) return;
        const at = wallNow();
        try { if (JSON.parse(fs.readFileSync(file, 'utf8')).state === 'completed') sawAt = at; } catch { /* mid-rename or not terminal */ }
      });
      const r = await s.call('status', { runId, waitMs: 30_000, until: 'terminal' });
      const answeredAt = wallNow();
      watcher.close();
      if (r.structuredContent.state !== 'completed' || !r.structuredContent.changed || sawAt === null) { i--; continue; }
      const st = JSON.parse(fs.readFileSync(file, 'utf8'));
      // rename(2) sets the inode's ctime: the moment the new status became visible (the fsync before it excluded).
      const fst = fs.statSync(file, { bigint: true });
      const wroteAt = Math.max(Number(fst.ctimeNs) / 1e6, Number(fst.mtimeNs) / 1e6, Date.parse(st.updatedAt));
      if (process.env.BENCH_DEBUG) console.error(fst.ctimeNs, fst.mtimeNs, st.updatedAt, answeredAt);
      if (i >= 2) { xs.push(answeredAt - sawAt); bound.push(answeredAt - wroteAt); }
    }
    const floorMs = [...floor].sort((a, b) => a - b)[Math.floor(floor.length / 2)];
    report('wake-up: terminal write → status(waitMs) answer', xs.map((x) => x + floorMs), { median: floorMs },
      { note: 'rename seen by a watcher in the client → answer, + the floor median; floor = fs.watch wake of a rename in another process; target p90 ≤ 5 ms' });
    report('wake-up, earlier bound (updatedAt/mtime/ctime → answer)', bound, { median: floorMs },
      { note: 'upper bound: counts the terminal write and its fsync, and clock ticks of up to 4 ms' });
  } finally {
    await s.close();
    await reapHome(h.home);
    h.cleanup();
  }
});
