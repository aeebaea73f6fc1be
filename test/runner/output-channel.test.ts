/**
 * The agent's stdout channel: a unix socket pair read into one reused buffer. Real processes write into it; what
 * arrives must be every byte in order (the buffer is refilled after each callback), the channel must stay open while
 * any process still holds the agent's end, and the socket file must not outlive the set-up.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openOutputChannel } from '../../src/runner/output-channel.js';

describe('openOutputChannel', () => {
  let dir: string;
  beforeEach(() => { dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sa-oc-')); });
  afterEach(() => { fs.rmSync(dir, { recursive: true, force: true }); });

  /** Runs `argv` with its stdout on a fresh channel; resolves everything that arrived once the channel closed. */
  async function capture(argv: string[]): Promise<{ data: Buffer; chunks: number }> {
    const parts: Buffer[] = [];
    const ch = await openOutputChannel(path.join(dir, 'stdout.sock'), (c) => { parts.push(Buffer.from(c)); });
    expect(ch).not.toBeNull();
    expect(fs.readdirSync(dir)).toEqual([]); // the socket file is gone once the pair is connected
    const child = spawn(argv[0]!, argv.slice(1), { stdio: ['ignore', ch!.agentEnd, 'inherit'] });
    ch!.agentEnd.destroy();
    await Promise.all([ch!.closed, new Promise((r) => child.once('exit', r))]);
    return { data: Buffer.concat(parts), chunks: parts.length };
  }

  it('delivers every byte in order across many reads of the reused buffer', async () => {
    const size = 6 * 1024 * 1024 + 17;
    // A pattern that is different at every offset modulo a prime, so a reused buffer overwritten too early shows.
    const script = `const b=Buffer.alloc(${size});for(let i=0;i<b.length;i++)b[i]=(i*7+(i>>12))%251;let o=0;while(o<b.length)o+=require('fs').writeSync(1,b,o,Math.min(65536,b.length-o));`;
    const { data, chunks } = await capture([process.execPath, '-e', script]);
    expect(data.length).toBe(size);
    expect(chunks).toBeGreaterThan(1);
    let bad = -1;
    for (let i = 0; i < size && bad < 0; i++) if (data[i] !== (i * 7 + (i >> 12)) % 251) bad = i;
    expect(bad).toBe(-1);
  });

  it('stays open while a process the agent left behind holds its stdout', async () => {
    const { data } = await capture(['sh', '-c', '(sleep 0.3; printf late) & printf early']);
    expect(data.toString()).toBe('earlylate');
  });

  it('is not made when the socket path would not fit a unix socket address', async () => {
    const deep = path.join(dir, 'd'.repeat(60), 'e'.repeat(60));
    fs.mkdirSync(deep, { recursive: true });
    expect(await openOutputChannel(path.join(deep, 'stdout.sock'), () => {})).toBeNull();
    expect(fs.readdirSync(deep)).toEqual([]);
  });
});
