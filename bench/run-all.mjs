// `npm run bench`: runs every bench script in turn (each in its own process, so one's servers, runners and memory
// never colour the next), prints their figure lines, and a list of the scripts that crashed. Speed never fails it.
// BENCH_ONLY=name,name runs a subset; BENCH_SAMPLES scales the sample counts; BENCH_JSON=<file> also writes JSON lines.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const dir = path.dirname(fileURLToPath(import.meta.url));
const ORDER = ['launch', 'e2e', 'concurrent', 'wakeup', 'coldstart', 'runner', 'history', 'catalog', 'session', 'output', 'cancel', 'capacity', 'sweep'];
const skip = new Set(['lib.mjs', 'run-all.mjs']);
const present = fs.readdirSync(dir).filter((n) => n.endsWith('.mjs') && !skip.has(n)).map((n) => n.slice(0, -4));
const names = [...ORDER.filter((n) => present.includes(n)), ...present.filter((n) => !ORDER.includes(n)).sort()];
const only = process.env.BENCH_ONLY ? new Set(process.env.BENCH_ONLY.split(',').map((s) => s.trim())) : null;

const env = { ...process.env };
delete env.NODE_EXTRA_CA_CERTS; // doubles every Node start here; each bench also hands its processes a clean env
delete env.NODE_OPTIONS;
/**
 * The median cost of creating a file in the temp dir, where every bench makes its homes. On an ext4 without a journal
 * (this machine kind's disk) it is 0.03–0.8 ms and grows with what was deleted there in the last minutes, since the
 * inode allocator steps over each recently freed inode; a run makes ~35 inodes, a bare handshake ~5, so it colours
 * every ratio (docs/performance.md, "What limits each figure"). Printed so that runs can be compared.
 */
function newInodeUs() {
  const dirPath = fs.mkdtempSync(path.join(os.tmpdir(), 'sa-inode-probe-'));
  const us = [];
  try {
    for (let i = 0; i < 100; i++) {
      const t0 = process.hrtime.bigint();
      fs.closeSync(fs.openSync(path.join(dirPath, String(i)), 'wx', 0o600));
      us.push(Number(process.hrtime.bigint() - t0) / 1000);
    }
  } finally {
    fs.rmSync(dirPath, { recursive: true, force: true });
  }
  return us.sort((a, b) => a - b)[50];
}

const loadavg = fs.readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
process.stdout.write(`node ${process.version}, ${process.env.BENCH_SAMPLES ?? 30} samples per figure, load ${loadavg}, a new file in ${os.tmpdir()} ${newInodeUs().toFixed(0)} µs\n`);
const crashed = [];
for (const name of names) {
  if (only && !only.has(name)) continue;
  process.stdout.write(`\n== ${name}\n`);
  const t0 = performance.now();
  const r = spawnSync(process.execPath, [path.join(dir, `${name}.mjs`)], { stdio: 'inherit', env });
  process.stdout.write(`   (${name} took ${((performance.now() - t0) / 1000).toFixed(1)} s)\n`);
  if (r.status !== 0) crashed.push(`${name} (${r.signal ?? `exit ${r.status}`})`);
}
if (!only || only.size > 1) process.stdout.write(`\na new file in ${os.tmpdir()} at the end: ${newInodeUs().toFixed(0)} µs\n`);
if (crashed.length) {
  process.stdout.write(`\nbench scripts that crashed: ${crashed.join(', ')}\n`);
  process.exitCode = 1;
}
