import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { newSessionRecord, registerSession } from '../../src/manager/session-record.js';
import { FileSessionRegistry } from '../../src/store/session-registry.js';

const SID = `s-restarted-${'r'.repeat(16)}`;
const OWNER = `s-owner-${'o'.repeat(16)}`;

describe('registerSession', () => {
  let home: string;
  let runsDir: string;
  beforeEach(() => {
    home = fs.mkdtempSync(path.join(os.tmpdir(), 'sa-register-'));
    runsDir = path.join(home, 'runs');
    // A run this session adopted by restore; its record (sessions/<SID>.json) is lost.
    const marker = path.join(runsDir, `r-${'a'.repeat(24)}`, 'adopted-by');
    fs.mkdirSync(marker, { recursive: true });
    fs.writeFileSync(path.join(marker, `${SID}.json`), JSON.stringify({ owner: OWNER, at: 'x' }));
  });
  afterEach(() => fs.rmSync(home, { recursive: true, force: true }));

  it('rebuilds a session\'s lost ancestors from the runs\' adoption markers', async () => {
    const rec = await registerSession(new FileSessionRegistry(home), runsDir, newSessionRecord(SID), null);
    expect(rec.ancestors).toEqual([OWNER]);
  });

  it('does not read the run directories for an id made fresh by this process (nothing can name it yet)', async () => {
    const rec = await registerSession(new FileSessionRegistry(home), runsDir, newSessionRecord(SID), null, { fresh: true });
    expect(rec.ancestors).toEqual([]);
  });
});
