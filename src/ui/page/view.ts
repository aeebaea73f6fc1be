// The dashboard's page: the run tree and the run page, drawn from the JSON the backend gives. Every text that came
// from a run (labels, agent names, output, events, errors) goes into the DOM as text nodes, never as HTML.
import { formatDuration } from '../../format.js';
import type { Backend, Change, Gauges, ListPage, ListQuery, RunDetail, RunRow, StepView, TreeNode } from './types.js';

type Child = Node | string | null | undefined | false;

/** Builds an element; string children become text nodes (never parsed as HTML). */
export function h(tag: string, attrs: Record<string, string | number | boolean | null | undefined> = {}, ...children: Child[]): HTMLElement {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children) if (c !== null && c !== undefined && c !== false) el.append(c);
  return el;
}

const ACTIVE = new Set(['queued', 'starting', 'running']);
const isActive = (state: string) => ACTIVE.has(state);

function age(iso: string | null, now: number): string {
  if (!iso) return '–';
  const t = Date.parse(iso);
  return Number.isFinite(t) ? `${formatDuration(Math.max(0, now - t)).replace(/\.\d/, '')} ago` : '–';
}

function runDuration(r: { createdAt: string; startedAt: string | null; endedAt: string | null }, now: number): number | null {
  const start = Date.parse(r.startedAt ?? r.createdAt);
  if (r.endedAt) return Date.parse(r.endedAt) - start;
  return r.startedAt ? now - start : null;
}

const cost = (c: number | null) => (c === null ? '' : `$${c.toFixed(c < 0.01 ? 4 : 2)}`);

function badge(state: string): HTMLElement {
  return h('span', { class: `badge s-${state.replace(/[^a-z]/g, '')}` }, state);
}

/** A duration that keeps counting on screen while its run or step is still going (`tick` updates it). */
function liveDuration(start: string | null, end: string | null, fallback: number | null): HTMLElement {
  const el = h('span', { class: 'dur' }, formatDuration(fallback));
  if (start && !end) el.dataset.start = start;
  return el;
}

interface State {
  route: { view: 'list' } | { view: 'run'; runId: string };
  query: ListQuery;
  list: ListPage | null;
  detail: RunDetail | null;
  missing: boolean;
  outputKey: string | null;
  output: { key: string; text: string; bytes: number; from: number } | null;
  /** Why the shown step's output could not be read (damage in its file): said in the output pane, the rest goes on. */
  outputError: string | null;
  /** Local clock minus the server's (the page may run on another clock than the runs' timestamps). */
  skewMs: number;
}

export class Dashboard {
  private readonly s: State = { route: { view: 'list' }, query: { state: 'all', page: 1 }, list: null, detail: null, missing: false, outputKey: null, output: null, outputError: null, skewMs: 0 };
  private inflight = false;
  private again = false;
  private readonly main: HTMLElement;

  constructor(private readonly backend: Backend, private readonly root: Document = document) {
    this.main = root.getElementById('main')!;
  }

