// The runner on its own: boot to ready (spawn of `node dist/runner/main.cjs <runDir>` → its ready.json appears)
// against `node -e 0` and the bare builtins-only runner (interleaved); and its RSS while it supervises an agent against the bare
// runner's RSS while it supervises `sleep`.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import {
  FIXTURES, MAIN_JS, SAMPLES, alive, cleanEnv, now, reapHome, report, rssMiB, runBench, scaled, serverEnv, sleep,
  startServer, stats, tempHome, until, waitForName, writeAgent,
} from './lib.mjs';

// The bundled build's entry, else tsc's (a build made without esbuild, or an older build given by BENCH_MAIN_JS).
const RUNNER = ['main.cjs', 'main.js'].map((f) => path.join(path.dirname(MAIN_JS), 'runner', f)).find((f) => fs.existsSync(f));

/** spawn → `ready.json` seen, for a runner program given a run directory; the runner is then killed (group). */
async function bootToReady(argv, runDir, env) {
  try { fs.unlinkSync(path.join(runDir, 'ready.json')); } catch { /* first */ }
  const t0 = now();
  const child = spawn(process.execPath, [...argv, runDir], { detached: true, stdio: 'ignore', env, cwd: runDir });
  child.unref();
  await waitForName(runDir, 'ready.json');
  const ms = now() - t0;
  try { process.kill(-child.pid, 'SIGKILL'); } catch { /* gone */ }
  await until(() => !alive(child.pid), 5000, 2);
  return ms;
}

runBench(async () => {
  const h = tempHome();
  writeAgent(h.home, 'hold', { backend: 'command', command: ['sleep', '5'] });
  writeAgent(h.home, 'instant', { backend: 'command', command: ['true'] });
  const s = await startServer(serverEnv(h, { SUBAGENTS_KILL_GRACE_MS: '300' }));
  try {
    // A real run record to boot runners on: copied into fresh run dirs (the runner reads it, then reports ready).
    const l = await s.call('launch', { agent: 'instant', task: 'x' });
    const src = path.join(h.home, 'runs', l.structuredContent.runId);
    const bootDir = path.join(h.base, 'boot');
    const floorDir = path.join(h.base, 'floor');
    fs.mkdirSync(bootDir, { mode: 0o700 });
    fs.mkdirSync(floorDir, { mode: 0o700 });
    fs.copyFileSync(path.join(src, 'run.json'), path.join(bootDir, 'run.json'));
    const nodeXs = [];
    const ours = [];
    const bare = [];
    const lean = [];
    const oursCa = [];
    const nodeCa = [];
    const ca = fs.existsSync('/etc/ssl/certs/ca-certificates.crt') ? '/etc/ssl/certs/ca-certificates.crt' : null;
    for (let i = 0; i < SAMPLES + 2; i++) {
      const a = await bootToReady([RUNNER], bootDir, cleanEnv());
      const b = await bootToReady([path.join(FIXTURES, 'floor-runner.mjs')], floorDir, cleanEnv());
      const c = await bootToReady([path.join(FIXTURES, 'floor-runner.cjs')], floorDir, cleanEnv());
      const t0 = now();
      await new Promise((r) => spawn(process.execPath, ['-e', '0'], { stdio: 'ignore', env: cleanEnv() }).on('close', r));
      const n0 = now() - t0;
      if (i >= 2) { ours.push(a); bare.push(b); lean.push(c); nodeXs.push(n0); }
    }
    const node = stats(nodeXs);
    report('runner boot to ready', ours, node, { note: 'floor = `node -e 0` spawn → exit; target ratio ≤ 1.3' });
    report('bare builtins-only runner boot to ready', bare, node);
    report('lean bare runner boot to ready', lean, node, { note: 'the bare runner as CommonJS, no child_process before ready (as ours)' });
    if (ca) {
      for (let i = 0; i < scaled(10) + 1; i++) {
        const t0 = now();
        await new Promise((r) => spawn(process.execPath, ['-e', '0'], { stdio: 'ignore', env: cleanEnv({ NODE_EXTRA_CA_CERTS: ca }) }).on('close', r));
        const n = now() - t0;
        const a = await bootToReady([RUNNER], bootDir, cleanEnv({ NODE_EXTRA_CA_CERTS: ca }));
        if (i > 0) { nodeCa.push(n); oursCa.push(a); }
      }
      report('runner boot to ready, NODE_EXTRA_CA_CERTS set (a user\'s env passes it on)', oursCa, node,
        { note: `\`node -e 0\` with it: ${stats(nodeCa).median.toFixed(1)} ms` });
    }

    // RSS while supervising: our runner with a `sleep` agent, and the bare runner supervising `sleep`.
    const rss = [];
    const bareRss = [];
    const n = scaled(30);
    for (let i = 0; i < n; i++) {
      const r = await s.call('launch', { agent: 'hold', task: 'x' });
      const runId = r.structuredContent.runId;
      let runnerPid = null;
      const end = now() + 10_000;
      while (now() < end) {
        const v = (await s.call('status', { runId })).structuredContent;
        if (v.steps[0].state === 'running' && v.steps[0].pid) { runnerPid = v.runnerPid; break; }
        await sleep(20);
      }
      await sleep(300);
      if (runnerPid) rss.push(rssMiB(runnerPid));
      await s.call('cancel', { runId });
      const dir = path.join(floorDir, `rss-${i}`);
      fs.mkdirSync(dir);
      const child = spawn(process.execPath, [path.join(FIXTURES, 'floor-runner.mjs'), dir, '5000', 'agent'], { detached: true, stdio: 'ignore', env: cleanEnv() });
      child.unref();
      await waitForName(dir, 'ready.json');
      fs.writeFileSync(path.join(dir, 'proceed.json'), '{}');
      await waitForName(dir, 'started.json');
      await sleep(300);
      bareRss.push(rssMiB(child.pid));
      try { process.kill(-child.pid, 'SIGKILL'); } catch { /* gone */ }
    }
    report('runner RSS while supervising an agent', rss, stats(bareRss), { unit: 'MiB', note: 'floor = bare runner supervising `sleep`; target ≤ 51 MiB' });
  } finally {
    await s.close();
    await reapHome(h.home);
    h.cleanup();
  }
});
