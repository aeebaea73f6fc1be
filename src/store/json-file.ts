import { SubagentError } from '../errors.js';
import { MAX_STATE_FILE_BYTES, readStateText } from './state-file.js';

/** Reads a state file without following a symlink or blocking on a non-regular file; null when it does not exist. */
export function readTextNoFollow(file: string, label = file, maxBytes = MAX_STATE_FILE_BYTES): string | null {
  return readStateText(file, label, maxBytes);
}

/** Parses a JSON state file; a torn or garbled file is STATE_CORRUPT naming the file (never its contents). */
export function readJsonFile<T>(file: string, label = file): T | null {
  const text = readTextNoFollow(file, label);
  if (text === null) return null;
  return parseStateJson<T>(text, label);
}

/** Parses a state file's text; garbled text is STATE_CORRUPT naming the file (never its contents). */
export function parseStateJson<T>(text: string, label: string): T {
  try {
    return JSON.parse(text) as T;
  } catch {
    throw new SubagentError('STATE_CORRUPT', `${label} does not parse (${text.length} bytes); the file is damaged. Other runs are unaffected; inspect or remove it.`);
  }
}
