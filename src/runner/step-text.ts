import fs from 'node:fs';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { writeFileAtomic } from '../store/atomic-write.js';
import { assertNoLinkBelowHome } from '../store/home-guard.js';
import { readTail } from '../store/text-tail.js';

/**
 * A step's final text, left in the file that holds it: a large output is read into memory only when a later task
 * asks for `{previous}`, and becomes the run's output without being written a second time. A text over `cap` bytes
 * stands for its last `cap` bytes.
 */
export interface StepText {
  file: string | null;
  cap: number;
}

export const NO_TEXT: StepText = { file: null, cap: 0 };

/** `{previous}` in a chain step's task becomes the previous step's text, once. */
export function substitute(task: string, previous: (() => string) | null): string {
  if (previous === null || !task.includes('{previous}')) return task;
  // One pass: text coming from the previous step is never scanned for `{previous}` again.
  return task.split('{previous}').join(previous());
}

export function once(f: () => string): () => string {
  let v: string | undefined;
  return () => (v ??= f());
}

export function readStepText(t: StepText): string {
  if (t.file === null) return '';
  try {
    const st = fs.statSync(t.file);
    return st.size <= t.cap ? fs.readFileSync(t.file, 'utf8') : readTail(t.file, t.cap);
  } catch {
    return '';
  }
}

/**
 * The run's output is the last step's text. Its file is linked in (a copy where links are refused): a 32 MiB output
 * was read into memory and written again, and the terminal status's fsync then flushed that second copy too.
 */
export function publishRunOutput(t: StepText, target: string): void {
  assertNoLinkBelowHome(target); // the link and rename below would otherwise land in a symlinked run directory's target
  let src: fs.Stats | null = null;
  try { src = t.file === null ? null : fs.statSync(t.file); } catch { /* gone: an empty output */ }
  if (src === null || src.size > t.cap) {
    writeFileAtomic(target, readStepText(t), { durable: false });
    return;
  }
  // Already linked (a retried commit): rename(2) between two links of one file does nothing and would leave the temp.
  try { const cur = fs.statSync(target); if (cur.ino === src.ino && cur.dev === src.dev) return; } catch { /* not yet */ }
  // Under a fresh name, then renamed over the target: a reader sees the old output or the new one, never a part.
  const tmp = path.join(path.dirname(target), `.${path.basename(target)}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`);
  try {
    try {
      fs.linkSync(t.file!, tmp);
    } catch {
      fs.copyFileSync(t.file!, tmp, fs.constants.COPYFILE_EXCL);
    }
    fs.renameSync(tmp, target);
  } catch (e) {
    try { fs.unlinkSync(tmp); } catch { /* not made */ }
    throw e;
  }
}
