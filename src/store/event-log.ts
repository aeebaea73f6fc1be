import fs from 'node:fs';
import { fsPort } from './fs-port.js';
import { assertNoLinkBelowHome } from './home-guard.js';
import { readTextNoFollow } from './json-file.js';

const { O_APPEND, O_CREAT, O_WRONLY, O_NOFOLLOW, O_NONBLOCK } = fs.constants;

export interface RunEvent {
  ts: string;
  type: string;
  [key: string]: unknown;
}

/**
 * Appends one JSON line. Logs are not acknowledgements, so no fsync (docs/contract.md, invariant 1). A line is written by a single
 * write(2) on an O_APPEND descriptor, so concurrent writers never interleave inside a line.
 */
export function appendEvent(file: string, event: Omit<RunEvent, 'ts'>): void {
  const line = JSON.stringify({ ts: new Date().toISOString(), ...event }) + '\n';
  assertNoLinkBelowHome(file);
  const fd = fsPort.openSync(file, O_APPEND | O_CREAT | O_WRONLY | O_NOFOLLOW | O_NONBLOCK, 0o600);
  try {
    fsPort.writeSync(fd, Buffer.from(line));
  } finally {
    fsPort.closeSync(fd);
  }
}

/** An event log larger than this is damage (a run writes a few lines per step). */
const MAX_EVENT_LOG_BYTES = 64 * 1024 * 1024;

/** Reads every parsable line; torn or garbled lines are skipped and counted. */
export function readEvents(file: string): { events: RunEvent[]; skipped: number } {
  let text: string;
  try {
    text = readTextNoFollow(file, 'events.jsonl', MAX_EVENT_LOG_BYTES) ?? '';
  } catch {
    return { events: [], skipped: 1 }; // not a regular file, or absurdly large: read around, counted as damage
  }
  const events: RunEvent[] = [];
  let skipped = 0;
  for (const line of text.split('\n')) {
    if (line.trim() === '') continue;
    try {
      const v = JSON.parse(line) as unknown;
      if (v && typeof v === 'object' && !Array.isArray(v)) events.push(v as RunEvent);
      else skipped++;
    } catch {
      skipped++;
    }
  }
  return { events, skipped };
}
