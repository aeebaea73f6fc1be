import fs from 'node:fs';
import path from 'node:path';
import { readHolder } from '../../src/store/lock-dir.js';

/** Every `*.lock` directory under `dir`. */
export function lockDirs(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((d) => {
    const p = path.join(dir, d.name);
    if (d.name.endsWith('.lock')) return [p];
    return d.isDirectory() ? lockDirs(p) : [];
  });
}

/** The pids a lock directory names as its holder (src/store/lock-dir.ts: `holder-*`). */
export function holderPids(lockDir: string): number[] {
  try {
    return fs.readdirSync(lockDir).filter((n) => n.startsWith('holder-')).flatMap((n) => {
      const h = readHolder(path.join(lockDir, n));
      return h ? [h.pid] : [];
    });
  } catch {
    return []; // released meanwhile
  }
}
