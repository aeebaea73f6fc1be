// Cold start (spawn → initialize → tools/list) and idle RSS (300 ms after tools/list) of our server, against a
// minimal server on the same SDK, unbundled and bundled into one file with esbuild. Rounds are interleaved so that
// load drifts hit every server alike.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { FIXTURES, MAIN_JS, cpuMs, REPO, SAMPLES, note, now, reapHome, report, rssMiB, runBench, serverEnv, sleep, startServer, stats, tempHome } from './lib.mjs';

/** tsc's entry, kept next to the bundle by scripts/bundle.mjs. */
const UNBUNDLED = path.join(path.dirname(MAIN_JS), 'main.unbundled.js');

/** Bundles the minimal server (the same way as ours: ESM, platform node, minified). */
function bundleMinimal(outDir) {
  const out = path.join(outDir, 'min-server.bundle.mjs');
  const esbuild = path.join(REPO, 'node_modules', '.bin', 'esbuild');
  execFileSync(esbuild, [path.join(FIXTURES, 'min-server.mjs'), '--bundle', '--platform=node', '--format=esm', '--minify',
    '--target=node20', `--outfile=${out}`, '--log-level=warning'], { stdio: 'inherit' });
  return out;
}

runBench(async () => {
  const h = tempHome();
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'sa-bundle-'));
  try {
    const bundled = bundleMinimal(tmp);
    const servers = [
      { name: 'ours', args: [MAIN_JS, 'serve'] },
      ...(fs.existsSync(UNBUNDLED) ? [{ name: 'ours, unbundled', args: [UNBUNDLED, 'serve'] }] : []),
      { name: 'minimal SDK server, unbundled', args: [path.join(FIXTURES, 'min-server.mjs')] },
      { name: 'minimal SDK server, bundled', args: [bundled] },
    ];
    const cold = new Map(servers.map((s) => [s.name, []]));
    const rss = new Map(servers.map((s) => [s.name, []]));
    const cpu = new Map(servers.map((s) => [s.name, []]));
    const rssRounds = Math.max(3, Math.round(SAMPLES / 3));
    for (let i = 0; i < SAMPLES + 1; i++) {
      for (const sv of servers) {
        const t0 = now();
        const s = await startServer(serverEnv(h), { args: sv.args });
        await s.client.listTools();
        const ms = now() - t0;
        const c = cpuMs(s.pid);
        if (i > 0) { cold.get(sv.name).push(ms); cpu.get(sv.name).push(c); }
        if (i > 0 && i <= rssRounds) {
          await sleep(300);
          rss.get(sv.name).push(rssMiB(s.pid));
        }
        await s.close();
      }
    }
    const bundledCold = stats(cold.get('minimal SDK server, bundled'));
    report('cold start, ours (spawn → initialize → tools/list)', cold.get('ours'), bundledCold, { note: 'floor = minimal SDK server bundled; target ratio ≤ 1.5' });
    if (cold.has('ours, unbundled')) report('cold start, ours unbundled (tsc output)', cold.get('ours, unbundled'), bundledCold);
    report('cold start, minimal SDK server unbundled', cold.get('minimal SDK server, unbundled'), bundledCold);
    const bundledCpu = stats(cpu.get('minimal SDK server, bundled'));
    for (const sv of servers) {
      if (sv.name === 'minimal SDK server, bundled') continue;
      report(`cold start CPU time, ${sv.name}`, cpu.get(sv.name), bundledCpu, { note: 'the server\'s own CPU until tools/list answered (load-independent); floor = minimal SDK server bundled' });
    }
    const bundledRss = stats(rss.get('minimal SDK server, bundled'));
    report('idle RSS, ours', rss.get('ours'), bundledRss, { unit: 'MiB', note: 'floor = minimal SDK server bundled; target ≤ 57 MiB' });
    if (rss.has('ours, unbundled')) report('idle RSS, ours unbundled (tsc output)', rss.get('ours, unbundled'), bundledRss, { unit: 'MiB' });
    report('idle RSS, minimal SDK server unbundled', rss.get('minimal SDK server, unbundled'), bundledRss, { unit: 'MiB' });
    note(`ours = ${path.relative(REPO, MAIN_JS)} (${fs.statSync(MAIN_JS).size} bytes)`);
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
    await reapHome(h.home);
    h.cleanup();
  }
});
