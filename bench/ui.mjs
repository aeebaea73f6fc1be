// The dashboard (`subagents-mcp ui`), driven in the Debian package's headless Chromium (CHROMIUM=/path to change it):
// 1. first view with 10 000 finished runs in the home: `ui` started → URL printed (the home read), and page opened →
//    tree drawn, each against the same figure with 100 runs measured in this run;
// 2. a run's state change (the time stamped in its status) → the page showing it, against the floor of a file-watch wake-up (a plain process renames a
//    file while this one waits on fs.watch: what the ui server itself waits on). Target: ≤ floor + 100 ms;
// 3. idle CPU of the ui server with the page open, against an idle MCP server of the same home (CPU ms per second).
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { chromium } from 'playwright-core';
import { FAKE_AGENT, MAIN_JS, SAMPLES, cleanEnv, cpuMs, generateFinishedRuns, note, now, reapHome, report, runBench, scaled, serverEnv, sleep, startServer, stats, tempHome, templateRun, watchFloor, writeAgent } from './lib.mjs';

const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';
const BIG = Number(process.env.BENCH_UI_RUNS) || 10_000;
const IDLE_WINDOW_MS = 10_000;

function startUi(home) {
  const t0 = now();
  const child = spawn(process.execPath, [MAIN_JS, 'ui', '--no-open'], { env: cleanEnv({ SUBAGENTS_HOME: home }), stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stderr.on('data', (c) => { err += c.toString(); });
  return new Promise((resolve, reject) => {
    child.stdout.on('data', (c) => {
      out += c.toString();
      const m = /(http:\/\/127\.0\.0\.1:\d+\/\?token=\S+)/.exec(out);
      if (m) resolve({ child, url: m[1], readyMs: now() - t0, stop: () => { child.kill('SIGTERM'); } });
    });
    child.on('exit', (code) => reject(new Error(`ui exited ${code}: ${err}`)));
  });
}

runBench(async () => {
  if (!fs.existsSync(CHROMIUM)) { note(`no Chromium at ${CHROMIUM}: skipped (set CHROMIUM)`); return; }
  const small = tempHome();
  const big = tempHome();
  for (const h of [small, big]) {
    writeAgent(h.home, 'instant', { backend: 'command', command: ['true'] });
  }
  const browser = await chromium.launch({
    executablePath: CHROMIUM, headless: true, chromiumSandbox: false,
    args: ['--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  const uis = [];
  try {
    const template = await templateRun(small);
    generateFinishedRuns(small.home, template, 100);
    generateFinishedRuns(big.home, template, BIG);

    // 1. First view.
    const ready = [[], []];
    const drawn = [[], []];
    for (let r = 0; r < scaled(5); r++) {
      for (const [i, h] of [small, big].entries()) {
        const ui = await startUi(h.home);
        ready[i].push(ui.readyMs);
        const page = await browser.newPage();
        const t0 = now();
        await page.goto(ui.url);
        await page.locator('table.runs tbody tr').first().waitFor({ timeout: 60_000 });
        drawn[i].push(now() - t0);
        await page.close();
        ui.stop();
        await new Promise((res) => ui.child.on('exit', res));
      }
    }
    report(`ui ${BIG} runs: ui start → URL printed`, ready[1], stats(ready[0]), { note: 'floor: the same with 100 runs' });
    report(`ui ${BIG} runs: page open → first page of the tree drawn (Chromium)`, drawn[1], stats(drawn[0]), { note: 'floor: the same with 100 runs' });
    report(`ui ${BIG} runs: first view (start + page drawn)`, ready[1].map((x, i) => x + drawn[1][i]), stats(ready[0].map((x, i) => x + drawn[0][i])), { note: 'target ≤ 1000 ms' });

    // 2. A state change on the page, on the big home.
    writeAgent(big.home, 'gated', { backend: 'command', command: ['node', FAKE_AGENT, 'gate', path.join(big.base, 'gate')] });
    const s = await startServer(serverEnv(big));
    const ui = await startUi(big.home);
    uis.push(ui);
    const page = await browser.newPage();
    await page.goto(ui.url);
    await page.locator('table.runs').waitFor();
    const floorDir = path.join(big.base, 'floor');
    fs.mkdirSync(floorDir);
    const floor = await watchFloor(floorDir, SAMPLES);
    const lag = [];
    const n = scaled(15);
    for (let i = 0; i < n + 2; i++) {
      const gate = path.join(big.base, 'gate');
      fs.rmSync(gate, { force: true });
      const runId = (await s.call('launch', { agent: 'gated', task: 'x' })).structuredContent.runId;
      await page.locator(`tr[data-run="${runId}"] .badge`, { hasText: 'running' }).waitFor({ timeout: 30_000 });
      // The page notes the wall time at which the row says "completed" (a MutationObserver: no polling). Both sides
      // read Date.now(): Chromium's performance.timeOrigin is not the same clock as Node's.
      await page.evaluate((id) => {
        const w = window;
        w.__observer?.disconnect();
        w.__doneAt = 0;
        const check = () => { const b = document.querySelector(`tr[data-run="${id}"] .badge`); if (b && b.textContent === 'completed' && !w.__doneAt) w.__doneAt = Date.now(); };
        w.__observer = new MutationObserver(check);
        w.__observer.observe(document.body, { subtree: true, childList: true, characterData: true });
      }, runId);
      fs.writeFileSync(gate, '');
      // The change's own time: the latest of the status's updatedAt (stamped before its write and fsync) and the file's
      // mtime and ctime (the rename that publishes it sets the ctime; the kernel's coarse tick may lag a few ms, which
      // overstates the lag, never understates it).
      const statusFile = path.join(big.home, 'runs', runId, 'status.json');
      let seenAt = 0;
      const stop = now() + 30_000;
      while (!seenAt && now() < stop) {
        try {
          const st = JSON.parse(fs.readFileSync(statusFile, 'utf8'));
          const f = fs.statSync(statusFile);
          if (st.state === 'completed') seenAt = Math.max(Date.parse(st.updatedAt), f.mtimeMs, f.ctimeMs);
        } catch { /* mid-rename */ }
        if (!seenAt) await sleep(20);
      }
      let doneAt = 0;
      const end = now() + 30_000;
      while (!doneAt && now() < end) { doneAt = await page.evaluate(() => window.__doneAt); if (!doneAt) await sleep(10); }
      if (i >= 2) lag.push(doneAt - seenAt);
    }
    const f = stats(floor);
    report('ui: status change written → page shows it', lag, f, { note: `target ≤ floor + 100 ms = ${(f.median + 100).toFixed(1)} ms; floor: fs.watch wake-up` });

    // 3. Idle CPU: the ui server with the page open on the tree, against the idle MCP server (same home).
    await s.call('status', {});
    await sleep(2000);
    const c0 = [cpuMs(ui.child.pid), cpuMs(s.pid)];
    await sleep(IDLE_WINDOW_MS);
    const c1 = [cpuMs(ui.child.pid), cpuMs(s.pid)];
    const perSec = (i) => ((c1[i] - c0[i]) / IDLE_WINDOW_MS) * 1000;
    report(`ui: idle CPU with the page open (${BIG} runs in the home), ms per s`, [perSec(0)], perSec(1), { unit: 'ms', note: 'floor: the idle MCP server of the same home; 1 window of 10 s' });
    await page.close();
    await s.close();
  } finally {
    for (const u of uis) u.stop();
    await browser.close().catch(() => {});
    for (const h of [small, big]) { await reapHome(h.home); h.cleanup(); }
  }
});
