import fs from 'node:fs'; import path from 'node:path';
import { serverEnv, startServer, tempHome, writeAgent, now, stats, reapHome } from '../lib.mjs';
// CPU per run of a sequential loop of instant runs (launch + status {waitMs, until: terminal}), by process: the
// server, the client, and the runners with their agent stubs and agents — replacements' boots included (a runner
// that exited during the loop was reaped by the server: its CPU is in the server's children time, less its share
// before the loop). CPU time is nearly load-independent where wall time is not. Linux only (/proc).
//   node bench/tools/loop-cpu.mjs                      # this build (N=100 runs; EXTRA_ENV='{"SUBAGENTS_…":"…"}')
//   BENCH_MAIN_JS=/tmp/old/dist/main.js node bench/tools/loop-cpu.mjs   # another build, to alternate with
const h = tempHome('sa-prof-');
const fake = path.join(h.base, 'claude');
fs.writeFileSync(fake, `#!/bin/sh\necho done\n`, { mode: 0o755 });
writeAgent(h.home, 'instant', { backend: 'command', command: [fake, '-p', 'x'] });
const ours = await startServer(serverEnv(h, JSON.parse(process.env.EXTRA_ENV ?? '{}')));
await new Promise(r => setTimeout(r, 2500));
const st = (pid) => { try { const f = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' '); return { own: (Number(f[11]) + Number(f[12])) * 10, kids: (Number(f[13]) + Number(f[14])) * 10 }; } catch { return null; } };
const runnerPids = () => fs.readdirSync('/proc').filter(n => /^\d+$/.test(n)).filter(n => { try { const s = fs.readFileSync(`/proc/${n}/stat`, 'utf8'); return Number(s.split(') ')[1].split(' ')[1]) === ours.pid && fs.readlinkSync(`/proc/${n}/exe`) === process.execPath; } catch { return false; } }).map(Number);
const run = async () => { const l = await ours.call('launch', { agent: 'instant', task: 'go' }); await ours.call('status', { runId: l.structuredContent.runId, waitMs: 60000, until: 'terminal' }); };
for (let i = 0; i < 5; i++) await run();
await new Promise(r => setTimeout(r, 300));
const N = Number(process.env.N ?? 100);
const before = new Map(runnerPids().map(p => [p, st(p)]));
const s0 = st(ours.pid); const c0 = process.cpuUsage();
const T = [];
for (let i = 0; i < N; i++) { const t0 = now(); await run(); T.push(now() - t0); }
await new Promise(r => setTimeout(r, 500));
const cu = process.cpuUsage(c0); const s1 = st(ours.pid);
let runners = s1.kids - s0.kids, boots = 0;
for (const p of runnerPids()) { const s = st(p); if (!s) continue; const b = before.get(p); if (b) runners += s.own + s.kids - b.own - b.kids; else { runners += s.own + s.kids; boots++; } }
for (const [p, b] of before) if (!st(p)) { runners -= b.own + b.kids; boots++; }
console.log('median', stats(T).median.toFixed(1), 'ms; per run CPU: server', ((s1.own - s0.own) / N).toFixed(2), 'client', ((cu.user + cu.system) / 1000 / N).toFixed(2), 'runners+agents', (runners / N).toFixed(2), 'runners born or gone', boots);
await ours.close();
await reapHome(h.home);
fs.rmSync(h.base, { recursive: true, force: true });
