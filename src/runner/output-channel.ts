import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';

/** Room for the longest read a stream socket hands over at once (its buffer is a few hundred KiB). */
const READ_BUFFER_BYTES = 1024 * 1024;
/** sun_path holds 108 bytes with the NUL; a longer path is refused rather than silently truncated by the OS. */
const MAX_SOCKET_PATH = 100;

export interface OutputChannel {
  /** For the agent's stdout (spawn's stdio): destroy our copy once spawned, never end() it (that would shut the socket for the agent too). */
  agentEnd: net.Socket;
  /** Ours: reads every chunk into one reused buffer; closes when the agent and every process holding its stdout are gone. */
  reader: net.Socket;
  closed: Promise<void>;
}

/**
 * A connected unix stream socket pair for an agent's stdout — the same kind of channel spawn's 'pipe' makes — whose
 * reading end fills one buffer over and over (net's `onread`). spawn's own pipe delivers every read in a fresh 64 KiB
 * buffer: the copy then spends its time faulting in new pages, and memory grows until the next GC. `onChunk` must be
 * done with the chunk when it returns. Resolves null when the pair cannot be made (the caller uses spawn's pipe).
 */
export async function openOutputChannel(socketFile: string, onChunk: (chunk: Buffer) => void): Promise<OutputChannel | null> {
  // Relative to the runner's working directory (the run's directory) when that is shorter: homes can be deep.
  const rel = path.relative(process.cwd(), socketFile);
  const where = rel.length < socketFile.length ? rel : socketFile;
  if (Buffer.byteLength(where) > MAX_SOCKET_PATH) return null;
  try { fs.unlinkSync(socketFile); } catch { /* absent */ }
  const server = net.createServer();
  let reader: net.Socket | null = null;
  let agentEnd: net.Socket | null = null;
  try {
    // The socket file lives in the run's private (0700) directory: only our own user can connect to it.
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(where, () => resolve());
    });
    const accepted = new Promise<net.Socket>((resolve) => server.once('connection', resolve));
    const buffer = Buffer.allocUnsafe(READ_BUFFER_BYTES);
    const r = net.connect({ path: where, onread: { buffer, callback: (n: number) => { onChunk(buffer.subarray(0, n)); return true; } } });
    reader = r;
    // Known from the start: a quick agent's stdout can be closed before the caller gets to wait for it.
    const closed = new Promise<void>((resolve) => r.once('close', () => resolve()));
    await new Promise<void>((resolve, reject) => {
      r.once('connect', () => resolve());
      r.once('error', reject);
    });
    agentEnd = await accepted;
    return { agentEnd, reader: r, closed };
  } catch {
    reader?.destroy();
    agentEnd?.destroy();
    return null;
  } finally {
    server.close(); // also removes the socket file
  }
}
