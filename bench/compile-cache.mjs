// Cold start (spawn → initialize → tools/list) of our server on a Node that has module.enableCompileCache (22.1+),
// with the compile cache (warm: the first round fills it) and without it (NODE_DISABLE_COMPILE_CACHE=1), against
// `node -e 0` on the same Node. Rounds are interleaved so that load drifts hit both alike. On Node 20 there is no
// such cache: the bench says so and measures nothing. The Node comes from BENCH_NODE, else the Node 24 of the test
// cache (test/helpers/node-lines.ts installs it), else the running one.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { MAIN_JS, SAMPLES, cpuMs, note, now, reapHome, report, runBench, serverEnv, spawnExitTimes, startServer, stats, tempHome, cleanEnv } from './lib.mjs';

const cache = process.env.SUBAGENTS_CLI_CACHE ?? path.join(path.dirname(MAIN_JS), '..', 'node_modules', '.cache', 'subagents-cli');
const cached24 = path.join(cache, 'node-24.22.3', 'node_modules', '.bin', 'node');
const node = process.env.BENCH_NODE ?? (fs.existsSync(cached24) ? cached24 : process.execPath);

runBench(async () => {
  const version = (await import('node:child_process')).execFileSync(node, ['-p', 'process.version + " " + typeof require("node:module").enableCompileCache'], { encoding: 'utf8' }).trim();
  if (!version.endsWith('function')) {
    note(`${node} (${version}) has no module.enableCompileCache: nothing to measure`);
    return;
  }
  const h = tempHome();
  const cacheHome = fs.mkdtempSync(path.join(os.tmpdir(), 'sa-compile-cache-'));
  try {
    const floor = stats(await spawnExitTimes([node, '-e', '0'], SAMPLES, { env: cleanEnv() }));
    const sides = [
      { name: 'with the compile cache', env: serverEnv(h, { XDG_CACHE_HOME: cacheHome }) },
      { name: 'without (NODE_DISABLE_COMPILE_CACHE=1)', env: serverEnv(h, { XDG_CACHE_HOME: cacheHome, NODE_DISABLE_COMPILE_CACHE: '1' }) },
    ];
    const wall = new Map(sides.map((s) => [s.name, []]));
    const cpu = new Map(sides.map((s) => [s.name, []]));
    for (let i = 0; i < SAMPLES + 1; i++) {
      for (const side of sides) {
        const t0 = now();
        const s = await startServer(side.env, { command: node });
        await s.client.listTools();
        const ms = now() - t0;
        const c = cpuMs(s.pid);
        if (i > 0) { wall.get(side.name).push(ms); cpu.get(side.name).push(c); }
        await s.close();
      }
    }
    const without = stats(wall.get(sides[1].name));
    report(`cold start on ${version.split(' ')[0]}, with the compile cache`, wall.get(sides[0].name), without, { note: 'floor = the same without the cache' });
    report(`cold start on ${version.split(' ')[0]}, without the compile cache`, without, floor, { note: 'floor = node -e 0' });
    report('cold start CPU time, with the compile cache', cpu.get(sides[0].name), stats(cpu.get(sides[1].name)), { note: "the server's own CPU until tools/list answered; floor = without the cache" });
  } finally {
    fs.rmSync(cacheHome, { recursive: true, force: true });
    await reapHome(h.home);
    h.cleanup();
  }
});
