import fs from 'node:fs';
import { SubagentError } from '../errors.js';

const { O_RDONLY, O_NOFOLLOW } = fs.constants;

/** Reads a file without following a symlink; null when it does not exist. */
export function readTextNoFollow(file: string): string | null {
  let fd: number;
  try {
    fd = fs.openSync(file, O_RDONLY | O_NOFOLLOW);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return null;
    if (code === 'ELOOP') throw new SubagentError('STATE_CORRUPT', `${file} is a symlink; state files are never read through one. Remove it.`);
    throw e;
  }
  try {
    return fs.readFileSync(fd, 'utf8');
  } finally {
    fs.closeSync(fd);
  }
}

/** Parses a JSON state file; a torn or garbled file is STATE_CORRUPT naming the file (never its contents). */
export function readJsonFile<T>(file: string, label = file): T | null {
  const text = readTextNoFollow(file);
  if (text === null) return null;
  try {
    return JSON.parse(text) as T;
  } catch {
    throw new SubagentError('STATE_CORRUPT', `${label} does not parse (${text.length} bytes); the file is damaged. Other runs are unaffected; inspect or remove it.`);
  }
}
