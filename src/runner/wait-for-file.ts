import fs from 'node:fs';
import path from 'node:path';

/**
 * Resolves true as soon as `file` exists, false after `timeoutMs`. Event-driven (fs.watch on its directory) with a slow
 * safety poll, because inotify can miss events on some file systems and a fast poll burns CPU.
 */
export function waitForFile(file: string, timeoutMs: number, pollMs = 250): Promise<boolean> {
  return new Promise((resolve) => {
    let done = false;
    let watcher: fs.FSWatcher | undefined;
    const finish = (v: boolean) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      clearInterval(poll);
      watcher?.close();
      resolve(v);
    };
    const check = () => { if (fs.existsSync(file)) finish(true); };
    const timer = setTimeout(() => finish(fs.existsSync(file)), timeoutMs);
    const poll = setInterval(check, pollMs);
    try {
      watcher = fs.watch(path.dirname(file), () => check());
      watcher.on('error', () => {});
    } catch { /* the poll covers it */ }
    check();
  });
}
