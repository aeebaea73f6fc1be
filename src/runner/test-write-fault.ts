/**
 * Test seam for the reliability matrix (F6, runner side): `SUBAGENTS_TEST_FAULT=status-write:<which>:<ERRNO>[:<times>]`
 * makes this runner's writes of status.json fail at write(2) with ERRNO (ENOSPC, EIO …), `times` times (default:
 * every time). `which` picks the writes by the state they carry: `running` (the step updates), a terminal state
 * (`completed`, `failed`, `cancelled`), `terminal` (any of those) or `any`. Installed after the runner claimed the
 * start (the handshake's own writes are F1's business), through the store's fs port, in the runner process only.
 * Nothing sets the variable but the fault suite; agents never see it.
 */
import fs from 'node:fs';
import path from 'node:path';
import { overrideFsPort } from '../store/fs-port.js';

const TERMINAL = new Set(['completed', 'failed', 'cancelled']);

export function installStatusWriteFault(spec: string | undefined, runDir: string): void {
  const m = /^status-write:(running|completed|failed|cancelled|terminal|any):(E[A-Z]+)(?::(\d+))?$/.exec(spec ?? '');
  if (!m) return;
  const [, which, code] = m as unknown as [string, string, string];
  let left = m[3] === undefined ? Infinity : Number(m[3]);
  const statusTemps = new Set<number>();
  const isStatusTemp = (p: string) => path.dirname(p) === runDir && /^\.status\.json\..+\.tmp$/.test(path.basename(p));
  const hits = (data: Uint8Array): boolean => {
    let state = '';
    try { state = String((JSON.parse(Buffer.from(data).toString('utf8')) as { state?: unknown }).state); } catch { return false; }
    return which === 'any' || which === state || (which === 'terminal' && TERMINAL.has(state));
  };
  overrideFsPort({
    openSync: (p, flags, mode) => {
      const fd = fs.openSync(p, flags, mode);
      if (isStatusTemp(String(p))) statusTemps.add(fd);
      else statusTemps.delete(fd); // fd numbers are reused
      return fd;
    },
    writeSync: (fd, data) => {
      if (statusTemps.has(fd) && left > 0 && hits(data)) {
        left--;
        throw Object.assign(new Error(`${code}: injected by the test seam, write`), { code, syscall: 'write', errno: -1 });
      }
      return fs.writeSync(fd, data);
    },
    closeSync: (fd) => { statusTemps.delete(fd); fs.closeSync(fd); },
  });
}