  start(): void {
    window.addEventListener('hashchange', () => this.route());
    // In-page links change the fragment of this document itself: in a host's srcdoc frame a "#…" link would resolve
    // against the host's address and navigate the frame away.
    document.addEventListener('click', (e) => {
      const a = (e.target as Element | null)?.closest?.('a[href^="#"]');
      if (!a || e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
      e.preventDefault();
      const href = a.getAttribute('href')!;
      if (location.hash === href) this.route(); else location.hash = href;
    });
    document.addEventListener('keydown', (e) => {
      const t = e.target as HTMLElement | null;
      const typing = t && (t.tagName === 'INPUT' || t.tagName === 'SELECT' || t.tagName === 'TEXTAREA');
      if (e.key === '/' && !typing && this.s.route.view === 'list') {
        e.preventDefault();
        (this.root.getElementById('search') as HTMLInputElement | null)?.focus();
      } else if (e.key === 'Escape' && !typing && this.s.route.view === 'run' && !(this.root.getElementById('confirm') as HTMLDialogElement).open) {
        location.hash = '#/';
      }
    });
    this.backend.subscribe((c) => this.onChange(c), (live) => this.setLive(live));
    setInterval(() => this.tick(), 1000);
    this.route();
  }

  private now(): number { return Date.now() - this.s.skewMs; }

  private setLive(live: boolean): void {
    const el = this.root.getElementById('live')!;
    // Back after a break: what changed meanwhile was not announced to this page.
    if (live && el.className === 'live off') void this.refresh();
    el.textContent = live ? 'live' : 'reconnecting…';
    el.className = live ? 'live on' : 'live off';
  }

  private route(): void {
    const m = /^#\/run\/(r-[A-Za-z0-9_-]{24})$/.exec(location.hash);
    const prev = this.s.route;
    this.s.route = m ? { view: 'run', runId: m[1]! } : { view: 'list' };
    if (prev.view !== this.s.route.view || (prev.view === 'run' && this.s.route.view === 'run' && prev.runId !== this.s.route.runId)) {
      this.s.detail = null; this.s.missing = false; this.s.output = null; this.s.outputKey = null;
      this.main.replaceChildren(h('p', { class: 'muted' }, 'Loading…'));
    }
    void this.refresh(true);
  }

  private onChange(c: Change): void {
    if (c.gauges) this.renderGauges(c.gauges);
    const r = this.s.route;
    if (c.all || (r.view === 'list' && c.runs.length > 0)) { void this.refresh(); return; }
    if (r.view === 'list') return; // new output only: the tree does not show it
    if (c.runs.includes(r.runId) || c.output.includes(r.runId) || (this.s.detail?.children.some((k) => c.runs.includes(k.runId)) ?? false)) void this.refresh();
  }

  /** One fetch at a time; a change during a fetch brings one more after it. */
  private async refresh(focus = false): Promise<void> {
    if (this.inflight) { this.again = true; return; }
    this.inflight = true;
    try {
      const r = this.s.route;
      if (r.view === 'list') {
        const list = await this.backend.list(this.s.query);
        this.s.skewMs = Date.now() - Date.parse(list.now);
        this.s.list = list;
        this.renderGauges(list.gauges);
        this.renderList(focus);
      } else {
        const d = await this.backend.detail(r.runId);
        if (this.s.route.view !== 'run' || this.s.route.runId !== r.runId) return;
        if (!d) { this.s.missing = true; this.s.detail = null; this.renderRun(); return; }
        this.s.skewMs = Date.now() - Date.parse(d.now);
        this.s.detail = d;
        this.s.missing = false;
        const leaves = d.steps.flatMap((s) => s.members ?? [s]);
        const running = leaves.find((s) => s.state === 'running');
        if (!this.s.outputKey || !leaves.some((s) => s.key === this.s.outputKey)) this.s.outputKey = (running ?? leaves[leaves.length - 1])?.key ?? null;
        this.s.outputError = null;
        if (this.s.outputKey) {
          try {
            this.s.output = await this.backend.output(r.runId, this.s.outputKey, 16 * 1024);
          } catch (e) {
            this.s.output = null;
            this.s.outputError = (e as Error).message;
          }
        }
        this.renderRun(focus);
      }
    } catch (e) {
      this.main.querySelector('.load-error')?.remove();
      this.main.prepend(h('p', { class: 'load-error', role: 'alert' }, `Could not load: ${(e as Error).message}. Retrying on the next change.`));
    } finally {
      this.inflight = false;
      if (this.again) { this.again = false; void this.refresh(); }
    }
  }

  private renderGauges(g: Gauges): void {
    const gauge = (label: string, value: string, title: string, full = false) =>
      h('span', { class: `gauge${full ? ' full' : ''}`, title }, h('span', { class: 'g-label' }, label), h('span', { class: 'g-value' }, value));
    const limit = (n: number) => (n > 0 ? String(n) : '∞');
    this.root.getElementById('gauges')!.replaceChildren(
      gauge('active', `${g.active}/${limit(g.activeLimit)}`, 'active top-level runs / SUBAGENTS_MAX_ACTIVE_RUNS', g.activeLimit > 0 && g.active >= g.activeLimit),
      gauge('agents', `${g.agents}/${limit(g.agentsLimit)}`, 'live agent processes / SUBAGENTS_MAX_AGENTS', g.agentsLimit > 0 && g.agents >= g.agentsLimit),
      gauge('queued', String(g.queued), 'launches waiting for a slot'),
      gauge('runs', String(g.runs), 'runs in the state home'),
    );
  }

  // ---- the run tree ----

  private renderList(focus: boolean): void {
    const list = this.s.list!;
    let filters = this.main.querySelector<HTMLElement>('form.filters');
    if (!filters) {
      this.main.replaceChildren();
      filters = this.filters(list);
      this.main.append(filters, h('div', { id: 'tree' }));
    } else {
      this.syncOptions(filters, list);
    }
    const now = this.now();
    const tbody = h('tbody');
    const addRows = (n: TreeNode, level: number) => {
      tbody.append(this.row(n.run, level, now));
      for (const c of n.children) addRows(c, level + 1);
    };
    for (const t of list.trees) addRows(t, 0);
    const notices: HTMLElement[] = [];
    if (list.gauges.damaged > 0) notices.push(h('p', { class: 'notice' }, `${list.gauges.damaged} run director${list.gauges.damaged === 1 ? 'y' : 'ies'} could not be read (damaged run.json); subagents-mcp doctor says more.`));
    const table = list.trees.length
      ? h('table', { class: 'runs' },
        h('caption', { class: 'sr' }, 'Runs, newest first; nested runs under their parent'),
        h('thead', {}, h('tr', {}, ...['State', 'Run', 'Agents', 'Label', 'Age', 'Duration', 'Cost'].map((c) => h('th', { scope: 'col' }, c)))),
        tbody)
      : h('p', { class: 'empty' }, list.total === 0 && list.gauges.runs === 0 ? 'No runs in this state home yet.' : 'No runs match these filters.');
    const pager = h('nav', { class: 'pager', 'aria-label': 'pages' },
      h('button', { type: 'button', id: 'prev', disabled: list.page <= 1 }, '← Newer'),
      h('span', {}, `Page ${list.page} of ${list.pages} · ${list.total} run tree${list.total === 1 ? '' : 's'}`),
      h('button', { type: 'button', id: 'next', disabled: list.page >= list.pages }, 'Older →'));
    pager.querySelector('#prev')!.addEventListener('click', () => { this.s.query.page = Math.max(1, (this.s.query.page ?? 1) - 1); void this.refresh(); });
    pager.querySelector('#next')!.addEventListener('click', () => { this.s.query.page = (this.s.query.page ?? 1) + 1; void this.refresh(); });
    this.main.querySelector('#tree')!.replaceChildren(...notices, table, pager);
    if (focus) this.main.focus({ preventScroll: true });
  }

  private row(r: RunRow, level: number, now: number): HTMLElement {
    const link = h('a', { href: `#/run/${r.runId}`, class: 'runid' }, r.runId);
    const where = level > 0 ? h('span', { class: 'nest', 'aria-label': `nested under step ${r.parentStepKey ?? '?'}` }, `↳ step ${r.parentStepKey ?? '?'} `) : null;
    const stateCell = h('td', {}, badge(r.state), r.dismissed ? h('span', { class: 'muted' }, ' dismissed') : null,
      r.error && r.state !== 'cancelled' ? h('div', { class: 'err', title: r.error.message }, r.error.code) : null);
    return h('tr', { class: `lvl${Math.min(level, 6)}`, 'data-run': r.runId },
      stateCell,
      h('td', { style: null }, h('span', { class: 'indent', 'data-level': Math.min(level, 6) }), where, link),
      h('td', {}, `${r.mode === 'single' ? '' : `${r.mode}: `}${r.agents.join(', ')}`),
      h('td', { class: 'label' }, r.label ?? ''),
      h('td', { class: 'age', 'data-at': r.createdAt }, age(r.createdAt, now)),
      h('td', {}, liveDuration(r.startedAt, r.endedAt, runDuration(r, now))),
      h('td', { class: 'num' }, cost(r.costUsd)));
  }

  private filters(list: ListPage): HTMLElement {
    const q = this.s.query;
    const select = (id: string, label: string, options: Array<[string, string]>, value: string | undefined) =>
      h('label', {}, label, ' ', h('select', { id, name: id }, ...options.map(([v, t]) => h('option', { value: v, selected: v === (value ?? '') }, t))));
    const states: Array<[string, string]> = [['all', 'all'], ['active', 'active'], ['ended', 'ended'], ['queued', 'queued'], ['starting', 'starting'], ['running', 'running'], ['completed', 'completed'], ['failed', 'failed'], ['cancelled', 'cancelled'], ['corrupt', 'damaged']];
    const form = h('form', { class: 'filters', role: 'search' },
      select('state', 'State', states, q.state),
      select('session', 'Session', [['', 'all sessions'], ...list.sessions.map((s): [string, string] => [s, s.slice(0, 14)])], q.session),
      select('agent', 'Agent', [['', 'all agents'], ...list.agents.map((a): [string, string] => [a, a])], q.agent),
      h('label', {}, 'Search ', h('input', { id: 'search', type: 'search', placeholder: 'label or run id  ( / )', value: q.q ?? '', autocomplete: 'off' })),
      h('label', { class: 'check' }, h('input', { id: 'all', type: 'checkbox', checked: !!q.all }), ' dismissed'));
    form.addEventListener('submit', (e) => e.preventDefault());
    const apply = () => {
      const v = (id: string) => (form.querySelector(`#${id}`) as HTMLInputElement | HTMLSelectElement).value;
      this.s.query = { state: v('state'), session: v('session') || undefined, agent: v('agent') || undefined, q: v('search') || undefined, all: (form.querySelector('#all') as HTMLInputElement).checked, page: 1 };
      void this.refresh();
    };
    form.addEventListener('change', apply);
    let timer: number | undefined;
    form.querySelector('#search')!.addEventListener('input', () => { clearTimeout(timer); timer = window.setTimeout(apply, 150); });
    return form;
  }

  /** New sessions and agents appear in the selects without rebuilding them (focus and choice stay). */
  private syncOptions(form: HTMLElement, list: ListPage): void {
    const sync = (id: string, values: string[], text: (v: string) => string) => {
      const sel = form.querySelector<HTMLSelectElement>(`#${id}`)!;
      const have = new Set([...sel.options].map((o) => o.value));
      for (const v of values) if (!have.has(v)) sel.append(h('option', { value: v }, text(v)));
    };
    sync('session', list.sessions, (s) => s.slice(0, 14));
    sync('agent', list.agents, (a) => a);
  }

  // ---- the run page ----

  private renderRun(focus = false): void {
    const back = h('p', {}, h('a', { href: '#/', class: 'back' }, '← All runs'));
    const r = this.s.route;
    if (this.s.missing || !this.s.detail) {
      this.main.replaceChildren(back, h('p', { class: 'notice', role: 'alert' }, `Run ${r.view === 'run' ? r.runId : ''} is not in the state home any more (removed by gc, or never existed).`));
      return;
    }
    const d = this.s.detail;
    const now = this.now();
    const run = d.run;
    const actions = h('div', { class: 'actions' });
    if (isActive(run.state)) actions.append(this.actionButton('Cancel run', 'cancel', `Cancel run ${run.runId}? Its agents and nested runs are stopped (SIGTERM, then SIGKILL after the grace).`));
    else if (!run.dismissed && run.state !== 'corrupt') actions.append(this.actionButton('Dismiss', 'dismiss', `Dismiss run ${run.runId}? It is hidden from listings and stays readable by id.`));
    const dl = h('dl', { class: 'meta' });
    const item = (k: string, v: Node | string | null) => { if (v !== null && v !== '') dl.append(h('dt', {}, k), h('dd', {}, v)); };
    item('Run', run.runId);
    item('Session', run.sessionId);
    if (run.parentRunId) item('Parent', h('a', { href: `#/run/${run.parentRunId}` }, `${run.parentRunId} (step ${run.parentStepKey ?? '?'})`));
    item('Mode', run.mode);
    item('Agents', run.agents.join(', '));
    item('Created', run.createdAt);
    item('Started', run.startedAt);
    item('Ended', run.endedAt);
    item('Duration', liveDuration(run.startedAt, run.endedAt, runDuration(run, now)));
    item('Cost', cost(run.costUsd));
    item('Directory', d.cwd);
    item('Runner', d.runner ? `pid ${d.runner.pid}, started ${d.runner.startTime}` : null);
    if (d.pendingAppends) item('Pending appends', String(d.pendingAppends));
    if (d.survivors.length) item('Survivors', d.survivors.join(', '));
    const title = h('h2', { class: 'title' }, badge(run.state), ' ', run.label ?? run.runId);
    const parts: HTMLElement[] = [back, title];
    if (run.error) parts.push(h('p', { class: 'error', role: 'alert' }, h('strong', {}, run.error.code), ': ', run.error.message));
    parts.push(actions, dl,
      h('section', { 'aria-labelledby': 'tl-h' }, h('h3', { id: 'tl-h' }, 'Timeline'), this.timeline(d, now)),
      h('section', { 'aria-labelledby': 'ev-h' }, h('h3', { id: 'ev-h' }, 'Evidence'), this.evidence(d)),
      h('section', { 'aria-labelledby': 'out-h' }, h('h3', { id: 'out-h' }, 'Output'), this.outputView(d)));
    if (d.children.length) {
      parts.push(h('section', { 'aria-labelledby': 'ch-h' }, h('h3', { id: 'ch-h' }, 'Nested runs'),
        h('ul', { class: 'children' }, ...d.children.map((c) => h('li', {}, badge(c.state), ' ', h('a', { href: `#/run/${c.runId}` }, c.runId), ` step ${c.stepKey ?? '?'} · ${c.agents.join(', ')}`, c.label ? ` · ${c.label}` : '')))));
    }
    parts.push(h('section', { 'aria-labelledby': 'evt-h' }, h('h3', { id: 'evt-h' }, 'Events'), this.events(d)));
    parts.push(h('section', { 'aria-labelledby': 'f-h' }, h('h3', { id: 'f-h' }, 'Files'),
      h('dl', { class: 'meta files' }, ...Object.entries(d.files).flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, h('code', {}, v))]))));
    // Keep the reader's place: the output pane's scroll, and focus on the element that had it.
    const pre = this.main.querySelector<HTMLElement>('pre.output');
    const atBottom = !pre || pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    const focusedId = (this.root.activeElement as HTMLElement | null)?.id;
    this.main.replaceChildren(...parts);
    const npre = this.main.querySelector<HTMLElement>('pre.output');
    if (npre) npre.scrollTop = atBottom ? npre.scrollHeight : (pre?.scrollTop ?? 0);
    if (focusedId) this.root.getElementById(focusedId)?.focus({ preventScroll: true });
    else if (focus) this.main.focus({ preventScroll: true });
  }

  private actionButton(text: string, action: 'cancel' | 'dismiss', question: string): HTMLElement {
    const b = h('button', { type: 'button', class: 'danger', id: `act-${action}` }, text);
    b.addEventListener('click', () => {
      const dialog = this.root.getElementById('confirm') as HTMLDialogElement;
      this.root.getElementById('confirm-title')!.textContent = text;
      this.root.getElementById('confirm-text')!.textContent = question;
      const yes = this.root.getElementById('confirm-yes')!;
      const no = this.root.getElementById('confirm-no')!;
      yes.textContent = text;
      const close = () => { dialog.close(); yes.replaceWith(yes.cloneNode(true)); no.replaceWith(no.cloneNode(true)); b.focus(); };
      yes.addEventListener('click', () => {
        close();
        const r = this.s.route;
        if (r.view !== 'run') return;
        b.setAttribute('disabled', '');
        b.textContent = action === 'cancel' ? 'Cancelling…' : 'Dismissing…';
        void this.backend.act(r.runId, action).then((res) => {
          if ('error' in res && res.error) this.flash(`${res.error.code}: ${res.error.message}`);
          void this.refresh();
        }, (e: Error) => this.flash(e.message));
      }, { once: true });
      no.addEventListener('click', close, { once: true });
      dialog.showModal();
      no.focus();
    });
    return b;
  }

  private flash(text: string): void {
    this.main.querySelector('.flash')?.remove();
    this.main.prepend(h('p', { class: 'flash error', role: 'alert' }, text));
  }

  /** One bar per step and group member, placed on the run's time axis (it grows while the run goes on). */
  private timeline(d: RunDetail, now: number): HTMLElement {
    const leaves: Array<{ s: StepView; member: boolean }> = [];
    for (const s of d.steps) {
      if (s.members) for (const m of s.members) leaves.push({ s: m, member: true });
      else leaves.push({ s, member: false });
    }
    const t0 = Date.parse(d.run.startedAt ?? d.run.createdAt);
    const t1 = d.run.endedAt ? Date.parse(d.run.endedAt) : Math.max(now, t0 + 1);
    const span = Math.max(1, t1 - t0);
    const wrap = h('div', { class: 'timeline', role: 'list', 'data-t0': t0, 'data-t1': d.run.endedAt ? t1 : '' });
    for (const { s, member } of leaves) {
      const start = s.startedAt ? Date.parse(s.startedAt) : null;
      const end = s.endedAt ? Date.parse(s.endedAt) : start !== null ? now : null;
      const left = start === null ? 0 : ((start - t0) / span) * 100;
      const width = start === null || end === null ? 0 : Math.max(0.5, ((end - start) / span) * 100);
      const bar = h('div', { class: `bar s-${s.state}`, style: null, 'data-start': s.startedAt ?? '', 'data-end': s.endedAt ?? '' });
      bar.style.left = `${Math.max(0, Math.min(100, left))}%`;
      bar.style.width = `${Math.max(0, Math.min(100 - left, width))}%`;
      const dur = start === null ? s.state : formatDuration((end ?? start) - start);
      wrap.append(h('div', { class: 'tl-row', role: 'listitem', 'data-key': s.key },
        h('span', { class: 'tl-name' }, `${member ? '  ' : ''}${s.key} ${s.agent}`),
        h('span', { class: 'tl-track' }, bar),
        h('span', { class: 'tl-dur' }, dur)));
    }
    if (!leaves.length) wrap.append(h('p', { class: 'muted' }, 'No steps yet.'));
    return wrap;
  }

  private evidence(d: RunDetail): HTMLElement {
    const rows = d.steps.flatMap((s) => s.members ?? [s]).map((s) => h('tr', {},
      h('td', {}, s.key), h('td', {}, s.agent), h('td', {}, badge(s.state)),
      h('td', {}, s.pid !== null ? `${s.pid} @${s.pidStartTime ?? '?'}` : ''),
      h('td', {}, s.exitCode === null ? '' : String(s.exitCode)), h('td', {}, s.signal ?? ''),
      h('td', { class: 'num' }, `${s.outputBytes}${s.outputTruncated ? ' (cut)' : ''}`),
      h('td', {}, s.usage ? Object.entries(s.usage).map(([k, v]) => `${k} ${v}`).join(', ') : ''),
      h('td', { class: 'num' }, cost(s.costUsd)),
      h('td', { class: 'err' }, s.error ? `${s.error.code}: ${s.error.message}` : '')));
    return h('div', { class: 'scroll' }, h('table', { class: 'evidence' },
      h('thead', {}, h('tr', {}, ...['Step', 'Agent', 'State', 'PID @start', 'Exit', 'Signal', 'Bytes', 'Usage', 'Cost', 'Error'].map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, ...rows)));
  }

  private outputView(d: RunDetail): HTMLElement {
    const leaves = d.steps.flatMap((s) => s.members ?? [s]);
    const wrap = h('div', { class: 'output-wrap' });
    if (leaves.length > 1) {
      const sel = h('select', { id: 'output-step', 'aria-label': 'step whose output is shown' }, ...leaves.map((s) => h('option', { value: s.key, selected: s.key === this.s.outputKey }, `step ${s.key} ${s.agent} (${s.state})`))) as HTMLSelectElement;
      sel.addEventListener('change', () => { this.s.outputKey = sel.value; void this.refresh(); });
      wrap.append(h('label', {}, 'Step ', sel));
    }
    const o = this.s.output;
    const note = o && o.from > 0 ? h('p', { class: 'muted' }, `… the last ${o.bytes - o.from} of ${o.bytes} bytes`) : null;
    const live = leaves.find((s) => s.key === this.s.outputKey)?.state === 'running';
    const shown = this.s.outputError ? `(this step's output could not be read: ${this.s.outputError})` : o && o.text ? o.text : '(no output yet)';
    wrap.append(note ?? '', h('pre', { class: 'output', tabindex: 0, 'aria-label': 'output tail', 'aria-live': live ? 'polite' : 'off' }, shown));
    return wrap;
  }

  private events(d: RunDetail): HTMLElement {
    const rows = d.events.slice().reverse().map((e) => h('tr', {},
      h('td', { class: 'ts' }, e.ts.replace('T', ' ').replace('Z', '')), h('td', {}, e.type),
      h('td', {}, Object.entries(e.fields).map(([k, v]) => `${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`).join(' '))));
    return h('div', { class: 'scroll events' }, h('table', {},
      h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'Time'), h('th', { scope: 'col' }, 'Event'), h('th', { scope: 'col' }, 'Details'))),
      h('tbody', {}, ...rows)),
    d.eventsSkipped ? h('p', { class: 'muted' }, `${d.eventsSkipped} older or unreadable lines not shown`) : '');
  }

  /** Once a second: running durations, ages and the timeline's growing bars, from the local clock alone. */
  private tick(): void {
    const now = this.now();
    for (const el of this.main.querySelectorAll<HTMLElement>('span.dur[data-start]')) el.textContent = formatDuration(now - Date.parse(el.dataset.start!));
    for (const el of this.main.querySelectorAll<HTMLElement>('td.age[data-at]')) el.textContent = age(el.dataset.at!, now);
    const d = this.s.detail;
    if (this.s.route.view === 'run' && d && !d.run.endedAt) {
      const old = this.main.querySelector('.timeline');
      if (old) old.replaceWith(this.timeline(d, now));
    }
  }
}
