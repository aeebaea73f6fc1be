import fs from 'node:fs';
import path from 'node:path';

/**
 * Whether `pid` is an idle member of `home`'s warm pool: a runner back in the pool after its run (its command line
 * names the pool again), or the agent stub such a runner starts for its next run (its child, in its group, with an
 * empty environment: docs/architecture.md, "Warm runners"). Neither is a process of any ended run.
 */
export function isIdlePoolProcess(home: string, pid: number): boolean {
  const warm = `--warm ${path.join(home, 'warm')}`;
  const names = (p: number) => { try { return fs.readFileSync(`/proc/${p}/cmdline`, 'latin1').replace(/\0/g, ' ').includes(warm); } catch { return false; } };
  if (names(pid)) return true;
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'latin1');
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    return names(ppid) && fs.readFileSync(`/proc/${pid}/environ`, 'latin1') === '';
  } catch {
    return false;
  }
}
