import fs from 'node:fs';
import type { ManagerContext } from '../manager/context.js';
import { requireRecord } from '../manager/listing.js';
import { openRunFile } from '../manager/run-files.js';
import { freshStatus } from '../manager/run-status.js';
import { isTerminalRun, isTerminalStep, type RunStatus, type StepStatus } from '../store/run-types.js';
import { formatBytes, formatDuration } from '../format.js';
import { DirWatch } from '../wait.js';
import { Progress } from './progress.js';
import { peopleCommand } from '../invocation.js';

export interface LogsOptions {
  follow?: boolean;
  /** Show a parsing backend's raw machine-readable stream instead of its final text. */
  raw?: boolean;
}

/** How long a follower sleeps between checks when no file event arrives (it also reconciles then). */
const POLL_MS = 1000;
const CHUNK = 64 * 1024;

/** The steps that write output, in order: plain steps and each member of a parallel group. */
function leaves(status: RunStatus): StepStatus[] {
  return status.steps.flatMap((s) => (s.members ? s.members : [s]));
}

async function write(chunk: Buffer | string): Promise<void> {
  if (!process.stdout.write(chunk)) await new Promise<void>((r) => process.stdout.once('drain', () => r()));
}

/**
 * Prints a run's output: each step's output file in order (a header before each when the run has several steps).
 * With `follow`, keeps printing what is written until the run ends, woken by file events with a slow poll behind
 * them; the exit code is then the run's outcome (0 completed, 1 otherwise).
 */
export async function logsCommand(ctx: ManagerContext, runId: string, o: LogsOptions): Promise<number> {
  const paths = ctx.store.paths(runId);
  const record = requireRecord(ctx, runId);
  const headers = record.mode !== 'single';
  const progress = new Progress(process.stderr);
  // stdout and stderr on one terminal: the status line must be cleared before output and not drawn mid-line.
  const shareTerminal = progress.tty && process.stdout.isTTY === true;
  let lastByte = 10;
  const emit = async (chunk: Buffer | string) => {
    if (chunk.length === 0) return;
    if (shareTerminal) progress.clear();
    await write(chunk);
    const b = typeof chunk === 'string' ? chunk.charCodeAt(chunk.length - 1) : chunk[chunk.length - 1]!;
    lastByte = b;
    if (shareTerminal) { progress.setLineStart(lastByte === 10); progress.redraw(); }
  };
  const header = async (s: StepStatus, key: string) => {
    if (!headers) return;
    await emit(`${lastByte === 10 ? '' : '\n'}==> step ${key} ${s.agent} (${s.state}) <==\n`);
  };

  let i = 0; // the leaf being printed
  let offset = 0;
  let file: string | null = null;
  let headed = false;
  const pickFile = (key: string): string | null => {
    const raw = paths.rawOutput(key);
    const txt = paths.output(key);
    if (o.raw && fs.existsSync(raw)) return raw;
    if (fs.existsSync(txt)) return txt;
    return null;
  };
  /** Copies what is new in the current file; returns the bytes copied. */
  const drain = async (): Promise<number> => {
    if (!file) return 0;
    const fd = openRunFile(file); // never blocks on a FIFO in the output's place
    if (fd === null) return 0;
    let copied = 0;
    try {
      const buf = Buffer.alloc(CHUNK);
      for (;;) {
        const n = fs.readSync(fd, buf, 0, CHUNK, offset);
        if (n <= 0) break;
        offset += n;
        copied += n;
        await emit(Buffer.from(buf.subarray(0, n)));
      }
    } finally {
      fs.closeSync(fd);
    }
    return copied;
  };
  /** Prints everything available; returns true when every step's output has been printed in full. */
  const pump = async (status: RunStatus): Promise<boolean> => {
    const list = leaves(status);
    while (i < list.length) {
      const s = list[i]!;
      const started = s.state !== 'pending';
      if (!started && !isTerminalRun(status.state)) return false;
      if (!headed) { await header(s, s.key); headed = true; }
      file ??= pickFile(s.key);
      await drain();
      if (!isTerminalStep(s.state)) return false;
      if (!file) { file = pickFile(s.key); await drain(); }
      i++; offset = 0; file = null; headed = false;
    }
    return isTerminalRun(status.state);
  };

  let status = await freshStatus(ctx, runId);
  if (!o.follow) {
    // Not following: print what exists now, every step (a running step shows its output so far).
    const list = leaves(status);
    for (; i < list.length; i++) {
      const s = list[i]!;
      await header(s, s.key);
      file = pickFile(s.key);
      offset = 0;
      await drain();
    }
    if (lastByte !== 10) await emit('\n');
    if (!isTerminalRun(status.state) && process.stderr.isTTY) {
      process.stderr.write(`(run is ${status.state}; follow it with: ${peopleCommand(`logs ${runId} --follow`)})\n`);
    }
    return 0;
  }

  const activity = new DirWatch([paths.dir, paths.outDir]);
  const started = Date.now();
  try {
    for (;;) {
      if (await pump(status)) break;
      const list = leaves(status);
      const cur = list[i];
      if (cur) {
        const raw = paths.rawOutput(cur.key);
        const rawBytes = !file && fs.existsSync(raw) ? ` (${formatBytes(fs.statSync(raw).size)} of raw stream; its text arrives when the step ends, or use --raw)` : '';
        progress.update(`… ${status.state} · step ${cur.key} (${i + 1} of ${list.length}) ${cur.agent} ${cur.state} · ${formatBytes(offset)}${rawBytes} · ${formatDuration(Date.now() - started)}`);
      } else {
        progress.update(`… ${status.state} · waiting for the next step · ${formatDuration(Date.now() - started)}`);
      }
      const changed = await activity.next(POLL_MS);
      // A poll tick reconciles (a runner that died writes nothing); a file event just re-reads.
      status = changed ? (ctx.store.readStatus(runId) ?? status) : await freshStatus(ctx, runId);
    }
  } finally {
    activity.close();
  }
  if (lastByte !== 10) await emit('\n');
  progress.done();
  const err = status.error ? ` — ${status.error.code}: ${status.error.message}` : '';
  process.stderr.write(`run ${runId} ${status.state}${err}\n`);
  return status.state === 'completed' ? 0 : 1;
}
