import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { refuseMalformedRequests } from './arguments-guard.js';
import { loadSettings, type Settings } from '../config.js';
import { newSessionId } from '../ids.js';
import { setOriginalUmask } from '../manager/original-umask.js';
import { realpathOrNull } from '../realpath.js';
import { newSessionRecord } from '../manager/session-record.js';
import { openHome, sessionRegistrar, settleLocksBeforeExit, stopSpawnerThread } from '../manager/state-home.js';
import { createServer } from './server.js';

/** How often the parent pid is checked: a server whose client vanished must not linger (docs/contract.md, invariant 9). */
const PARENT_CHECK_MS = 500;
/**
 * Shutdown, docs/clients.md: Claude Code sends SIGINT, SIGTERM 100 ms later and SIGKILL at 500 ms, and never closes
 * stdin. In-flight launches get up to ABANDON_WAIT_MS to record their abandonment (tens of ms: a status write, a
 * SIGKILL of a runner that never proceeded, the reservation returned; several times that on a loaded machine); the
 * lock sections under way then finish; the process exits. An idle server waits for none of it. EXIT_BOUND_MS is the
 * backstop for a stuck file system, below the host's SIGKILL.
 */
const ABANDON_WAIT_MS = 250;
const EXIT_BOUND_MS = 450;

function log(line: string): void {
  // stderr only: stdout is the protocol stream.
  process.stderr.write(`subagents-mcp: ${line}\n`);
}

export async function serve(flags: Record<string, string | string[] | undefined>, version: string): Promise<void> {
  setOriginalUmask(process.umask(0o077));
  let settings: Settings;
  try {
    settings = loadSettings(process.env, flags);
    openHome(settings);
  } catch (e) {
    log((e as Error).message);
    process.exit(2);
  }
  let clientRoots: string[] | null = null;
  // One session id for the record written now and the core loaded later.
  const fresh = settings.sessionId === null; // made here: nothing in the home can name it yet
  settings = { ...settings, sessionId: settings.sessionId ?? newSessionId() };
  const registerRecord = sessionRegistrar(settings, fresh);
  let own = newSessionRecord(settings.sessionId!);
  const register = async (client: { name: string; version: string } | null) => {
    try { own = await registerRecord(own, client); } catch { /* the registry is best effort */ }
  };
  const shutdownController = new AbortController();
  // Restorable from its first answer that names it, even before it has runs: the core (every tool, every resource)
  // waits for this. Not before connecting: the initialize handshake does not wait for the registry's lock and fsyncs.
  let registering: () => void = () => {};
  const registered = new Promise<void>((resolve) => { registering = () => { void register(null).then(resolve); }; });
  const handle = createServer({
    version, settings, env: process.env, clientRoots: () => clientRoots, shutdown: shutdownController.signal, log, registered,
    onClient: (name, v) => { void register({ name: name.slice(0, 100), version: v.slice(0, 50) }); },
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
    // Launches not yet told to proceed record their failure; runs already started are left alone.
    shutdownController.abort();
    // The spawner thread goes now, beside the rest: torn down by the exit instead, it cost tens of ms.
    const spawner = stopSpawnerThread();
    setTimeout(() => process.exit(0), EXIT_BOUND_MS).unref();
    // No lock section is cut in half by the exit (one cut mid-acquisition would strand its lock: store/lock.ts).
    void handle.stop(ABANDON_WAIT_MS)
      .then(() => settleLocksBeforeExit())
      .then(() => spawner)
      .finally(() => process.exit(0));
  };
  process.stdin.on('end', () => shutdown('stdin closed'));
  process.stdin.on('close', () => shutdown('stdin closed'));
  process.stdout.on('error', (e) => shutdown(`stdout ${(e as NodeJS.ErrnoException).code ?? 'error'}`));
  for (const sig of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) process.on(sig, () => shutdown(sig));
  const parent = process.ppid;
  setInterval(() => { if (process.ppid !== parent) shutdown('parent process changed'); }, PARENT_CHECK_MS).unref();

  const transport = new StdioServerTransport();
  await server.connect(transport);
  refuseMalformedRequests(transport);
  registering();
}
