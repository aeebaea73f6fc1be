import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sc, startServer, type Started } from '../helpers/server.js';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { cli, cliStream } from './helpers.js';

/**
 * A backend whose output is parsed (claude's stream-json), with a fake `claude` that the test releases: `logs --raw`
 * follows the raw stream as it grows; plain `logs` shows the final text the adapter parsed from it.
 */
describe('logs and show for a parsed backend', { timeout: 180_000 }, () => {
  let t: ReturnType<typeof tempStateHome>;
  let s: Started;
  let gate: string;
  beforeAll(async () => {
    t = tempStateHome('sa-cli-parsed-');
    gate = path.join(t.base, 'release');
    const fake = path.join(t.base, 'claude.mjs');
    fs.writeFileSync(fake, `#!/usr/bin/env node
import fs from 'node:fs';
for await (const _ of process.stdin) { /* the task */ }
process.stdout.write(JSON.stringify({ type: 'system', subtype: 'init', session_id: 'fake' }) + '\\n');
while (!fs.existsSync(${JSON.stringify(gate)})) await new Promise((r) => setTimeout(r, 25));
process.stdout.write(JSON.stringify({ type: 'result', subtype: 'success', is_error: false, result: 'the final answer',
  total_cost_usd: 0.0123, usage: { input_tokens: 10, output_tokens: 5 } }) + '\\n');
`, { mode: 0o755 });
    writeAgent(path.join(t.home, 'agents'), 'fake-claude', { backend: 'claude' });
    s = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_BIN_CLAUDE: fake });
  });
  afterAll(async () => {
    fs.writeFileSync(gate, '');
    await s?.close();
    t.cleanup();
  });

  it('--raw follows the stream while the step runs; plain logs and show give the parsed result', async () => {
    const r = await s.call('launch', { agent: 'fake-claude', task: 'answer' });
    expect(r.isError, JSON.stringify(r.content)).toBeFalsy();
    const runId = sc(r).runId as string;
    const env = { SUBAGENTS_HOME: t.home };
    const raw = cliStream(['logs', runId, '--follow', '--raw'], env);
    const text = cliStream(['logs', runId, '--follow'], env);
    await raw.waitFor('"subtype":"init"');
    expect(raw.done).toBe(false);
    expect(text.stdout()).toBe(''); // the final text exists only once the step has ended
    fs.writeFileSync(gate, '');
    expect(await raw.exited).toBe(0);
    expect(await text.exited).toBe(0);
    expect(raw.stdout()).toContain('"result":"the final answer"');
    expect(text.stdout()).toBe('the final answer\n');
    const detail = JSON.parse((await cli(['show', runId, '--json'], env)).stdout);
    expect(detail.steps[0]).toMatchObject({ backend: 'claude', state: 'completed', costUsd: 0.0123, exitCode: 0 });
    expect(detail.steps[0].files.raw.bytes).toBeGreaterThan(0);
  });
});
