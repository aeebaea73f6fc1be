import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { dirSignature, readDirSnapshot } from '../../src/store/dir-snapshot.js';

let dir: string;
beforeEach(() => { dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sa-dirsnap-')); });
afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

describe('directory snapshots', () => {
  it('read the names with a signature that a new or removed run directory changes', () => {
    fs.mkdirSync(path.join(dir, 'r-a'));
    const snap = readDirSnapshot(dir)!;
    expect(snap.names).toEqual(['r-a']);
    expect(dirSignature(dir)).toBe(snap.sig);
    fs.mkdirSync(path.join(dir, 'r-b'));
    const grown = dirSignature(dir);
    expect(grown).not.toBe(snap.sig);
    fs.rmdirSync(path.join(dir, 'r-a'));
    expect(dirSignature(dir)).not.toBe(grown);
  });

  it('are null for a directory that is not there', () => {
    expect(dirSignature(path.join(dir, 'absent'))).toBeNull();
    expect(readDirSnapshot(path.join(dir, 'absent'))).toBeNull();
  });
});
