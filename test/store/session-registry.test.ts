import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FileSessionRegistry } from '../../src/store/session-registry.js';
import { REPO } from '../helpers/paths.js';

const run = promisify(execFile);
const SHARED = `s-shared-${'z'.repeat(20)}`;
const ancestor = (p: number, i: number) => `s-anc-${p}-${String(i).padStart(3, '0')}-${'a'.repeat(12)}`;

describe('FileSessionRegistry', () => {
  let home: string;
  let runsDir: string;
  beforeEach(() => {
    home = fs.mkdtempSync(path.join(os.tmpdir(), 'sa-registry-'));
    runsDir = path.join(home, 'runs');
  });
  afterEach(() => { fs.rmSync(home, { recursive: true, force: true }); });

  it('keeps every link of a session whose record is lost, and knows the session by them', () => {
    const reg = new FileSessionRegistry(home);
    reg.write({ v: 1, sessionId: 's-child-0000000000000', startedAt: 'x', client: null, ancestors: ['s-parent-000000000000'] });
    reg.link('s-child-0000000000000', ['s-parent-000000000000', 's-other-0000000000000']);
    expect(reg.ancestorsOf('s-child-0000000000000', runsDir).sort()).toEqual(['s-other-0000000000000', 's-parent-000000000000']);
    fs.rmSync(path.join(home, 'sessions'), { recursive: true });
    expect(reg.knows('s-child-0000000000000', runsDir)).toBe(true);
    expect(reg.ancestorsOf('s-child-0000000000000', runsDir).sort()).toEqual(['s-other-0000000000000', 's-parent-000000000000']);
    expect(reg.knows('s-nobody-000000000000', runsDir)).toBe(false);
    // Ids made of dots never name `.` or `..` in the link tree.
    reg.link('..', ['...']);
    expect(reg.links('..')).toEqual(['...']);
    expect(fs.readdirSync(path.join(home, 'lineage')).sort()).toEqual(['%2E%2E', 's-child-0000000000000']);
  });

  it('loses no ancestor when four processes of one session id register and restore at once', async () => {
    const sessionsJs = pathToFileURL(path.join(REPO, 'dist', 'manager', 'sessions.js')).href;
    const registryJs = pathToFileURL(path.join(REPO, 'dist', 'store', 'session-registry.js')).href;
    // Each process is a server of the shared id: it registers, then adds 25 ancestors one restore at a time, each
    // restore followed by a re-registration (as a server's client info arriving), all racing the other processes.
    const script = `
      const { SessionView } = await import(${JSON.stringify(sessionsJs)});
      const { FileSessionRegistry } = await import(${JSON.stringify(registryJs)});
      const [home, runsDir, id, p] = process.argv.slice(1);
      const view = new SessionView(new FileSessionRegistry(home), id, runsDir);
      await view.register(null);
      for (let i = 0; i < 25; i++) {
        await view.addAncestors([\`s-anc-\${p}-\${String(i).padStart(3, '0')}-${'a'.repeat(12)}\`]);
        await view.register({ name: 'proc' + p, version: String(i) });
      }`;
    await Promise.all([0, 1, 2, 3].map((p) => run(process.execPath, ['--input-type=module', '-e', script, home, runsDir, SHARED, String(p)])));
    const want = [0, 1, 2, 3].flatMap((p) => Array.from({ length: 25 }, (_, i) => ancestor(p, i))).sort();
    const reg = new FileSessionRegistry(home);
    expect([...reg.read(SHARED)!.ancestors].sort()).toEqual(want);
    expect(reg.links(SHARED).sort()).toEqual(want);
  }, 60_000);
});
