import fs from 'node:fs';
import { openStateFile } from './state-file.js';

/** The last `bytes` of a file as text (for stderr tails and reports); never blocks on a FIFO in the file's place. */
export function readTail(file: string, bytes: number): string {
  try {
    const opened = openStateFile(file, file);
    if (opened === null) return '';
    const { fd, size } = opened;
    try {
      const len = Math.min(size, bytes);
      const buf = Buffer.alloc(len);
      fs.readSync(fd, buf, 0, len, size - len);
      return buf.toString('utf8');
    } finally {
      fs.closeSync(fd);
    }
  } catch {
    return '';
  }
}
