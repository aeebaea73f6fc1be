import fs from 'node:fs';
import path from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FIXTURE_AGENTS, REPO } from '../helpers/paths.js';
import { procIdentity, until } from '../helpers/runs.js';
import { sc, startServer, textOf, waitTerminal, type Started } from '../helpers/server.js';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { skipWithout } from '../helpers/system-tools.js';
import { firstAgentPid, hasChromium, launchChromium, screenshotDir } from './browser.js';

const FAKE = path.join(FIXTURE_AGENTS, 'fake-agent.mjs');
const URI = 'ui://subagents/dashboard';

/**
 * A minimal MCP Apps host, bundled for the test: ext-apps' AppBridge talks to the app in a sandboxed frame, and its
 * tool calls go to the real server through a function the test exposes to the page.
 */
async function hostScript(): Promise<string> {
  const esbuild = await import('esbuild');
  const r = await esbuild.build({
    stdin: {
      contents: `
        import { AppBridge, PostMessageTransport } from '@modelcontextprotocol/ext-apps/app-bridge';
        window.openApp = async (html) => {
          const frame = document.createElement('iframe');
          frame.setAttribute('sandbox', 'allow-scripts');
          frame.style.width = '1200px'; frame.style.height = '760px'; frame.style.border = '0';
          document.body.append(frame);
          const bridge = new AppBridge(null, { name: 'test-host', version: '1.0.0' }, { serverTools: {} });
          bridge.oncalltool = (params) => window.hostCallTool(params.name, params.arguments ?? {});
          await bridge.connect(new PostMessageTransport(frame.contentWindow, frame.contentWindow));
          frame.srcdoc = html;
        };`,
      resolveDir: REPO, sourcefile: 'host.js', loader: 'js',
    },
    bundle: true, format: 'iife', platform: 'browser', target: 'es2022', write: false, logLevel: 'silent',
  });
  return r.outputFiles[0]!.text;
}

describe.skipIf(skipWithout('chromium', hasChromium()))('the dashboard as an MCP App', { timeout: 240_000 }, () => {
  let t: ReturnType<typeof tempStateHome>;
  let s: Started;
  let other: Started;
  let browser: Browser;
  let page: Page;
  const shots = screenshotDir('mcp-app');

  beforeAll(async () => {
    t = tempStateHome('sa-app-');
    const agents = path.join(t.home, 'agents');
    writeAgent(agents, 'echo', { backend: 'command', command: ['node', FAKE, 'echo'] });
    writeAgent(agents, 'sleeper', { backend: 'command', command: ['node', FAKE, 'sleep', '60000'] });
    s = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_KILL_GRACE_MS: '500' });
    other = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root });
    browser = await launchChromium();
  });
  afterAll(async () => {
    await browser?.close().catch(() => {});
    await s?.close();
    await other?.close();
    t.cleanup();
  });

  it('lists one tool that names the ui:// resource, and serves the resource as an MCP App document', async () => {
    const tools = (await s.client.listTools()).tools;
    const tool = tools.find((x) => x.name === 'dashboard')!;
    expect(tool._meta).toMatchObject({ ui: { resourceUri: URI } });
    const r = await s.client.readResource({ uri: URI });
    const c = r.contents[0]! as { uri: string; mimeType: string; text: string };
    expect(c.mimeType).toBe('text/html;profile=mcp-app');
    expect(c.text).toMatch(/^<!doctype html>/i);
    expect(c.text).toContain('<script type="module">');
    expect(c.text).not.toMatch(/<script[^>]+src=|<link[^>]+href=/); // one document, nothing fetched
  });

  it('answers a text fallback, and only this session\'s runs (another session\'s run is not found)', async () => {
    const own = sc(await s.call('launch', { agent: 'echo', task: 'mine', label: 'my run' })).runId as string;
    const foreign = sc(await other.call('launch', { agent: 'echo', task: 'theirs', label: 'their run' })).runId as string;
    await waitTerminal(s, own);
    await waitTerminal(other, foreign);
    const r = await s.call('dashboard', {});
    expect(r.isError).toBeFalsy();
    expect(textOf(r)).toContain('1 run tree in this session');
    expect(textOf(r)).toContain(own);
    expect(textOf(r)).not.toContain(foreign);
    expect(sc(r).trees.map((x: { run: { runId: string } }) => x.run.runId)).toEqual([own]);
    const denied = await s.call('dashboard', { view: 'run', runId: foreign });
    expect(denied.isError).toBe(true);
    expect(textOf(denied)).toMatch(/^RUN_NOT_FOUND: /);
    const noRun = await s.call('dashboard', { view: 'output' });
    expect(textOf(noRun)).toMatch(/^INVALID_INPUT: /);
  });

  it('renders in a host frame through the bridge: the tree, a run page, and cancel through the cancel tool', async () => {
    const runId = sc(await s.call('launch', { agent: 'sleeper', task: 'to be cancelled from the app', label: 'app run' })).runId as string;
    const pid = await firstAgentPid(t.home, runId);
    const html = (await s.client.readResource({ uri: URI })).contents[0]! as { text: string };
    page = await browser.newPage({ viewport: { width: 1240, height: 800 } });
    const calls: string[] = [];
    await page.exposeFunction('hostCallTool', async (name: string, args: Record<string, unknown>) => {
      calls.push(name);
      return s.client.callTool({ name, arguments: args });
    });
    await page.setContent(`<!doctype html><html><body><script>${(await hostScript()).replaceAll('</script', '<\\/script')}</script></body></html>`);
    await page.evaluate((h) => (window as unknown as { openApp: (h: string) => Promise<void> }).openApp(h), html.text);
    const app = page.frameLocator('iframe');
    await app.locator(`tr[data-run="${runId}"]`).waitFor({ timeout: 20_000 });
    expect(await app.locator('tr[data-run]').count()).toBe(2); // this session's two runs; the other session's is not there
    await page.screenshot({ path: path.join(shots, 'app-tree.png') });
    process.stderr.write(`screenshot: ${path.join(shots, 'app-tree.png')}\n`);
    await app.locator(`tr[data-run="${runId}"] a.runid`).click();
    await app.locator('#act-cancel').click();
    await app.locator('#confirm-yes').click();
    await expect.poll(() => app.locator('h2.title .badge').textContent(), { timeout: 20_000 }).toBe('cancelled');
    expect(calls).toContain('cancel');
    expect(await until(() => procIdentity(pid!) === null, 10_000)).toBe(true);
    await page.screenshot({ path: path.join(shots, 'app-run.png') });
    process.stderr.write(`screenshot: ${path.join(shots, 'app-run.png')}\n`);
  });
});
