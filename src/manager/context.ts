import type { Settings } from '../config.js';
import { selfIdentity, type ProcessIdentity } from '../process/identity.js';
import { Layout } from '../store/layout.js';
import { RunStore } from '../store/run-store.js';
import type { NestingContext } from './nesting.js';

/** Everything a use-case needs: settings, the state home, who we are. Built once per server process. */
export interface ManagerContext {
  settings: Settings;
  layout: Layout;
  store: RunStore;
  sessionId: string;
  /** This server process (reservations of a dead launcher are reclaimed by it). */
  server: ProcessIdentity;
  /** The roots a run's cwd must resolve inside, realpath'd; [] when none are configured. */
  roots: () => string[];
  /** Non-null when started by an agent with a valid SUBAGENTS_BUDGET: launches are nested. */
  nesting: NestingContext | null;
  /** Sessions whose runs this session adopted (restore), its own included. */
  visibleSessions: () => ReadonlySet<string>;
  /** The environment this server was started with (agents get an allowlisted part of it). */
  env: NodeJS.ProcessEnv;
  log: (line: string) => void;
}

/** The built runner entry and the bundled agents (src/paths.ts: correct in the tsc build and in the bundle). */
export { RUNNER_MAIN, BUNDLED_AGENTS_DIR } from '../paths.js';

/** The state home's files, and this process as the context names it (`server`). */
export function makeStore(settings: Settings): { layout: Layout; store: RunStore; server: ProcessIdentity } {
  const layout = new Layout(settings.home);
  return { layout, store: new RunStore(layout), server: selfIdentity() };
}
