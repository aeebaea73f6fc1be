import { spawn } from 'node:child_process';
import type { ManagerContext } from '../manager/context.js';
import { startUiServer } from '../ui/server.js';
import { CliError, EXIT_USAGE } from './context.js';

export interface UiCommandOptions { port?: string; open: boolean }

/** Hands the URL to the desktop's opener; a machine without one (a server, CI) just has the printed URL. */
function openBrowser(url: string): void {
  const cmd = process.platform === 'darwin' ? 'open' : process.platform === 'win32' ? 'explorer.exe' : 'xdg-open';
  try {
    const child = spawn(cmd, [url], { stdio: 'ignore', detached: true });
    child.on('error', () => {});
    child.unref();
  } catch { /* the URL is printed */ }
}

/** Serves the dashboard until interrupted; prints the URL (with its token) on stdout. */
export async function uiCommand(ctx: ManagerContext, o: UiCommandOptions, out: (s: string) => void): Promise<number> {
  let port: number | undefined;
  if (o.port !== undefined) {
    port = /^\d{1,5}$/.test(o.port.trim()) ? Number(o.port.trim()) : NaN; // decimal digits only: not 0x10, 1e3
    if (!Number.isInteger(port) || port < 0 || port > 65535) throw new CliError(`--port ${JSON.stringify(o.port.slice(0, 20))} is not a port number (0-65535)`, EXIT_USAGE);
  }
  let ui;
  try {
    ui = await startUiServer(ctx, { port });
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'EADDRINUSE') throw new CliError(`port ${port} on 127.0.0.1 is in use; pick another with --port, or leave it out for any free port`);
    throw new CliError((e as Error).message);
  }
  out(`subagents-mcp ui: ${ui.url}`);
  out('(the URL carries a secret token: anyone with it can cancel your runs. Ctrl-C stops the dashboard.)');
  if (o.open) openBrowser(ui.url);
  return new Promise<number>((resolve) => {
    // `on`, not `once`: signal-exit (loaded by the Redis client's dependencies) re-raises a signal when it finds only
    // its own listeners left, and a `once` listener is gone by the time its later copy looks.
    const end = () => {
      for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.off(sig, end);
      void ui.close().finally(() => resolve(0));
    };
    for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(sig, end);
  });
}
