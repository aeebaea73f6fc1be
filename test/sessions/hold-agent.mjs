#!/usr/bin/env node
// A test agent whose step lasts as long as the test wants: it writes its environment to <dir>/<pid>.env.json (so a
// test can start a nested server with the step's SUBAGENTS_BUDGET), waits until <dir>/release exists, then prints
// the task it read on stdin.
import fs from 'node:fs';
import path from 'node:path';

const dir = process.argv[2];
const chunks = [];
for await (const c of process.stdin) chunks.push(c);
fs.mkdirSync(dir, { recursive: true });
// Published whole (written aside, then renamed): a test reads it the moment its name appears.
const envFile = path.join(dir, `${process.pid}.env.json`);
fs.writeFileSync(`${envFile}.tmp`, JSON.stringify(process.env));
fs.renameSync(`${envFile}.tmp`, envFile);
while (!fs.existsSync(path.join(dir, 'release'))) await new Promise((r) => setTimeout(r, 50));
process.stdout.write(Buffer.concat(chunks));
