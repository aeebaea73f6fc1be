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
  return { home, root, base, cleanup: () => fs.rmSync(base, { recursive: true, force: true }) };
}

/** Writes an agent file into `dir` (default: the home's operator agents dir) and returns its path. */
export function writeAgent(dir: string, name: string, frontMatter: Record<string, unknown>, body = 'You are a test agent.'): string {
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
  const lines = Object.entries({ name, description: `test agent ${name}`, ...frontMatter }).map(([k, v]) => `${k}: ${JSON.stringify(v)}`);
  const file = path.join(dir, `${name}.md`);
  fs.writeFileSync(file, `---\n${lines.join('\n')}\n---\n${body}\n`, { mode: 0o600 });
  return file;
}
