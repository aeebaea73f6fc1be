import fs from 'node:fs';
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import path from 'node:path';
import { isSubagentError } from '../errors.js';
import { isRunId } from '../ids.js';
import { cancelRun } from '../manager/cancel.js';
import type { ManagerContext } from '../manager/context.js';
import { dismissRun } from '../manager/dismiss.js';
import { HomeFeed } from '../manager/home-feed.js';
import { DIST_DIR } from '../paths.js';
import { cookieName, cookieValue, hostAllowed, newUiBasePath, newUiToken, originAllowed, sameSecret, sessionCookie } from './auth.js';
import { HomeModel, MAX_PAGE_SIZE } from './model.js';
import { RowCache } from './row-cache.js';
import { RedisModel } from './redis-model.js';

/** The page's files, built once by `npm run build` (scripts/build-ui.mjs) into dist/page/. */
export const UI_DIR = path.join(DIST_DIR, 'page');

/** No inline script or style, nothing from another origin, never framed (docs/watch-and-ui.md). */
export const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
  + "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const COMMON_HEADERS: Record<string, string> = {
  'Content-Security-Policy': CSP,
  'X-Content-Type-Options': 'nosniff',
  'X-Frame-Options': 'DENY',
  'Referrer-Policy': 'no-referrer',
  'Cross-Origin-Opener-Policy': 'same-origin',
  'Cross-Origin-Resource-Policy': 'same-origin',
  'Cache-Control': 'no-store',
};

const ASSETS: Record<string, string> = {
  '/': 'index.html', '/index.html': 'index.html', '/app.js': 'app.js', '/app.css': 'app.css',
};
const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8', '.js': 'text/javascript; charset=utf-8', '.css': 'text/css; charset=utf-8',
};

/**
 * Ended runs are checked for a dismissal by another process (they have no file watch): the runs on the last page
 * served at every tick, and this many others, round robin. A dismissal from the command line of a run on screen shows
 * within 2 s, of any run of 1 000 within 20 s; the idle server does not stat every run of the home every few seconds
 * (with 10 000 runs that was most of its idle CPU). The dashboard's own dismissals show at once.
 */
const AUDIT_MS = 2000;
const AUDIT_RUNS = 100;
/** SSE comment lines keep idle connections from being cut by anything in between. */
const HEARTBEAT_MS = 25_000;
const OUTPUT_TAIL_DEFAULT = 16 * 1024;
const OUTPUT_TAIL_MAX = 256 * 1024;

export interface UiServer {
  url: string;
  port: number;
  token: string;
  close: () => Promise<void>;
}

export interface UiOptions { port?: number; token?: string; pollMs?: number }

