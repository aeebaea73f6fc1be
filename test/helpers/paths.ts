import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
/** The built bin (tests run against dist/, as users do; `npm test` builds first). */
export const MAIN_JS = path.join(REPO, 'dist', 'main.js');
export const FIXTURE_AGENTS = path.join(REPO, 'test', 'fixtures', 'agents');
