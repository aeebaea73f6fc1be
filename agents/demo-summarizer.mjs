#!/usr/bin/env node
// The bundled demo agent: reads its task on stdin and answers with a short report, taking a moment per line so a
// client can watch the run progress. It needs nothing but Node.
import fs from 'node:fs';

const chunks = [];
for await (const c of process.stdin) chunks.push(c);
const task = Buffer.concat(chunks).toString('utf8');
const words = task.split(/\s+/).filter(Boolean);
const system = process.env.SUBAGENTS_SYSTEM_PROMPT_FILE ? fs.readFileSync(process.env.SUBAGENTS_SYSTEM_PROMPT_FILE, 'utf8') : '';
const delayMs = Number(process.env.DEMO_DELAY_MS ?? 300);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const lines = [
  `# Report from demo-summarizer (pid ${process.pid}, depth ${process.env.SUBAGENTS_DEPTH ?? '?'})`,
  `- task: ${words.length} words, ${task.length} characters`,
  `- longest word: ${words.reduce((a, w) => (w.length > a.length ? w : a), '') || '(none)'}`,
  `- system prompt received: ${system ? `${system.trim().split(/\s+/).length} words` : 'no'}`,
  `- first line: ${task.split('\n')[0].slice(0, 120)}`,
];
for (const l of lines) {
  process.stdout.write(l + '\n');
  await sleep(delayMs);
}