/** Starts the dashboard on 127.0.0.1 (never another interface). */
export async function startUiServer(ctx: ManagerContext, o: UiOptions = {}): Promise<UiServer> {
  const token = o.token ?? newUiToken();
  const basePath = newUiBasePath();
  const assets = new Map<string, Buffer>();
  for (const name of new Set(Object.values(ASSETS))) {
    try {
      assets.set(name, fs.readFileSync(path.join(UI_DIR, name)));
    } catch {
      throw new Error(`the dashboard's page is not built (${path.join(UI_DIR, name)} is missing); run npm run build`);
    }
  }
  const clients = new Set<ServerResponse>();
  const broadcast = (event: string, data: unknown) => {
    const frame = `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
    for (const c of clients) c.write(frame);
  };
  // Over Redis the runs are the deployment's, read through the distributed use cases and followed on its feed.
  const remote = ctx.distributed ? followRedis(ctx, broadcast, o.pollMs) : null;
  const model: HomeModel = remote?.model ?? new HomeModel(ctx, undefined, new RowCache(ctx.settings.home));
  const feed = remote ? null : new HomeFeed(ctx, {
    since: null,
    settled: (runId) => model.settled(runId),
    pollMs: o.pollMs,
    onChange: (runIds, { output }) => {
      for (const id of runIds) model.refresh(id);
      broadcast('change', { runs: runIds, output, gauges: model.gauges() });
    },
  });
  // The home is read after the server listens: a browser opening the printed URL loads the page meanwhile, and only
  // the data requests wait for it.
  let stopped = false;
  const ready = remote ? remote.start() : new Promise<void>((resolve, reject) => {
    setImmediate(() => {
      if (stopped || !feed) { resolve(); return; }
      try {
        model.load();
        void feed.start().then(() => {
          // What changed between the model's read and the feed's first look.
          for (const r of feed.known()) if (r.active) model.refresh(r.runId);
          void model.saveCache();
          resolve();
        }, reject);
      } catch (e) { reject(e as Error); }
    });
  });
  ready.catch(() => {});
  const audit = setInterval(() => {
    const changed = model.audit(AUDIT_RUNS);
    if (changed.length) broadcast('change', { runs: changed, output: [], gauges: model.gauges() });
    void model.saveCache();
  }, AUDIT_MS);
  audit.unref();
  const heartbeat = setInterval(() => { for (const c of clients) c.write(': idle\n\n'); }, HEARTBEAT_MS);
  heartbeat.unref();

  let port = 0;
  const server = http.createServer((req, res) => {
    void handle(req, res).catch((e: unknown) => {
      // The error's kind only: a message may quote a path or a run's text.
      ctx.log(`ui: a request failed (${e instanceof Error ? `${e.name}${(e as NodeJS.ErrnoException).code ? ` ${(e as NodeJS.ErrnoException).code}` : ''}` : typeof e})`);
      if (res.headersSent) res.end();
      // Damage in the home (a FIFO where a step's output goes …) is named as such, as the tools name it.
      else if (isSubagentError(e)) send(res, 500, { error: { code: e.code, message: e.message } });
      else send(res, 500, { error: { code: 'INTERNAL', message: 'the dashboard could not answer this request; see the terminal that runs it' } });
    });
  });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (!hostAllowed(req.headers.host, port)) {
      return sendText(res, 403, `403: this dashboard answers only to http://127.0.0.1:${port}/ and http://localhost:${port}/ (Host ${JSON.stringify(String(req.headers.host ?? '').slice(0, 80))} refused).`);
    }
    const url = new URL(req.url ?? '/', `http://127.0.0.1:${port}`);
    // The page and its API live under the secret path (its cookie's); a script with the bearer token may leave it out.
    const pathname = url.pathname.startsWith(basePath) ? `/${url.pathname.slice(basePath.length)}` : url.pathname;
    const method = req.method ?? 'GET';
    if (method !== 'GET' && method !== 'POST' && method !== 'HEAD') return sendText(res, 405, '405: method not allowed.');
    // The page's path without its last slash: the cookie is not sent there (its Path ends with the slash).
    if (url.pathname === basePath.slice(0, -1) && (method === 'GET' || method === 'HEAD')) {
      res.writeHead(308, { ...COMMON_HEADERS, Location: basePath });
      res.end();
      return;
    }
    // The printed URL carries the token once: it becomes a cookie, and the address bar loses it.
    const given = url.searchParams.get('token');
    if (method === 'GET' && url.pathname === '/' && given !== null) {
      if (!sameSecret(given, token)) return sendText(res, 403, '403: wrong token. Open the URL that subagents-mcp ui printed.');
      res.writeHead(303, { ...COMMON_HEADERS, 'Set-Cookie': sessionCookie(port, token, basePath), Location: basePath });
      res.end();
      return;
    }
    const cookie = cookieValue(req, cookieName(port));
    const bearer = /^Bearer (.+)$/.exec(req.headers.authorization ?? '')?.[1];
    const credential = cookie ?? bearer;
    if (credential === undefined) return sendText(res, 401, '401: no token. Open the URL that subagents-mcp ui printed (it carries the token).');
    if (!sameSecret(credential, token)) return sendText(res, 403, '403: wrong token. Open the URL that subagents-mcp ui printed.');

    if (method === 'POST') {
      if (!originAllowed(req.headers.origin, port)) return sendText(res, 403, '403: actions are accepted only from the dashboard page itself (Origin refused).');
      await drain(req);
      const m = /^\/api\/runs\/([^/]+)\/(cancel|dismiss)$/.exec(pathname);
      if (!m || !isRunId(m[1]!)) return send(res, 404, { error: { code: 'RUN_NOT_FOUND', message: 'no such run or action' } });
      await ready;
      return act(res, m[1]!, m[2] as 'cancel' | 'dismiss');
    }
    const asset = ASSETS[pathname];
    if (asset) {
      res.writeHead(200, { ...COMMON_HEADERS, 'Content-Type': TYPES[path.extname(asset)]! });
      res.end(method === 'HEAD' ? undefined : assets.get(asset));
      return;
    }
    if (pathname.startsWith('/api/')) await ready;
    if (pathname === '/api/events') {
      // A HEAD gets the stream's headers only: a stream opened for it would never end.
      if (method === 'HEAD') { res.writeHead(200, { ...COMMON_HEADERS, 'Content-Type': 'text/event-stream; charset=utf-8' }); res.end(); return; }
      return openStream(req, res);
    }
    if (pathname === '/api/runs') {
      const n = (k: string) => { const v = Number(url.searchParams.get(k)); return Number.isFinite(v) && v > 0 ? v : undefined; };
      const s = (k: string) => url.searchParams.get(k)?.slice(0, 200) || undefined;
      return send(res, 200, model.list({
        state: s('state'), session: s('session'), agent: s('agent'), q: s('q'), all: url.searchParams.get('all') === '1',
        page: n('page'), pageSize: Math.min(MAX_PAGE_SIZE, n('pageSize') ?? 50),
      }));
    }
    const run = /^\/api\/runs\/([^/]+)(\/output)?$/.exec(pathname);
    if (run) {
      const runId = run[1]!;
      if (run[2]) {
        const asked = Math.floor(Number(url.searchParams.get('bytes')));
        const bytes = Number.isFinite(asked) && asked > 0 ? Math.min(OUTPUT_TAIL_MAX, asked) : OUTPUT_TAIL_DEFAULT;
        const step = url.searchParams.get('step') ?? '';
        const tail = remote ? await remote.model.outputTailRemote(runId, step, bytes) : model.outputTail(runId, step, bytes);
        return tail ? send(res, 200, tail) : send(res, 404, { error: { code: 'RUN_NOT_FOUND', message: 'no such run or step' } });
      }
      const d = remote ? await remote.model.detailRemote(runId) : model.detail(runId);
      const named = isRunId(runId) ? `run ${runId}` : 'such run';
      return d ? send(res, 200, d) : send(res, 404, { error: { code: 'RUN_NOT_FOUND', message: `no ${named} in this ${remote ? 'Redis' : 'state home'} (removed, or never existed)` } });
    }
    return sendText(res, 404, '404: not found.');
  }

  async function act(res: ServerResponse, runId: string, action: 'cancel' | 'dismiss'): Promise<void> {
    try {
      const result = action === 'cancel' ? await cancelRun(ctx, runId) : await dismissRun(ctx, runId, false);
      if (remote) await remote.model.refreshRemote(runId); else model.refresh(runId);
      broadcast('change', { runs: [runId], output: [], gauges: model.gauges() });
      send(res, 200, result);
    } catch (e) {
      if (!isSubagentError(e)) throw e;
      const status = e.code === 'RUN_NOT_FOUND' ? 404 : e.code === 'RUN_ACTIVE' ? 409 : e.code === 'BUSY' ? 503 : 500;
      send(res, status, { error: { code: e.code, message: e.message } });
    }
  }

  function openStream(req: IncomingMessage, res: ServerResponse): void {
    res.writeHead(200, { ...COMMON_HEADERS, 'Content-Type': 'text/event-stream; charset=utf-8', Connection: 'keep-alive' });
    res.write(`retry: 1000\nevent: hello\ndata: ${JSON.stringify({ gauges: model.gauges() })}\n\n`);
    clients.add(res);
    req.on('close', () => clients.delete(res));
  }

  const stopFollowing = () => {
    stopped = true;
    feed?.stop();
    remote?.stop();
    clearInterval(audit);
    clearInterval(heartbeat);
  };
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(o.port ?? 0, '127.0.0.1', () => { server.off('error', reject); resolve(); });
    });
  } catch (e) {
    stopFollowing(); // a port in use: nothing of this server may keep the process up (the home's watches)
    throw e;
  }
  port = (server.address() as { port: number }).port;
  return {
    url: `http://127.0.0.1:${port}/?token=${token}`,
    port,
    token,
    close: async () => {
      stopFollowing();
      for (const c of clients) c.end();
      clients.clear();
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeAllConnections();
      await closed;
    },
  };
}

