// A warm runner's first agent from its pre-started stub (src/runner/agent-stub.ts) against the same agent spawned
// from this Node process, interleaved, with the same instant fake agent (a shell script that echoes):
//   - the thread's stall: how long the call blocks this process (spawn waits for the child's exec; the stub's go is
//     one write),
//   - start → exit: from the call to the agent's exit event (what a run's first step waits for).
// The stub's own start (a spawn of dash, while the runner is idle) is measured too: it moves off the launch's path.
import fs from 'node:fs';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { REPO, note, now, report, runBench, stats, tempHome } from './lib.mjs';

const { AgentStub, stubScript } = await import(path.join(REPO, 'dist', 'runner', 'agent-stub.js'));
const N = Number(process.env.BENCH_SAMPLES) || 40;

runBench(async () => {
  const h = tempHome('sa-bench-stub-');
  const agent = path.join(h.base, 'agent.sh');
  fs.writeFileSync(agent, '#!/bin/sh\necho done\n', { mode: 0o755 });
  const env = { PATH: '/usr/bin:/bin', HOME: h.base, SUBAGENTS_RUN_TOKEN: 'x'.repeat(32) };
  const probe = await AgentStub.start(h.home);
  if (!probe) { note('no agent stub on this machine (it needs dash on Linux): nothing to measure'); h.cleanup(); return; }
  await probe.dispose();
  const stall = { stub: [], spawn: [] };
  const toExit = { stub: [], spawn: [] };
  const boot = [];
  for (let i = 0; i < N + 3; i++) {
    const b0 = now();
    const stub = await AgentStub.start(h.home);
    const bootMs = now() - b0;
    await new Promise((r) => setTimeout(r, 10)); // idle, as a warm runner is between runs
    stub.onChunk = () => {};
    const script = stubScript({ argv: [agent, '-p', 'x'], env, cwd: h.root, umask: 0o022, stdin: true });
    const exited = new Promise((r) => stub.child.once('exit', r));
    const t0 = now();
    stub.exec(script);
    const t1 = now();
    stub.child.stdin.end('task');
    await exited;
    const t2 = now();
    stub.release();
    stub.channel?.reader.destroy();
    stub.child.stderr?.destroy();

    const s0 = now();
    const child = spawn(agent, ['-p', 'x'], { cwd: h.root, env, stdio: ['pipe', 'pipe', 'pipe'] });
    const s1 = now();
    child.stdin.on('error', () => {});
    child.stdin.end('task');
    child.stdout.resume();
    child.stderr.resume();
    await new Promise((r) => child.once('exit', r));
    const s2 = now();
    if (i < 3) continue; // warm-up
    boot.push(bootMs);
    stall.stub.push(t1 - t0); toExit.stub.push(t2 - t0);
    stall.spawn.push(s1 - s0); toExit.spawn.push(s2 - s0);
  }
  const spawnStall = stats(stall.spawn);
  const spawnExit = stats(toExit.spawn);
  report('agent start, thread stall: spawn', spawnStall, null);
  report('agent start, thread stall: stub', stats(stall.stub), spawnStall, { note: 'ratio to spawn' });
  report('agent start → exit: spawn', spawnExit, null);
  report('agent start → exit: stub', stats(toExit.stub), spawnExit, { note: 'ratio to spawn' });
  report('stub start while idle (off the path)', stats(boot), null);
  h.cleanup();
});
