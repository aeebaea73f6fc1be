import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

/** A fresh private state home and a workspace root for one test; removed by `cleanup()`. */
export function tempStateHome(prefix = 'sa-test-'): { home: string; root: string; base: string; cleanup: () => void } {
  const base = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), prefix)));
  const home = path.join(base, 'home');
  const root = path.join(base, 'work');
  fs.mkdirSync(home, { mode: 0o700 });
  fs.mkdirSync(root, { mode: 0o700 });
  return { home, root, base, cleanup: () => removeHome(base) };
}

/** Writes an agent file into `dir` (default: the home's operator agents dir) and returns its path. */
export function writeAgent(dir: string, name: string, frontMatter: Record<string, unknown>, body = 'You are a test agent.'): string {
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
  const lines = Object.entries({ name, description: `test agent ${name}`, ...frontMatter }).map(([k, v]) => `${k}: ${JSON.stringify(v)}`);
  const file = path.join(dir, `${name}.md`);
  fs.writeFileSync(file, `---\n${lines.join('\n')}\n---\n${body}\n`, { mode: 0o600 });
  return file;
}

/**
 * Removes a test's state home. Runs outlive their servers by design, so a test that ends with a run still going
 * would race its runner's writes: every process whose command line names the home (its runners) is stopped first,
 * and the removal retries a directory that was written to meanwhile.
 */
function removeHome(base: string): void {
  const procs = fs.existsSync('/proc') ? fs.readdirSync('/proc') : [];
  for (const name of procs.filter((n) => /^\d+$/.test(n) && Number(n) !== process.pid)) {
    try {
      if (fs.readFileSync(`/proc/${name}/cmdline`, 'latin1').includes(base)) process.kill(Number(name), 'SIGKILL');
    } catch { /* gone, or not ours */ }
  }
  fs.rmSync(base, { recursive: true, force: true, maxRetries: 10, retryDelay: 50 });
}
