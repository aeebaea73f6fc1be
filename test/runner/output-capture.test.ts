import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { OutputCapture } from '../../src/runner/output-capture.js';

describe('OutputCapture keeps the head up to its cap, and with tailBytes the stream\'s end too', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'capture-'));
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));
  const capture = (name: string, cap: number, tail: number, chunks: string[]) => {
    const file = path.join(dir, name);
    const c = new OutputCapture(file, cap, tail);
    for (const ch of chunks) c.write(Buffer.from(ch));
    c.close();
    return { c, text: fs.readFileSync(file, 'utf8') };
  };

  it('without tailBytes: the head only, every byte counted', () => {
    const { c, text } = capture('head', 10, 0, ['0123456789abc', 'def']);
    expect(text).toBe('0123456789');
    expect(c.bytes).toBe(16);
    expect(c.truncated).toBe(true);
  });

  it('past the cap by more than tailBytes: head, a marker counting what was left out, the last bytes', () => {
    const { c, text } = capture('marked', 10, 4, ['0123456789ab', 'cdefgh', 'ij', 'KLMN']);
    expect(text).toBe('0123456789\n…[10 bytes omitted]…\nKLMN');
    expect(c.bytes).toBe(24);
  });

  it('past the cap by at most tailBytes: the whole stream, no marker', () => {
    const { text } = capture('whole', 10, 8, ['0123456789ab', 'cd']);
    expect(text).toBe('0123456789abcd');
  });

  it('within the cap: nothing added', () => {
    const { c, text } = capture('small', 10, 4, ['012', '345']);
    expect(text).toBe('012345');
    expect(c.truncated).toBe(false);
  });
});