/**
 * The dashboard over Redis (docs/watch-and-ui.md, "The dashboard over Redis"): the model reads the deployment's runs, and the feed
 * of run events (a blocking read, no poll) names the runs to read again; runs on workers announce their output at
 * each tick, since output reaches Redis without an event.
 */
function followRedis(ctx: ManagerContext, broadcast: (event: string, data: unknown) => void, pollMs = 1000) {
  const model = new RedisModel(ctx);
  const stopping = new AbortController();
  let ticker: NodeJS.Timeout | null = null;
  return {
    model,
    start: async (): Promise<void> => {
      let placed: () => void = () => {};
      const place = new Promise<void>((r) => { placed = r; });
      void ctx.distributed!.follow(null, stopping.signal, async (entries) => {
        const runs = [...new Set(entries.map((e) => e.runId))];
        for (const id of runs) await model.refreshRemote(id).catch(() => {});
        await model.refreshGauges().catch(() => {});
        broadcast('change', { runs, output: runs, gauges: model.gauges() });
      }, () => placed()).catch(() => {});
      // Read from the feed's place on: a run changed during the first read is read again when its event comes.
      await place;
      await model.loadRemote();
      ticker = setInterval(() => {
        const output = model.running();
        if (output.length) broadcast('change', { runs: [], output, gauges: model.gauges() });
      }, pollMs);
      ticker.unref();
    },
    stop: (): void => { stopping.abort(); if (ticker) clearInterval(ticker); },
  };
}

function send(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { ...COMMON_HEADERS, 'Content-Type': 'application/json; charset=utf-8' });
  res.end(JSON.stringify(body));
}

function sendText(res: ServerResponse, status: number, text: string): void {
  res.writeHead(status, { ...COMMON_HEADERS, 'Content-Type': 'text/plain; charset=utf-8' });
  res.end(`${text}\n`);
}

/** Reads and discards a request body (actions take none), at most 64 KiB. */
async function drain(req: IncomingMessage): Promise<void> {
  let n = 0;
  for await (const chunk of req) {
    n += (chunk as Buffer).length;
    if (n > 65_536) { req.destroy(); return; }
  }
}
