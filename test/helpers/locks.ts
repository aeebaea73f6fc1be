import fs from 'node:fs';
import path from 'node:path';

/** Every `*.lock` directory under `dir`. */
export function lockDirs(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((d) => {
    const p = path.join(dir, d.name);
    if (d.name.endsWith('.lock')) return [p];
    return d.isDirectory() ? lockDirs(p) : [];
  });
}

/** The pids a lock directory names as its holder (src/store/lock-dir.ts: `holder-*.json`). */
export function holderPids(lockDir: string): number[] {
  try {
    return fs.readdirSync(lockDir).filter((n) => n.startsWith('holder-')).flatMap((n) => {
      try { return [(JSON.parse(fs.readFileSync(path.join(lockDir, n), 'utf8')) as { pid: number }).pid]; } catch { return []; }
    });
  } catch {
    return []; // released meanwhile
  }
}
