import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { loadSettings, type Settings } from '../config.js';
import { newSessionId } from '../ids.js';
import { makeStore, type ManagerContext } from '../manager/context.js';
import { setOriginalUmask } from '../manager/launch.js';
import { resolveNesting } from '../manager/nesting.js';
import { fallbackRoots, realpathOrNull } from '../manager/roots.js';
import { SessionView } from '../manager/sessions.js';
import { Sweeper } from '../manager/sweep.js';
import { selfIdentity } from '../process/identity.js';
import { openStateHome } from '../store/state-home.js';
import { settleLocks } from '../store/lock.js';
import { createServer } from './server.js';

/** How often the parent pid is checked: a server whose client vanished must not linger (SPEC §8.9). */
const PARENT_CHECK_MS = 500;
/** In-flight launches get this long to record their abandonment before the process exits. */
const SHUTDOWN_GRACE_MS = 1200;

function log(line: string): void {
  // stderr only: stdout is the protocol stream.
  process.stderr.write(`subagents-mcp: ${line}\n`);
}

/** Builds the manager context of one server process. */
export function buildContext(settings: Settings, env: NodeJS.ProcessEnv, clientRoots: () => string[] | null): { ctx: ManagerContext; sessions: SessionView } {
  const { layout, store } = makeStore(settings);
  const sessionId = settings.sessionId ?? newSessionId();
  const sessions = new SessionView(settings.home, sessionId, layout.runsDir);
  const nesting = resolveNesting(env, layout);
  const explicit = settings.explicitRoots?.map(realpathOrNull).filter((r): r is string => r !== null) ?? null;
  const fallback = fallbackRoots(settings.cwd, env);
  const ctx: ManagerContext = {
    settings, layout, store, sessionId, server: selfIdentity(), nesting, env, log,
    roots: () => explicit ?? clientRoots() ?? fallback,
    visibleSessions: () => sessions.visible(),
  };
  return { ctx, sessions };
}

export async function serve(flags: Record<string, string | string[] | undefined>, version: string): Promise<void> {
  setOriginalUmask(process.umask(0o077));
  let settings: Settings;
  try {
    settings = loadSettings(process.env, flags);
    openStateHome(settings.home);
  } catch (e) {
    log((e as Error).message);
    process.exit(2);
  }
  let clientRoots: string[] | null = null;
  const { ctx, sessions } = buildContext(settings, process.env, () => clientRoots);
  const shutdownController = new AbortController();
  const handle = createServer(ctx, {
    version,
    shutdown: shutdownController.signal,
    sessions: ctx.nesting ? null : sessions,
    onClient: (name, v) => { try { sessions.register({ name: name.slice(0, 100), version: v.slice(0, 50) }); } catch { /* registry is best effort */ } },
  });
  const { server } = handle;

  // Client roots (when no SUBAGENTS_ROOTS): asked after initialize and again on every change.
  const refreshRoots = async () => {
    if (settings.explicitRoots || !server.getClientCapabilities()?.roots) return;
    try {
      const r = await server.listRoots(undefined, { timeout: 5000 });
      clientRoots = r.roots.map((x) => x.uri).filter((u) => u.startsWith('file://'))
        .map((u) => realpathOrNull(decodeURIComponent(new URL(u).pathname))).filter((p): p is string => p !== null);
    } catch { /* keep the previous roots */ }
  };
  const { RootsListChangedNotificationSchema } = await import('@modelcontextprotocol/sdk/types.js');
  server.setNotificationHandler(RootsListChangedNotificationSchema, () => { void refreshRoots(); });
  const previousInit = server.oninitialized;
  server.oninitialized = () => { previousInit?.(); void refreshRoots(); };

  let stopping = false;
  const shutdown = (why: string) => {
    if (stopping) return;
    stopping = true;
    log(`shutting down (${why}); runs keep running`);
    shutdownController.abort();
    // Launches not yet told to proceed record their failure; runs already started are left alone.
    setTimeout(() => process.exit(0), SHUTDOWN_GRACE_MS).unref();
    // Then no new lock is taken and those under way finish: exiting mid-acquisition would strand a lock (store/lock.ts).
    void handle.close().finally(() => setTimeout(() => void settleLocks().finally(() => process.exit(0)), 300).unref());
  };
  process.stdin.on('end', () => shutdown('stdin closed'));
  process.stdin.on('close', () => shutdown('stdin closed'));
  process.stdout.on('error', (e) => shutdown(`stdout ${(e as NodeJS.ErrnoException).code ?? 'error'}`));
  for (const sig of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) process.on(sig, () => shutdown(sig));
  const parent = process.ppid;
  setInterval(() => { if (process.ppid !== parent) shutdown('parent process changed'); }, PARENT_CHECK_MS).unref();

  try { sessions.register(null); } catch { /* best effort */ }
  await server.connect(new StdioServerTransport());
  handle.watcher.start();
  new Sweeper(ctx).start();
}
