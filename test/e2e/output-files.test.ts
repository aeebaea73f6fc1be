/**
 * What the runner leaves on disk for an agent's output: the step's file holds exactly the bytes the agent printed
 * (through the runner's reused read buffer, any bytes, not only UTF-8), the run's output is that same file linked
 * in (no second copy to write and flush), disk usage counts it once, and the stdout channel leaves nothing behind.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { diskBytes } from '../../src/manager/gc.js';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { sc, startServer, waitTerminal, type Started } from '../helpers/server.js';

const SIZE = 3 * 1024 * 1024 + 5;
// Every byte value, invalid UTF-8 included, in a pattern that differs at every offset modulo a prime.
const byteAt = (i: number) => (i * 13 + (i >> 10)) % 256;
const PRINT = `const b=Buffer.alloc(${SIZE});for(let i=0;i<b.length;i++)b[i]=(i*13+(i>>10))%256;let o=0;while(o<b.length)o+=require('fs').writeSync(1,b,o,Math.min(100000,b.length-o));`;

describe('output files', () => {
  let t: ReturnType<typeof tempStateHome>;
  let s: Started;
  beforeEach(async () => {
    t = tempStateHome();
    writeAgent(path.join(t.home, 'agents'), 'bytes', { backend: 'command', command: [process.execPath, '-e', PRINT] });
    s = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root });
  });
  afterEach(async () => {
    await s.close();
    t.cleanup();
  });

  it('the step file is the exact bytes printed; the run output is the same file; disk usage counts it once', async () => {
    const runId = sc(await s.call('launch', { agent: 'bytes', task: 'go' })).runId as string;
    const fin = await waitTerminal(s, runId);
    expect(fin.state).toBe('completed');
    expect(fin.steps[0].output.bytes).toBe(SIZE);
    expect(fin.output.bytes).toBe(SIZE);

    const dir = path.join(t.home, 'runs', runId);
    const step = fs.readFileSync(path.join(dir, 'out', '0.txt'));
    expect(step.length).toBe(SIZE);
    let bad = -1;
    for (let i = 0; i < SIZE && bad < 0; i++) if (step[i] !== byteAt(i)) bad = i;
    expect(bad).toBe(-1);

    const a = fs.statSync(path.join(dir, 'out', '0.txt'));
    const b = fs.statSync(path.join(dir, 'out', 'run.txt'));
    expect(b.ino).toBe(a.ino);
    expect(b.mode & 0o777).toBe(0o600);
    const errBytes = fs.statSync(path.join(dir, 'out', '0.err')).size;
    expect(diskBytes(path.join(dir, 'out'))).toBe(SIZE + errBytes);

    expect(fs.readdirSync(path.join(dir, 'out')).filter((n) => n.endsWith('.tmp'))).toEqual([]);
    // The stdout socket file is gone, and a command agent, which writes no config, got no scratch directory.
    expect(fs.readdirSync(path.join(dir, 'prompts')).filter((n) => n.endsWith('.sock') || n.endsWith('.d'))).toEqual([]);
  });
});
