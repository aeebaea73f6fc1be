import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli } from '../cli/helpers.js';
import { FIXTURE_AGENTS } from '../helpers/paths.js';
import { procIdentity, until } from '../helpers/runs.js';
import { sc, startServer, waitTerminal, type Started } from '../helpers/server.js';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { skipWithout } from '../helpers/system-tools.js';
import { firstAgentPid, hasChromium, launchChromium, screenshotDir } from './browser.js';
import { startUi, type UiProcess } from './ui-process.js';

const FAKE = path.join(FIXTURE_AGENTS, 'fake-agent.mjs');
const DELEGATE = path.join(FIXTURE_AGENTS, 'delegating-agent.mjs');
const GATED = path.join(import.meta.dirname, '..', 'cli', 'fixtures', 'gated-agent.mjs');
const HTML = '<script>window.__pwned=1</script><b id="bold">bold</b><img src=x onerror="window.__pwned=2">';

/** A raw request with headers a browser would never let a page set (Host), or from another origin. */
function rawRequest(port: number, o: { method?: string; path?: string; headers?: Record<string, string> }): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method: o.method ?? 'GET', path: o.path ?? '/', headers: o.headers }, (res) => {
      let body = '';
      res.on('data', (c: Buffer) => { body += c.toString(); });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

/** The dashboard in a real headless Chromium, over runs a real server launched with fake agents. */
describe.skipIf(skipWithout('chromium', hasChromium()))('the dashboard in a real browser', { timeout: 240_000 }, () => {
  let t: ReturnType<typeof tempStateHome>;
  let s: Started;
  let ui: UiProcess;
  let browser: Browser;
  let page: Page;
  const shots = screenshotDir('dashboard');
  const shot = async (name: string) => {
    const file = path.join(shots, `${name}.png`);
    await page.screenshot({ path: file, fullPage: true });
    process.stderr.write(`screenshot: ${file}\n`);
  };
  const launch = async (args: Record<string, unknown>): Promise<string> => {
    const r = await s.call('launch', args);
    if (r.isError) throw new Error(JSON.stringify(r.content));
    return sc(r).runId as string;
  };
  const gate = (name: string) => path.join(t.base, `${name}.gate`);
  const stateOnScreen = (runId: string) => page.locator(`tr[data-run="${runId}"] .badge`).first();

  beforeAll(async () => {
    t = tempStateHome('sa-ui-');
    const agents = path.join(t.home, 'agents');
    writeAgent(agents, 'echo', { backend: 'command', command: ['node', FAKE, 'echo'] });
    writeAgent(agents, 'sleeper', { backend: 'command', command: ['node', FAKE, 'sleep', '60000'] });
    writeAgent(agents, 'gated', { backend: 'command', command: ['node', GATED, gate('one'), '0'] });
    writeAgent(agents, 'gated-two', { backend: 'command', command: ['node', GATED, gate('two'), '0'] });
    writeAgent(agents, 'delegate', { backend: 'command', command: ['node', DELEGATE, 'delegate'], delegate: true });
    writeAgent(agents, 'html', { backend: 'command', command: ['node', '-e', `process.stdout.write(${JSON.stringify(HTML)})`] });
    // A damaged run directory: the page must say so and go on.
    fs.mkdirSync(path.join(t.home, 'runs', 'r-DAMAGEDDAMAGEDDAMAGED000'), { recursive: true, mode: 0o700 });
    fs.writeFileSync(path.join(t.home, 'runs', 'r-DAMAGEDDAMAGEDDAMAGED000', 'run.json'), '{"not json', { mode: 0o600 });
    s = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_KILL_GRACE_MS: '500' });
    ui = await startUi({ SUBAGENTS_HOME: t.home });
    browser = await launchChromium();
    page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  });

  afterAll(async () => {
    await browser?.close().catch(() => {});
    await ui?.stop();
    await s?.close();
    const active = await cli(['runs', '--json', '--all', '--state', 'active'], { SUBAGENTS_HOME: t.home }).then((r) => JSON.parse(r.stdout).runs as Array<{ runId: string }>).catch(() => []);
    await Promise.all(active.map((r) => cli(['cancel', r.runId], { SUBAGENTS_HOME: t.home }).catch(() => {})));
    t.cleanup();
  });

  it('refuses a request without the token (401), with a wrong one (403), and sets a strict HttpOnly cookie', async () => {
    const p = await browser.newPage();
    const bare = await p.goto(`${ui.base}/`);
    expect(bare!.status()).toBe(401);
    expect(await p.textContent('body')).toContain('no token');
    const wrong = await p.goto(`${ui.base}/?token=nottherightone`); // the printed URL's form, with another token
    expect(wrong!.status()).toBe(403);
    const api = await rawRequest(ui.port, { path: '/api/runs', headers: { Host: `127.0.0.1:${ui.port}` } });
    expect(api.status).toBe(401);
    const ok = await rawRequest(ui.port, { path: `/?token=${ui.token}`, headers: { Host: `127.0.0.1:${ui.port}` } });
    expect(ok.status).toBe(303);
    expect(String(ok.headers['set-cookie'])).toMatch(/HttpOnly; SameSite=Strict/);
    await p.close();
  });

  it('scopes its cookie to the page\'s secret path: another service on 127.0.0.1 never receives it', async () => {
    const ok = await rawRequest(ui.port, { path: `/?token=${ui.token}`, headers: { Host: `127.0.0.1:${ui.port}` } });
    const location = String(ok.headers.location);
    expect(location).toMatch(/^\/s\/[A-Za-z0-9_-]{16}\/$/);
    expect(String(ok.headers['set-cookie'])).toContain(`; Path=${location}`);
    // Browsers send a host's cookies to all its ports: a user who opened the dashboard then visits another local service.
    const seen: string[] = [];
    const other = http.createServer((req, res) => { seen.push(String(req.headers.cookie ?? '')); res.end('another service'); });
    await new Promise<void>((r) => other.listen(0, '127.0.0.1', () => r()));
    const p = await browser.newPage();
    try {
      await p.goto(ui.url);
      expect(new URL(p.url()).pathname).toBe(location);
      const port = (other.address() as { port: number }).port;
      await p.goto(`http://127.0.0.1:${port}/`);
      await p.goto(`http://127.0.0.1:${port}/api/runs`);
      expect(seen.length).toBeGreaterThanOrEqual(2); // and the browser's own favicon requests
      expect(seen.join('\n')).not.toContain(ui.token);
    } finally {
      await p.close();
      other.close();
    }
  });

  it('answers 403 to a foreign Host (DNS rebinding) and to an action from a foreign Origin, with no CORS headers', async () => {
    const cookie = `subagents_ui_${ui.port}=${ui.token}`;
    const rebound = await rawRequest(ui.port, { path: '/api/runs', headers: { Host: `evil.example:${ui.port}`, Cookie: cookie } });
    expect(rebound.status).toBe(403);
    const own = await rawRequest(ui.port, { path: '/api/runs', headers: { Host: `localhost:${ui.port}`, Cookie: cookie } });
    expect(own.status).toBe(200);
    expect(own.headers['access-control-allow-origin']).toBeUndefined();
    expect(own.headers['content-security-policy']).toMatch(/script-src 'self'/);
    expect(own.headers['content-security-policy']).not.toMatch(/unsafe-inline/);
    const foreign = await rawRequest(ui.port, { method: 'POST', path: '/api/runs/r-aaaaaaaaaaaaaaaaaaaaaaaa/cancel', headers: { Host: `127.0.0.1:${ui.port}`, Cookie: cookie, Origin: 'http://evil.example' } });
    expect(foreign.status).toBe(403);
    const noOrigin = await rawRequest(ui.port, { method: 'POST', path: '/api/runs/r-aaaaaaaaaaaaaaaaaaaaaaaa/cancel', headers: { Host: `127.0.0.1:${ui.port}`, Cookie: cookie } });
    expect(noOrigin.status).toBe(403);
  });

  it('listens on the loopback address only', () => {
    const tcp = fs.readFileSync('/proc/net/tcp', 'utf8') + (fs.existsSync('/proc/net/tcp6') ? fs.readFileSync('/proc/net/tcp6', 'utf8') : '');
    const hexPort = ui.port.toString(16).toUpperCase().padStart(4, '0');
    const listening = tcp.split('\n').filter((l) => l.includes(`:${hexPort} `) && / 0A /.test(l)).map((l) => l.trim().split(/\s+/)[1]);
    expect(listening).toEqual([`0100007F:${hexPort}`]);
  });

  it('shows launched runs in the tree, with a damaged run directory reported, not fatal', async () => {
    const done = await launch({ agent: 'echo', task: 'hello', label: 'an echo' });
    await waitTerminal(s, done);
    const sleeping = await launch({ agent: 'sleeper', task: 'zzz', label: 'a sleeper' });
    await page.goto(ui.url);
    await page.locator(`tr[data-run="${done}"]`).waitFor({ timeout: 30_000 });
    await expect.poll(() => stateOnScreen(done).textContent(), { timeout: 30_000 }).toBe('completed');
    await expect.poll(() => stateOnScreen(sleeping).textContent(), { timeout: 30_000 }).toBe('running');
    expect(await page.locator('.notice').textContent()).toContain('could not be read');
    expect(new URL(page.url()).search).toBe(''); // the token left the address bar
    await shot('tree');
    await cli(['cancel', sleeping], { SUBAGENTS_HOME: t.home });
  });

  it('shows a nested run under its parent step', async () => {
    const root = await launch({ agent: 'delegate', task: JSON.stringify({ launches: [{ agent: 'echo', task: 'from the child', label: 'nested echo' }], wait: true }), label: 'a delegating run' });
    await waitTerminal(s, root);
    await page.goto(`${ui.page}#/`);
    await page.locator(`tr[data-run="${root}"]`).waitFor({ timeout: 30_000 });
    const next = page.locator(`tr[data-run="${root}"] + tr`);
    await expect.poll(() => next.locator('.nest').textContent(), { timeout: 30_000 }).toContain('step 0');
    expect(await next.locator('td.label').textContent()).toBe('nested echo');
    expect(await next.getAttribute('class')).toBe('lvl1');
    await page.goto(`${ui.page}#/run/${root}`);
    await expect.poll(() => page.locator('ul.children li').count(), { timeout: 30_000 }).toBe(1);
  });

  it('shows a new launch and its state change on screen without a reload', async () => {
    await page.goto(`${ui.page}#/`);
    await page.locator('table.runs').waitFor();
    await page.evaluate(() => { (window as unknown as { __same: number }).__same = 42; });
    const runId = await launch({ agent: 'gated', task: 'wait for the gate', label: 'gated run' });
    await page.locator(`tr[data-run="${runId}"]`).waitFor({ timeout: 30_000 });
    await expect.poll(() => stateOnScreen(runId).textContent(), { timeout: 30_000 }).toBe('running');
    fs.writeFileSync(gate('one'), '');
    await expect.poll(() => stateOnScreen(runId).textContent(), { timeout: 30_000 }).toBe('completed');
    expect(await page.evaluate(() => (window as unknown as { __same?: number }).__same)).toBe(42);
  });

  it('grows the timeline while a step runs', async () => {
    const runId = await launch({ chain: [{ agent: 'echo', task: 'first step' }, { agent: 'sleeper', task: 'second step' }], label: 'a chain' });
    await page.goto(`${ui.page}#/run/${runId}`);
    const bar = page.locator('.tl-row[data-key="1"] .bar');
    await expect.poll(() => bar.getAttribute('class'), { timeout: 30_000 }).toContain('s-running');
    const width = async () => (await bar.boundingBox())?.width ?? 0;
    const w1 = await width();
    await expect.poll(width, { timeout: 30_000 }).toBeGreaterThan(w1 + 2);
    await shot('run-page');
    await cli(['cancel', runId], { SUBAGENTS_HOME: t.home });
  });

  it('follows a running step\'s output on its run page', async () => {
    const runId = await launch({ agent: 'gated-two', task: 'print, wait, print' });
    await page.goto(`${ui.page}#/run/${runId}`);
    await expect.poll(() => page.locator('pre.output').textContent(), { timeout: 30_000 }).toBe('first\n');
    expect(await page.locator('h2.title .badge').textContent()).toBe('running');
    fs.writeFileSync(gate('two'), '');
    await expect.poll(() => page.locator('pre.output').textContent(), { timeout: 30_000 }).toBe('first\nsecond\n');
    await expect.poll(() => page.locator('h2.title .badge').textContent(), { timeout: 30_000 }).toBe('completed');
  });

  it('cancels from the page after a confirmation, and the agent process is gone', async () => {
    const runId = await launch({ agent: 'sleeper', task: 'to be cancelled' });
    const pid = await firstAgentPid(t.home, runId);
    expect(pid).not.toBeNull();
    expect(procIdentity(pid!)).not.toBeNull();
    await page.goto(`${ui.page}#/run/${runId}`);
    await page.locator('#act-cancel').click();
    await expect(page.locator('#confirm').isVisible()).resolves.toBe(true);
    await page.keyboard.press('Escape'); // the dialog closes, the run goes on
    expect(await page.locator('#confirm').isVisible()).toBe(false);
    expect(procIdentity(pid!)).not.toBeNull();
    await page.locator('#act-cancel').focus();
    await page.keyboard.press('Enter');
    await page.locator('#confirm-yes').click();
    await expect.poll(() => page.locator('h2.title .badge').textContent(), { timeout: 30_000 }).toBe('cancelled');
    expect(await until(() => procIdentity(pid!) === null, 30_000)).toBe(true);
  });

  it('shows an agent that prints HTML as text, and a label as text; dismisses after a confirmation', async () => {
    const runId = await launch({ agent: 'html', task: 'x', label: '<i id="lbl">label</i>' });
    await waitTerminal(s, runId);
    await page.goto(`${ui.page}#/run/${runId}`);
    await expect.poll(() => page.locator('pre.output').textContent(), { timeout: 30_000 }).toContain('<script>window.__pwned=1</script>');
    expect(await page.locator('#bold').count()).toBe(0);
    expect(await page.locator('#lbl').count()).toBe(0);
    expect(await page.locator('h2.title').textContent()).toContain('<i id="lbl">label</i>');
    expect(await page.evaluate(() => (window as unknown as { __pwned?: number }).__pwned)).toBeUndefined();
    // Dismiss, confirmed: the run leaves the tree, and comes back with "dismissed" ticked.
    await page.locator('#act-dismiss').click();
    await page.locator('#confirm-yes').click();
    await expect.poll(() => page.locator('#act-dismiss').count(), { timeout: 30_000 }).toBe(0);
    expect(fs.existsSync(path.join(t.home, 'runs', runId, 'dismissed.json'))).toBe(true);
    await page.locator('a.back').click();
    await page.locator('table.runs').waitFor();
    expect(await page.locator(`tr[data-run="${runId}"]`).count()).toBe(0);
    await page.locator('#all').check();
    await page.locator(`tr[data-run="${runId}"]`).waitFor({ timeout: 30_000 });
    await page.locator('#all').uncheck();
  });

  it('a step output it cannot read (a FIFO in its place) is said in the output pane; the rest of the run page stays', async () => {
    const runId = await launch({ agent: 'echo', task: 'its output becomes a FIFO', label: 'damaged output' });
    await waitTerminal(s, runId);
    const file = path.join(t.home, 'runs', runId, 'out', '0.txt');
    fs.rmSync(file);
    execFileSync('mkfifo', ['-m', '600', file]);
    await page.goto(`${ui.page}#/run/${runId}`);
    await expect.poll(() => page.locator('pre.output').textContent(), { timeout: 30_000 }).toContain('could not be read: 500');
    expect(await page.locator('h2.title').textContent()).toContain('damaged output');
    expect(await page.locator('#act-dismiss').count()).toBe(1);
    expect(await page.locator('.load-error').count()).toBe(0);
  });

  it('eight tabs of one browser share one event stream: all load, all update, and closing the tab that holds it loses nothing', async () => {
    const ctx = await browser.newContext();
    try {
      const tabs: Page[] = [];
      for (let i = 0; i < 8; i++) {
        const p = await ctx.newPage();
        await p.goto(i === 0 ? ui.url : ui.page, { timeout: 30_000 });
        await p.locator('tr[data-run]').first().waitFor({ timeout: 30_000 });
        tabs.push(p);
      }
      const first = await launch({ agent: 'echo', task: 'seen by every tab' });
      for (const p of tabs) await p.locator(`tr[data-run="${first}"]`).waitFor({ timeout: 30_000 });
      // The stream's holder is the first tab (it took the lock first): closed, another takes over.
      await tabs.shift()!.close();
      const second = await launch({ agent: 'echo', task: 'after the holder closed' });
      for (const p of tabs) await p.locator(`tr[data-run="${second}"]`).waitFor({ timeout: 30_000 });
      for (const p of tabs) expect(await p.textContent('#live')).toBe('live');
    } finally {
      await ctx.close();
    }
  });

  it('says so when an open run is removed under it (gc), without breaking', async () => {
    const runId = await launch({ agent: 'echo', task: 'short-lived' });
    await waitTerminal(s, runId);
    await page.goto(`${ui.page}#/run/${runId}`);
    await page.locator('h2.title').waitFor();
    fs.rmSync(path.join(t.home, 'runs', runId), { recursive: true, force: true });
    await expect.poll(() => page.locator('.notice').textContent().catch(() => ''), { timeout: 20_000 }).toContain('not in the state home');
    await page.locator('a.back').click();
    await page.locator('table.runs').waitFor();
    expect(await page.locator(`tr[data-run="${runId}"]`).count()).toBe(0);
    await shot('tree-after');
    await page.emulateMedia({ colorScheme: 'dark' });
    await shot('tree-dark');
    await page.emulateMedia({ colorScheme: 'light' });
  });
});
