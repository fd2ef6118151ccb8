// Aetherium Studio. Every string that came from the API is inserted as text
// (textContent / createTextNode through el()): a run's output is untrusted, and
// nothing here builds markup from strings.
'use strict';

const TOKEN_KEY = 'aetherium.token';

// el builds an element. attrs are set as properties or attributes by name;
// children are nodes or strings (strings become text nodes, never markup).
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'href') e.setAttribute('href', safeHref(v));
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    e.appendChild(typeof c === 'string' || typeof c === 'number' ? document.createTextNode(String(c)) : c);
  }
  return e;
}

// safeHref keeps links on this origin: a path, or a blob: URL this script made.
function safeHref(v) {
  const s = String(v);
  if (s.startsWith('/') && !s.startsWith('//')) return s;
  if (s.startsWith('blob:' + location.origin + '/')) return s;
  return '#';
}

// traceLink is the link to a run's trace in the deployment's trace viewer
// (tracing.trace_url): the one link off this origin, so http(s) only.
function traceLink(url) {
  const a = el('a', { id: 'trace-link', rel: 'noopener noreferrer', target: '_blank' }, 'Trace');
  if (/^https?:\/\//.test(String(url))) a.setAttribute('href', String(url));
  return a;
}

// add appends children like el does: Element.append would turn a null into
// the text "null".
function add(node, ...children) {
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    node.appendChild(typeof c === 'string' || typeof c === 'number' ? document.createTextNode(String(c)) : c);
  }
  return node;
}

function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); return node; }

function token() { return sessionStorage.getItem(TOKEN_KEY); }

// takeURLToken moves a token handed over in the address's fragment (the sign-in
// URL `aetherium dev` prints: /app/#token=…) into this tab's sessionStorage and
// drops it from the address, so it is not kept in the history or a bookmark. A
// fragment never reaches the server, so no log or Referer holds it.
function takeURLToken() {
  const m = location.hash.match(/^#token=([A-Za-z0-9_-]+)$/);
  if (!m) return;
  sessionStorage.setItem(TOKEN_KEY, m[1]);
  history.replaceState(null, '', location.pathname + location.search);
}

// RawBody is a request body sent as this exact text: JSON the caller checked
// and composed (an edit keeps the digits of numbers a JS number would round).
class RawBody { constructor(text) { this.text = text; } }

class APIError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

// api calls the JSON API with the session's bearer token (never a cookie, so no
// cross-site request can carry it).
async function api(method, path, body) {
  const headers = { 'Accept': 'application/json' };
  const t = token();
  if (t) headers['Authorization'] = 'Bearer ' + t;
  const init = { method, headers, credentials: 'omit', cache: 'no-store' };
  // The API takes a change only as application/json, with or without a body
  // (a cross-site form cannot send that type).
  if (method !== 'GET') headers['Content-Type'] = 'application/json';
  if (body !== undefined) init.body = body instanceof RawBody ? body.text : JSON.stringify(body);
  const resp = await fetch(path, init);
  if (resp.status === 401) {
    sessionStorage.removeItem(TOKEN_KEY);
    signIn('Your token was not accepted; sign in again.');
    throw new APIError(401, 'unauthorized');
  }
  let data = null;
  const text = await resp.text();
  if (text) { try { data = JSON.parse(text); } catch (_) { data = { error: text }; } }
  if (!resp.ok) throw new APIError(resp.status, (data && data.error) || ('HTTP ' + resp.status));
  return data;
}

function authHeaders() {
  const t = token();
  return t ? { 'Authorization': 'Bearer ' + t } : {};
}

function fmtTime(s) {
  if (!s) return '';
  const d = new Date(s);
  return isNaN(d) ? String(s) : d.toLocaleString();
}

function fmtSize(n) {
  if (n < 1024) return n + ' B';
  if (n < 1 << 20) return (n / 1024).toFixed(1) + ' KiB';
  return (n / (1 << 20)).toFixed(1) + ' MiB';
}

// fmtDur is a duration for people: 850 ms, 4.2 s, 3m 05s, 2h 10m.
function fmtDur(ms) {
  ms = Number(ms);
  if (!isFinite(ms) || ms < 0) return '';
  if (ms < 1000) return Math.round(ms) + ' ms';
  const s = ms / 1000;
  if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + ' s';
  const m = Math.floor(s / 60);
  if (m < 60) return m + 'm ' + String(Math.floor(s % 60)).padStart(2, '0') + 's';
  return Math.floor(m / 60) + 'h ' + String(m % 60).padStart(2, '0') + 'm';
}

// relTime is how long ago a time was ("3 min ago"); the absolute time goes in
// the element's title (timeAgo).
function relTime(iso, now) {
  const t = Date.parse(iso);
  if (!iso || isNaN(t)) return '';
  const s = Math.round(((now || Date.now()) - t) / 1000);
  if (s < 0) return 'just now';
  if (s < 45) return s + ' s ago';
  if (s < 90 * 60) return Math.max(1, Math.round(s / 60)) + ' min ago';
  if (s < 36 * 3600) return Math.round(s / 3600) + ' h ago';
  return Math.round(s / 86400) + ' d ago';
}

function timeAgo(iso) { return el('time', { datetime: iso, title: fmtTime(iso), class: 'ago' }, relTime(iso)); }

// runDuration is a run's wall time: created to finished, or to now while it
// runs ("so far"). An MCP session has none of its own.
function runDuration(r, now) {
  if (r.kind === 'mcp') return '';
  const start = Date.parse(r.created_at);
  if (isNaN(start)) return '';
  if (r.finished_at) return fmtDur(Date.parse(r.finished_at) - start);
  if (['completed', 'failed', 'cancelled'].includes(r.status)) return '';
  return fmtDur((now || Date.now()) - start) + ' so far';
}

function badge(text, kind) { return el('span', { class: 'badge ' + (kind || String(text).replace(/[^a-z_]/g, '')) }, String(text)); }

// scroller wraps a table in a box that scrolls sideways on its own: a table
// wider than a phone then scrolls inside the page, not the page itself.
function scroller(table) { return el('div', { class: 'table-scroll' }, table); }

function errorBox(err) { return el('p', { class: 'error', role: 'alert' }, String(err && err.message || err)); }

// pageRoot is the current page's container in #main. route() makes a new one
// per navigation, so a page left while it still awaited the API (the runs page
// after a sign-in, when the nav is clicked at once) appends to a detached node,
// not under the next page.
let pageRoot = null;
const main = () => pageRoot || document.getElementById('main');

// ---------- sign-in ----------

function signIn(msg) {
  const m = clear(main());
  document.getElementById('signout').hidden = true;
  const input = el('input', { type: 'password', id: 'token', autocomplete: 'off', placeholder: 'bearer token', 'aria-label': 'API token' });
  const note = el('p', { class: 'muted' }, 'The token is kept in this tab\'s sessionStorage and sent as an Authorization header, never in a cookie. `aetherium dev` prints a sign-in URL that carries it (in the address\'s #fragment, which is never sent to the server). Leave it empty when the API has no tokens.');
  const form = el('form', { id: 'signin', class: 'card narrow', onsubmit: async (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    try {
      await api('GET', '/api/templates');
      route();
    } catch (e) {
      if (e.status === 403) { route(); return; } // a token without read may still approve
      if (e.status !== 401) form.appendChild(errorBox(e));
    }
  } }, el('h1', {}, 'Sign in'), msg ? el('p', { class: 'error' }, msg) : null, note, input, el('button', { type: 'submit', id: 'signin-submit' }, 'Sign in'));
  m.appendChild(form);
  input.focus();
}

// ---------- runs ----------

const RUN_STATUSES = ['', 'queued', 'running', 'waiting', 'completed', 'failed', 'cancelled'];

// RUN_FILTERS are the run list's text filters, each a query parameter of both
// the page's address and GET /api/runs.
const RUN_FILTERS = [
  ['owner', 'owner'],
  ['team', 'team or template'],
  ['project', 'project'],
];

async function pageRuns() {
  const m = main();
  const params = new URLSearchParams(location.search);
  const state = { status: params.get('status') || '', q: params.get('q') || '', cursors: [''] };
  const status = el('select', { id: 'status-filter', 'aria-label': 'status' }, RUN_STATUSES.map((s) => el('option', { value: s }, s || 'any status')));
  status.value = state.status;
  const search = el('input', { id: 'search', type: 'search', placeholder: 'search prompt, team, template, project, id, owner', maxlength: '200', value: state.q, 'aria-label': 'search' });
  const filters = Object.fromEntries(RUN_FILTERS.map(([k, label]) => [k, el('input', { id: 'filter-' + k, type: 'search', placeholder: label, 'aria-label': label, maxlength: '200', value: params.get(k) || '' })]));
  const tbody = el('tbody', { id: 'runs-body' });
  const pager = el('div', { class: 'pager' });
  const listErr = el('div');
  const clone = params.get('clone') || '';
  add(m,
    el('section', { class: 'card', id: 'new-run' }, el('h2', {}, clone ? 'New run, cloned from ' : 'New run', clone ? el('code', {}, clone.slice(0, 8)) : null), await newRunForm(clone)),
    el('section', { class: 'card' },
      el('h2', {}, 'Runs'),
      el('div', { class: 'filters' }, status, search, Object.values(filters)),
      listErr,
      scroller(el('table', { class: 'grid', id: 'runs' },
        el('thead', {}, el('tr', {}, ['run', 'created', 'status', 'duration', 'team', 'prompt', 'owner', 'tokens', 'error'].map((h) => el('th', {}, h)))),
        tbody)),
      pager));
  if (clone) document.getElementById('new-run').scrollIntoView();

  let timer;
  async function load() {
    clear(listErr);
    const cursor = state.cursors[state.cursors.length - 1];
    const qs = new URLSearchParams({ limit: '25' });
    if (state.status) qs.set('status', state.status);
    if (cursor) qs.set('cursor', cursor);
    if (state.q) qs.set('q', state.q);
    for (const [k, input] of Object.entries(filters)) if (input.value.trim()) qs.set(k, input.value.trim());
    let data;
    try { data = await api('GET', '/api/runs?' + qs); } catch (e) { clear(tbody); listErr.appendChild(errorBox(e)); return; }
    const runs = data.runs;
    const now = Date.now();
    clear(tbody);
    for (const r of runs) {
      const link = '/app/runs/' + encodeURIComponent(r.id);
      tbody.appendChild(el('tr', { 'data-run': r.id, 'data-status': r.status },
        el('td', { 'data-label': 'run' }, el('a', { href: link, class: 'run-id', title: r.id }, el('code', {}, r.id.slice(0, 8)))),
        el('td', { 'data-label': 'created' }, el('a', { href: link }, timeAgo(r.created_at))),
        el('td', { 'data-label': 'status' }, badge(r.status), r.reason ? el('span', { class: 'muted' }, ' ' + r.reason) : null),
        el('td', { 'data-label': 'duration', class: 'duration' }, runDuration(r, now) || '—'),
        // An MCP client's session is a run of its own kind: it lives while the
        // client calls and has no token budget to show.
        el('td', { 'data-label': 'team' }, r.kind === 'mcp' ? el('span', { class: 'kind-mcp', title: 'an MCP client session: its calls are in the audit' }, 'MCP session · ' + (r.team || '').replace(/^mcp:/, '')) : (r.team || '')),
        el('td', { 'data-label': 'prompt', class: 'clip' }, r.prompt),
        el('td', { 'data-label': 'owner' }, r.owner),
        el('td', { 'data-label': 'tokens' }, r.kind === 'mcp' ? '—' : r.tokens_used + ' / ' + r.token_budget),
        el('td', { 'data-label': 'error', class: 'clip error run-error', title: r.error || '' }, r.error || '')));
    }
    if (!runs.length) tbody.appendChild(el('tr', {}, el('td', { colspan: 9, class: 'muted' }, 'No runs.')));
    clear(pager);
    if (state.cursors.length > 1) pager.appendChild(el('button', { type: 'button', onclick: () => { state.cursors.pop(); load(); } }, '← newer'));
    if (data.next_cursor) pager.appendChild(el('button', { type: 'button', id: 'older', onclick: () => { state.cursors.push(data.next_cursor); load(); } }, 'older →'));
  }
  const sync = () => {
    const qs = new URLSearchParams();
    if (state.status) qs.set('status', state.status);
    if (state.q) qs.set('q', state.q);
    for (const [k, input] of Object.entries(filters)) if (input.value.trim()) qs.set(k, input.value.trim());
    history.replaceState(null, '', '/app/runs' + (qs.toString() ? '?' + qs : ''));
  };
  const later = () => { state.cursors = ['']; sync(); clearTimeout(timer); timer = setTimeout(load, 250); };
  status.addEventListener('change', () => { state.status = status.value; state.cursors = ['']; sync(); load(); });
  // The API searches every run the principal may see, not only this page.
  search.addEventListener('input', () => { state.q = search.value; later(); });
  for (const input of Object.values(filters)) input.addEventListener('input', later);
  await load();
  // A list page refreshes while it is open, so runs started elsewhere show up.
  const iv = setInterval(() => { if (state.cursors.length === 1) load(); }, 5000);
  onLeave(() => { clearInterval(iv); clearTimeout(timer); });
}

// newRunForm starts a run of a template. With clone (a run's id) it is filled
// from that run's submission (GET /api/runs/:id/request) for a person to edit:
// a template run's template, prompt, variables and project, or an inline run's
// team as JSON.
async function newRunForm(clone) {
  const wrap = el('div');
  let names = [];
  try { names = (await api('GET', '/api/templates')).templates || []; } catch (e) { wrap.appendChild(errorBox(e)); return wrap; }
  let projects = [];
  try { projects = (await api('GET', '/api/projects')).projects || []; } catch (_) { /* no projects role or none */ }
  let from = null;
  if (clone) {
    try { from = await api('GET', '/api/runs/' + encodeURIComponent(clone) + '/request'); } catch (e) { wrap.appendChild(errorBox('cannot clone run ' + clone + ': ' + e.message)); }
  }
  if (from && from.untrusted && from.untrusted.length) {
    // The cloned run started labelled untrusted; the clone is the person's own
    // request, so they read what a sender wrote before they send it as theirs.
    wrap.appendChild(el('p', { class: 'error', role: 'alert', id: 'clone-untrusted' },
      'This request holds text no person wrote (' + from.untrusted.join(', ') + '). A run you start from it is yours: read the prompt and variables first.'));
  }
  const inline = !!(from && from.endpoint === '/api/orchestrator/run');
  const body0 = (from && from.body) || {};
  const tmpl = el('select', { id: 'template', 'aria-label': 'template' }, names.map((n) => el('option', { value: n }, n)));
  if (body0.template && !names.includes(body0.template)) tmpl.appendChild(el('option', { value: body0.template }, body0.template + ' (no longer shipped)'));
  if (body0.template) tmpl.value = body0.template;
  else if (names.includes('demo')) tmpl.value = 'demo';
  const prompt = el('textarea', { id: 'prompt', rows: 2, placeholder: 'what should the team do?' });
  prompt.value = body0.prompt || '';
  const vars = el('div', { id: 'variables', class: 'vars' });
  const desc = el('p', { class: 'muted' });
  const project = projects.length ? el('select', { id: 'project', 'aria-label': 'project' }, el('option', { value: '' }, 'no project (scratch workspace)'), projects.map((p) => el('option', { value: p.slug }, p.slug))) : null;
  if (project && body0.project) {
    if (!projects.some((p) => p.slug === body0.project)) project.appendChild(el('option', { value: body0.project }, body0.project));
    project.value = body0.project;
  }
  // An inline run's team and variables are edited as JSON: the API names the
  // field a bad team gets wrong.
  const team = el('textarea', { id: 'team-json', rows: 12, spellcheck: 'false', 'aria-label': 'team (JSON)', class: 'json' });
  const varsJSON = el('textarea', { id: 'variables-json', rows: 3, spellcheck: 'false', 'aria-label': 'variables (JSON)', class: 'json' });
  if (inline) {
    team.value = JSON.stringify(body0.team || {}, null, 2);
    varsJSON.value = JSON.stringify(body0.variables || {}, null, 2);
  }
  const out = el('div', { id: 'new-run-result' });
  async function loadVars() {
    clear(vars); desc.textContent = '';
    if (!tmpl.value || inline) return;
    try {
      const info = await api('GET', '/api/templates/' + encodeURIComponent(tmpl.value));
      desc.textContent = info.description || '';
      for (const v of info.variables) {
        const given = body0.template === tmpl.value && body0.variables && body0.variables[v] !== undefined ? String(body0.variables[v]) : '';
        vars.appendChild(el('label', {}, v, el('input', { 'data-var': v, name: 'var-' + v, required: true, value: given })));
      }
    } catch (e) { vars.appendChild(errorBox(e)); }
  }
  tmpl.addEventListener('change', loadVars);
  await loadVars();
  const form = el('form', { id: 'new-run-form', onsubmit: async (ev) => {
    ev.preventDefault();
    clear(out);
    let path = '/api/orchestrator/run-from-template';
    let body;
    if (inline) {
      path = '/api/orchestrator/run';
      try { body = { team: JSON.parse(team.value), variables: JSON.parse(varsJSON.value || '{}'), prompt: prompt.value }; } catch (e) { out.appendChild(errorBox('not valid JSON: ' + e.message)); return; }
    } else {
      const variables = {};
      for (const i of vars.querySelectorAll('input[data-var]')) variables[i.getAttribute('data-var')] = i.value;
      body = { template: tmpl.value, prompt: prompt.value, variables };
    }
    if (project && project.value) body.project = project.value;
    if (body0.priority) body.priority = body0.priority;
    try {
      const r = await api('POST', path, body);
      navigate('/app/runs/' + encodeURIComponent(r.run_id));
    } catch (e) { out.appendChild(errorBox(e)); }
  } },
  el('div', { class: 'row' }, inline ? el('span', { class: 'muted' }, 'an inline team') : el('label', {}, 'template', tmpl), project ? el('label', {}, 'project', project) : null,
    body0.priority ? el('span', { class: 'muted' }, 'priority ' + body0.priority) : null),
  desc, el('label', { class: 'block' }, 'prompt', prompt), inline ? [el('label', { class: 'block' }, 'team (JSON)', team), el('label', { class: 'block' }, 'variables (JSON)', varsJSON)] : vars,
  el('button', { type: 'submit', id: 'start-run' }, 'Start run'), out);
  wrap.appendChild(form);
  return wrap;
}

// ---------- one run ----------

const TERMINAL = ['run.completed', 'run.failed', 'run.cancelled'];

const TERMINAL_STATUSES = ['completed', 'failed', 'cancelled'];

// FORK_WHY is why Fork is not offered yet: it needs a run's history replayed up
// to a chosen step (docs/how-to/studio.md).
const FORK_WHY = 'Fork from a step needs replay of a run\'s recorded history, which the fleet does not have yet (issue 44). Clone with edits starts the same request afresh.';

async function pageRun(id) {
  const m = main();
  let run;
  try { run = await api('GET', '/api/runs/' + encodeURIComponent(id)); } catch (e) { m.appendChild(errorBox(e)); return; }
  const head = el('section', { class: 'card', id: 'run-head' });
  const plan = el('section', { class: 'card', id: 'plan', hidden: true });
  const tree = el('section', { class: 'card', id: 'delegations' }, el('h2', {}, 'Delegations'));
  const media = el('section', { class: 'card', id: 'media', hidden: true });
  const wf = el('section', { class: 'card', id: 'waterfall', hidden: true });
  const timeline = el('ol', { id: 'timeline', class: 'timeline' });
  const streamState = el('span', { id: 'stream-state', class: 'muted' });
  add(m, head, wf, el('div', { class: 'cols' },
    el('div', { class: 'wide' }, el('section', { class: 'card' }, el('h2', {}, 'Timeline ', streamState), timeline)),
    el('div', { class: 'side' }, plan, tree, media)));

  const ctx = { id, planEl: plan, audit: new Map(), auditWanted: [] };
  ctx.refreshPlan = debounce(() => loadPlan(ctx), 300);
  ctx.refreshPlan();
  const seen = [];
  const actionOut = el('div', { id: 'run-action-result' });

  function actions() {
    const live = !TERMINAL_STATUSES.includes(run.status);
    const job = run.kind !== 'mcp';
    const busy = (fn) => async (ev) => {
      const b = ev.currentTarget;
      clear(actionOut);
      b.disabled = true;
      try { await fn(); } catch (e) { actionOut.appendChild(errorBox(e)); } finally { b.disabled = false; }
    };
    return el('div', { class: 'row actions', id: 'run-actions' },
      live ? el('button', { type: 'button', id: 'cancel', class: 'danger', onclick: busy(async () => {
        run = await api('POST', '/api/runs/' + encodeURIComponent(id) + '/cancel'); renderHead();
      }) }, 'Cancel run') : null,
      job && !live ? el('button', { type: 'button', id: 'retry', title: 'Start a new run of the same request, owned by you', onclick: busy(async () => {
        const r = await api('POST', '/api/runs/' + encodeURIComponent(id) + '/retry');
        navigate('/app/runs/' + encodeURIComponent(r.run_id));
      }) }, 'Retry') : null,
      job ? el('a', { class: 'button secondary', id: 'clone', href: '/app/runs?clone=' + encodeURIComponent(id), title: 'The new-run form, filled from this run\'s request' }, 'Clone with edits…') : null,
      job ? el('button', { type: 'button', id: 'fork', class: 'secondary', disabled: true, title: FORK_WHY, 'aria-describedby': 'fork-why' }, 'Fork from a step') : null,
      el('button', { type: 'button', id: 'export', class: 'secondary', title: 'The run, its events, delegations, plan and audit as one JSON file', onclick: busy(() => exportRun(id)) }, 'Export JSON'),
      job ? el('span', { id: 'fork-why', class: 'sr' }, FORK_WHY) : null);
  }

  function renderHead() {
    clear(head);
    const pct = run.token_budget > 0 ? Math.min(100, Math.round(100 * run.tokens_used / run.token_budget)) : 0;
    add(head,
      el('h1', {}, 'Run ', el('code', {}, run.id), ' ', badge(run.status), ' ', el('span', { id: 'run-status', 'data-status': run.status, class: 'sr' }, run.status)),
      el('dl', { class: 'meta' },
        el('dt', {}, 'team'), el('dd', {}, run.team || ''),
        el('dt', {}, 'owner'), el('dd', {}, run.owner),
        run.project ? [el('dt', {}, 'project'), el('dd', {}, run.project)] : null,
        el('dt', {}, 'created'), el('dd', {}, fmtTime(run.created_at), ' ', el('span', { class: 'muted' }, '(' + relTime(run.created_at) + ')')),
        run.finished_at ? [el('dt', {}, 'finished'), el('dd', { id: 'finished' }, fmtTime(run.finished_at))] : null,
        run.kind !== 'mcp' ? [el('dt', {}, 'duration'), el('dd', { id: 'duration' }, runDuration(run) || '—')] : null,
        el('dt', {}, 'priority'), el('dd', { id: 'priority' }, String(run.priority || 3)),
        run.waiting ? [el('dt', {}, 'admission'), el('dd', { id: 'admission' }, 'waiting for a slot of its fairness key: position ' + run.position + ' in line')] : null,
        el('dt', {}, 'prompt'), el('dd', { class: 'pre' }, run.prompt),
        el('dt', {}, 'tokens'), el('dd', {}, el('div', { class: 'bar', title: pct + '%' }, el('div', { class: 'fill', style: null, 'data-pct': pct })), ' ', el('span', { id: 'tokens' }, run.tokens_used + ' used of ' + run.token_budget)),
        el('dt', {}, 'cost'), el('dd', {}, el('span', { id: 'cost' }, '$' + (run.cost_usd || '0') + (run.cost_budget_usd ? ' of $' + run.cost_budget_usd : '')))),
      run.result ? el('div', { class: 'result' }, el('h3', {}, 'Result'), el('pre', { id: 'run-result' }, run.result)) : null,
      run.error ? el('div', { class: 'result bad' }, el('h3', {}, 'Error'), el('pre', { id: 'run-error' }, run.error + (run.reason ? ' (' + run.reason + ')' : ''))) : null,
      el('p', {}, el('a', { href: '/app/runs/' + encodeURIComponent(id) + '/files', id: 'files-link' }, 'Workspace files'), ' · ',
        el('a', { href: '/app/audit?run=' + encodeURIComponent(id) }, 'Audit'), ' · ',
        el('a', { href: '/app/inbox?run=' + encodeURIComponent(id) }, 'Inbox'),
        // The run's trace in the deployment's trace viewer (tracing.trace_url).
        run.trace_url ? [' · ', traceLink(run.trace_url)] : null),
      actions(), actionOut);
    setBars(head);
  }
  renderHead();

  let refreshTimer = null;
  const refresh = () => {
    if (refreshTimer) return;
    refreshTimer = setTimeout(async () => {
      refreshTimer = null;
      try { run = await api('GET', '/api/runs/' + encodeURIComponent(id)); renderHead(); } catch (_) { /* shown on next try */ }
    }, 300);
  };
  const refreshTree = debounce(() => renderTree(id, tree), 300);
  refreshTree();
  const fillAudit = debounce(() => loadAudit(ctx), 500);
  const drawWaterfall = debounce(() => renderWaterfall(wf, seen, run), 200);
  // While the run goes on, its open spans (and the run's own) grow to now.
  const grow = setInterval(() => { if (!TERMINAL_STATUSES.includes(run.status) && seen.length) drawWaterfall(); }, 2000);

  const ac = new AbortController();
  onLeave(() => { ac.abort(); ctx.left = true; clearTimeout(ctx.auditRetry); clearInterval(grow); });
  await streamEvents(id, ac.signal, streamState, (ev) => {
    seen.push(ev);
    timeline.appendChild(card(ev, ctx));
    drawWaterfall();
    if (ev.type.startsWith('delegation.')) refreshTree();
    if (ev.type.startsWith('approval.')) kickInboxCount();
    if (ev.type === 'agent.message' || ev.type.startsWith('run.')) refresh();
    if (ctx.auditWanted.length) fillAudit();
  });
  refresh();
  fillAudit();
  drawWaterfall();
  showMedia(id, media);
}

// EXPORT_PAGE is how many events one request of an export reads.
const EXPORT_PAGE = 1000;

// exportRun saves a run's whole history as one JSON file: the run, every
// stored event (post-run ones too) page by page, its delegations, plan and
// audit, each as the API gave it to this viewer (masked where it masks).
async function exportRun(id) {
  const base = '/api/runs/' + encodeURIComponent(id);
  const events = [];
  let after = 0;
  // A page shorter than asked for was the last one stored so far.
  for (;;) {
    const page = await api('GET', base + '/events?format=json&limit=' + EXPORT_PAGE + '&after=' + after);
    const got = page.events || [];
    events.push(...got);
    if (got.length < EXPORT_PAGE || page.next_after === after) break;
    after = page.next_after;
  }
  const [run, delegations, plan, audit] = await Promise.all([
    api('GET', base), api('GET', base + '/delegations'), api('GET', base + '/plan'), api('GET', base + '/audit'),
  ]);
  const doc = {
    exported_at: new Date().toISOString(),
    run,
    events,
    delegations: (delegations && delegations.delegations) || [],
    plan: plan && plan.plan !== undefined ? plan.plan : plan,
    audit: (audit && audit.audit) || [],
  };
  saveBlob(new Blob([JSON.stringify(doc, null, 2) + '\n'], { type: 'application/json' }), 'run-' + id + '.json');
  return doc;
}

// spansOf lays a run's events out in time: the run itself, then one lane per
// agent holding its model calls (from the answer back to the agent's previous
// event, or the call's own duration when the event has one), tool calls (their
// duration_ms before the event), rate-limit waits, approvals (asked to
// decided) and delegations (created to finished, in the delegate's lane).
function spansOf(events, run, now) {
  const t = (ev) => Date.parse(ev.time);
  const lanes = new Map();
  const lane = (name) => { if (!lanes.has(name)) lanes.set(name, { name, life: [], spans: [] }); return lanes.get(name); };
  const last = new Map();
  const open = { approvals: new Map(), delegations: new Map() };
  let start = Infinity;
  let end = -Infinity;
  let runStart = null;
  let runEnd = null;
  let queued = null;
  for (const ev of events) {
    const at = t(ev);
    if (isNaN(at)) continue;
    const d = ev.data || {};
    const agent = ev.agent || '';
    start = Math.min(start, at);
    end = Math.max(end, at);
    switch (ev.type) {
      case 'run.queued': queued = at; break;
      case 'run.started': runStart = at; break;
      case 'run.completed': case 'run.failed': case 'run.cancelled': runEnd = at; break;
      case 'tool.call': {
        const ms = Number(d.duration_ms) || 0;
        lane(agent).spans.push({ start: at - ms, end: at, kind: 'tool outcome-' + ((OUTCOMES[d.decision] || OUTCOMES.error).kind), label: (d.tool || 'tool') + ' · ' + fmtDur(ms), id: ev.id });
        start = Math.min(start, at - ms);
        break;
      }
      case 'agent.message': {
        const from = d.duration_ms !== undefined ? at - Number(d.duration_ms) : (last.has(agent) ? last.get(agent) : at);
        lane(agent).spans.push({ start: from, end: at, kind: 'model', label: 'model' + (d.model ? ' ' + d.model : '') + ' · ' + fmtDur(at - from) + (d.tokens ? ' · ' + d.tokens + ' tokens' : ''), id: ev.id });
        break;
      }
      case 'agent.waiting': {
        const ms = Number(d.retry_after_ms) || 0;
        lane(agent).spans.push({ start: at, end: at + ms, kind: 'wait', label: 'waiting for ' + (d.limit || 'a rate limit') + ' · ' + fmtDur(ms), id: ev.id });
        break;
      }
      case 'approval.requested': {
        const s = { start: at, end: null, kind: 'approval', label: (d.kind === 'question' ? 'question' : 'approval of ' + (d.tool || '')), id: ev.id };
        lane(agent).spans.push(s);
        open.approvals.set(d.approval_id, s);
        break;
      }
      case 'approval.decided': {
        const s = open.approvals.get(d.approval_id);
        if (s) { s.end = at; s.label += ' · ' + (d.status || 'decided') + ' after ' + fmtDur(at - s.start); }
        break;
      }
      case 'delegation.created': {
        const s = { start: at, end: null, kind: 'delegation', label: 'delegated by ' + (agent || 'the supervisor'), id: ev.id };
        lane(d.to || '?').life.push(s);
        open.delegations.set(d.delegation_id, s);
        break;
      }
      case 'delegation.finished': {
        const s = open.delegations.get(d.delegation_id);
        if (s) { s.end = at; s.kind += ' ' + (d.status || ''); s.label += ' · ' + (d.status || 'finished') + ' after ' + fmtDur(at - s.start); }
        break;
      }
    }
    if (agent) last.set(agent, at);
  }
  if (start === Infinity) return null;
  const running = !TERMINAL_STATUSES.includes(run.status) && runEnd === null;
  const stop = running ? Math.max(end, now) : (runEnd !== null ? Math.max(end, runEnd) : end);
  const close = (s) => { if (s.end === null) { s.end = stop; s.label += running ? ' · still open' : ' · never closed'; } };
  for (const l of lanes.values()) { l.spans.forEach(close); l.life.forEach(close); }
  const runLane = { name: 'run', life: [], spans: [] };
  if (queued !== null && runStart !== null && runStart > queued) runLane.spans.push({ start: queued, end: runStart, kind: 'queue', label: 'queued · ' + fmtDur(runStart - queued) });
  const from = runStart !== null ? runStart : (queued !== null ? queued : start);
  runLane.spans.push({ start: from, end: runEnd !== null ? runEnd : stop, kind: 'run ' + run.status, label: run.status + ' · ' + fmtDur((runEnd !== null ? runEnd : stop) - from) });
  return { start, end: stop, lanes: [runLane, ...lanes.values()] };
}

// renderWaterfall draws the spans as bars on a shared time axis; a bar names
// its step and how long it took, and leads to its card in the timeline.
function renderWaterfall(box, events, run) {
  const w = spansOf(events, run, Date.now());
  if (!w) return;
  const total = Math.max(1, w.end - w.start);
  const pos = (s) => [100 * (s.start - w.start) / total, Math.max(0, 100 * (s.end - s.start) / total)];
  const bar = (s, cls) => {
    const [left, width] = pos(s);
    const b = el(s.id ? 'a' : 'span', { class: 'wf-bar ' + cls + ' ' + s.kind, title: s.label, 'aria-label': s.label, 'data-left': left.toFixed(3), 'data-width': width.toFixed(3), 'data-ms': Math.round(s.end - s.start),
      href: s.id ? location.pathname + '#ev-' + s.id : null, onclick: s.id ? (ev) => { ev.preventDefault(); ev.stopPropagation(); const c = document.querySelector('#timeline li[data-id="' + s.id + '"]'); if (c) { c.scrollIntoView({ block: 'center' }); c.classList.add('flash'); setTimeout(() => c.classList.remove('flash'), 1200); } } : null });
    return b;
  };
  clear(box).hidden = false;
  add(box, el('h2', {}, 'Waterfall ', el('span', { class: 'muted' }, fmtDur(total))),
    el('div', { class: 'wf', role: 'list' }, w.lanes.map((l) => el('div', { class: 'wf-lane', role: 'listitem', 'data-lane': l.name },
      el('div', { class: 'wf-name', title: l.name }, l.name),
      el('div', { class: 'wf-track' }, l.life.map((s) => bar(s, 'wf-life')), l.spans.map((s) => bar(s, 'wf-step')))))),
    el('div', { class: 'wf-axis muted' }, el('span', {}, '0'), el('span', {}, fmtDur(total / 2)), el('span', {}, fmtDur(total))));
  // Positions through the CSSOM: a style attribute would need 'unsafe-inline'.
  for (const b of box.querySelectorAll('.wf-bar')) {
    b.style.left = b.getAttribute('data-left') + '%';
    b.style.width = b.getAttribute('data-width') + '%';
  }
}

// showMedia shows the pictures and videos of the finished run's workspace,
// each only once its bytes were recognised (preview).
async function showMedia(id, box) {
  let files;
  try { files = (await api('GET', '/api/runs/' + encodeURIComponent(id) + '/files')).files; } catch (_) { return; }
  const picks = files.filter((f) => MEDIA_NAME.test(f.path)).slice(0, 6);
  if (!picks.length) return;
  clear(box).hidden = false;
  add(box, el('h2', {}, 'Media'));
  for (const f of picks) {
    const pv = el('div', { class: 'preview' });
    add(box, el('div', { 'data-media': f.path }, el('code', { class: 'path' }, f.path), pv));
    preview(id, f, pv).catch(() => {});
  }
}

function debounce(fn, ms) {
  let t = null;
  return () => { clearTimeout(t); t = setTimeout(fn, ms); };
}

// setBars sizes progress bars from data-pct: a style attribute would need
// 'unsafe-inline' styles under the CSP, a CSSOM property does not.
function setBars(root) {
  for (const f of root.querySelectorAll('.fill[data-pct]')) f.style.width = Math.max(0, Math.min(100, Number(f.getAttribute('data-pct')) || 0)) + '%';
}

// streamEvents reads the run's SSE stream with fetch (EventSource cannot send
// the Authorization header) and resumes from the last id when the connection
// drops, until the terminal event.
async function streamEvents(id, signal, stateEl, onEvent) {
  let last = 0;
  let done = false;
  let failures = 0;
  while (!done && !signal.aborted) {
    stateEl.textContent = '· live';
    try {
      const headers = Object.assign({ 'Accept': 'text/event-stream' }, authHeaders());
      if (last) headers['Last-Event-ID'] = String(last);
      const resp = await fetch('/api/runs/' + encodeURIComponent(id) + '/events', { headers, signal, credentials: 'omit', cache: 'no-store' });
      if (resp.status === 204) break;
      if (!resp.ok) { stateEl.textContent = '· stream error HTTP ' + resp.status; if (resp.status < 500) return; throw new Error('HTTP ' + resp.status); }
      const reader = resp.body.getReader();
      const dec = new TextDecoder();
      let buf = '';
      for (;;) {
        const { value, done: eof } = await reader.read();
        if (eof) break;
        buf += dec.decode(value, { stream: true });
        const cut = buf.lastIndexOf('\n\n');
        if (cut < 0) continue;
        const complete = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        for (const ev of parseSSE(complete)) {
          last = ev.id;
          failures = 0;
          onEvent(ev);
          if (TERMINAL.includes(ev.type)) done = true;
        }
      }
    } catch (e) {
      if (signal.aborted) return;
      failures++;
    }
    if (!done) await new Promise((r) => setTimeout(r, Math.min(5000, 250 * 2 ** failures)));
  }
  if (done && !signal.aborted) {
    // Post-run events (postrun.finish_image) are stored after the terminal
    // one: resuming past it sends what there is and ends (204 for nothing).
    try {
      const headers = Object.assign({ 'Accept': 'text/event-stream', 'Last-Event-ID': String(last) }, authHeaders());
      const resp = await fetch('/api/runs/' + encodeURIComponent(id) + '/events', { headers, signal, credentials: 'omit', cache: 'no-store' });
      if (resp.status === 200) for (const ev of parseSSE(await resp.text())) onEvent(ev);
    } catch (_) { /* nothing more to show */ }
  }
  stateEl.textContent = done ? '· finished' : '';
}

// parseSSE splits a finished SSE body into its events' JSON payloads.
function parseSSE(text) {
  const out = [];
  for (const block of text.split('\n\n')) {
    const data = block.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).replace(/^ /, '')).join('\n');
    if (!data) continue;
    try { out.push(JSON.parse(data)); } catch (_) { /* skip a malformed event */ }
  }
  return out;
}

async function renderTree(id, box) {
  let ds;
  try { ds = (await api('GET', '/api/runs/' + encodeURIComponent(id) + '/delegations')).delegations; } catch (e) { return; }
  clear(box).appendChild(el('h2', {}, 'Delegations'));
  if (!ds.length) { box.appendChild(el('p', { class: 'muted' }, 'None yet.')); return; }
  // A delegation's parent is the session that delegated; delegations run as
  // sessions named after them, so children nest under the delegation whose id
  // their parent session carries.
  const byParent = new Map();
  for (const d of ds) {
    const key = ds.some((p) => d.parent_session && d.parent_session.includes(p.id)) ? ds.find((p) => d.parent_session.includes(p.id)).id : '';
    if (!byParent.has(key)) byParent.set(key, []);
    byParent.get(key).push(d);
  }
  const build = (key) => el('ul', { class: 'tree' }, (byParent.get(key) || []).map((d) => el('li', { 'data-delegation': d.id },
    el('strong', {}, d.agent), ' ', badge(d.status), d.kind ? ' ' + d.kind : '',
    el('div', { class: 'muted clip' }, d.task),
    d.result ? el('div', { class: 'clip' }, d.result) : null,
    d.error ? el('div', { class: 'error' }, d.error) : null,
    byParent.has(d.id) ? build(d.id) : null)));
  box.appendChild(el('div', {}, el('div', {}, el('strong', {}, 'supervisor')), build('')));
}

// loadAudit fetches the run's audit rows for the cards that need a call's
// arguments (the event carries only the tool and its outcome).
async function loadAudit(ctx, retry) {
  // A new event starts the count again; a call whose row never comes (its key
  // differs, its page was left) stops being asked for after a few tries.
  ctx.auditTries = retry ? (ctx.auditTries || 0) + 1 : 0;
  let rows;
  try { rows = (await api('GET', '/api/runs/' + encodeURIComponent(ctx.id) + '/audit')).audit || []; } catch (_) { return; }
  for (const r of rows) {
    const callID = (r.call_key || '').split(':').pop();
    ctx.audit.set(r.agent + '\u0000' + callID + '\u0000' + r.tool, r);
  }
  ctx.auditWanted = ctx.auditWanted.filter((w) => {
    const r = ctx.audit.get(w.key);
    if (!r) return true;
    w.fill(r);
    return false;
  });
  if (ctx.auditWanted.length && !ctx.auditRetry && !ctx.left && ctx.auditTries < 10) {
    ctx.auditRetry = setTimeout(() => { ctx.auditRetry = null; loadAudit(ctx, true); }, 1500);
  }
}

// parseArgs reads a call's arguments from its audit row: whole for a
// non-Standard tool, else only the gate's redacted summary (its first bytes),
// which may be cut mid-way and is then shown as it is.
function parseArgs(r) {
  if (!r) return {};
  if (r.args) {
    if (typeof r.args === 'object') return r.args;
    try { return JSON.parse(r.args); } catch (_) { /* fall through */ }
  }
  try { return JSON.parse(r.summary || ''); } catch (_) { return { __summary: r.summary || '' }; }
}

// stepDur is how long a step took, for an event that says (a tool call's
// duration_ms, a model answer's latency).
function stepDur(d) {
  return d && d.duration_ms !== undefined && d.duration_ms !== null ? el('span', { class: 'dur', title: 'how long it took' }, fmtDur(d.duration_ms)) : null;
}

function cardShell(ev, kind, title, ...body) {
  return el('li', { class: 'ev ' + kind, 'data-type': ev.type, 'data-id': ev.id },
    el('div', { class: 'ev-head' }, el('span', { class: 'ev-title' }, title), ev.agent ? el('span', { class: 'agent' }, ev.agent) : null, stepDur(ev.data), el('time', {}, fmtTime(ev.time))),
    ...body);
}

// card renders one event by its type; an unknown type gets the generic card.
function card(ev, ctx) {
  const d = ev.data || {};
  switch (ev.type) {
    case 'run.queued': return cardShell(ev, 'info', 'queued', el('div', {}, 'team ', d.team || '',
      d.priority ? ' · priority ' + d.priority : '', d.position ? ' · waiting for its key\'s run limit (' + d.run_limit + '), position ' + d.position : ''));
    case 'run.admitted': return cardShell(ev, 'info', 'admitted', el('div', {}, 'a run of its key ended: admitted'));
    case 'run.started': return cardShell(ev, 'info', 'started');
    case 'run.completed':
    case 'run.failed':
    case 'run.cancelled':
      return cardShell(ev, ev.type === 'run.completed' ? 'ok' : ev.type === 'run.cancelled' ? 'cancelled' : 'bad', ev.type.slice(4),
        d.result ? el('pre', { class: 'result-text' }, d.result) : null,
        d.error ? el('pre', { class: 'error' }, d.error + (d.reason ? ' (' + d.reason + ')' : '')) : null,
        d.tokens_used !== undefined ? el('div', { class: 'muted' }, d.tokens_used + ' tokens used') : null);
    case 'agent.turn_started': return cardShell(ev, 'info', 'turn started');
    case 'agent.message':
      return cardShell(ev, 'msg', 'message',
        d.content ? el('pre', { class: 'content' }, d.content) : null,
        (d.tool_calls || []).length ? el('div', { class: 'muted' }, 'calls ', (d.tool_calls || []).join(', ')) : null,
        d.tokens ? el('div', { class: 'muted' }, d.tokens + ' tokens' + (d.cached_tokens ? ' (' + d.cached_tokens + ' cached)' : '') +
          (d.model ? ' · ' + (d.provider ? d.provider + '/' : '') + d.model : '') + (d.cost ? ' · ' + d.cost : '')) : null,
        d.fallback ? el('div', { class: 'note bad' }, 'answered by the fallback ' + (d.provider || '') + '/' + (d.model || '') + ': the team\'s model was overloaded') : null);
    // A model call parked by a rate limit (docs/model-traffic.md): which limit, until when.
    case 'agent.waiting':
      return cardShell(ev, 'note', 'waiting for ' + (d.limit || 'a rate limit'),
        el('div', { class: 'muted' }, 'asks again in ' + ((Number(d.retry_after_ms) || 0) / 1000).toFixed(1) + ' s; the worker slot is free meanwhile'),
        d.cause ? el('div', { class: 'muted pre' }, d.cause) : null);
    // A session's older turns summarized to fit the model's window (docs/long-sessions.md):
    // the full history stays stored, and opens here marked where it was cut.
    case 'session.compacted': {
      const hist = el('details', { class: 'history' }, el('summary', {}, 'the full history'));
      hist.addEventListener('toggle', () => { if (hist.open && !hist.dataset.loaded) loadHistory(hist, ev.run_id, d.session); });
      return cardShell(ev, 'note', 'context compacted (' + (d.n || 1) + ')',
        el('div', { class: 'muted' }, (d.messages || 0) + ' messages summarized by the ' + (d.summarizer || 'model') + '; ' +
          (d.tokens_before || 0) + ' → ' + (d.tokens_after || 0) + ' tokens; the last ' + (d.kept_turns || 0) + ' turns kept verbatim'),
        d.session ? hist : null);
    }
    case 'delegation.created':
      return cardShell(ev, 'deleg', 'delegated to ' + (d.to || ''), el('pre', { class: 'content' }, d.task || ''));
    case 'delegation.finished':
      // Cancelled is a person's (or the run's end's) choice, not a failure.
      return cardShell(ev, d.status === 'completed' ? 'ok' : d.status === 'cancelled' ? 'cancelled' : 'bad', 'delegation ' + (d.status || ''),
        d.result ? el('pre', { class: 'content' }, d.result) : null, d.error ? el('pre', { class: 'error' }, d.error) : null);
    case 'progress': {
      const pct = Number(d.percent) || 0;
      const c = cardShell(ev, 'progress', 'progress ' + pct + '%', el('div', { class: 'bar' }, el('div', { class: 'fill', 'data-pct': pct })), d.message ? el('div', {}, d.message) : null);
      setBars(c);
      return c;
    }
    case 'notification': return cardShell(ev, 'note ' + (d.level === 'error' || d.level === 'warning' ? 'bad' : ''), 'notification' + (d.level ? ' (' + d.level + ')' : ''), el('div', { class: 'pre' }, d.message || ''));
    case 'approval.requested':
      return cardShell(ev, 'approval outcome-waiting', d.kind === 'question' ? 'question asked' : 'approval requested: ' + (d.tool || ''),
        outcomeLabel('waiting', d.kind === 'question' ? 'waiting for an answer' : 'waiting for approval'),
        d.kind === 'question' && d.question ? el('div', { class: 'question-text pre' }, d.question) : null,
        d.why ? el('div', { class: 'reason pre' }, d.why) : null,
        el('div', {}, el('a', { href: '/app/inbox?run=' + encodeURIComponent(ev.run_id) }, d.kind === 'question' ? 'answer it in the inbox' : 'open the inbox')), genericData(d));
    // The flow rules (docs/flow.md): when a session became steerable, by what,
    // and the files it wrote afterwards, for a person to review.
    case 'flow.labelled':
      return cardShell(ev, 'note bad', 'read untrusted content',
        el('ul', { class: 'sources' }, (d.untrusted || []).map((s) => el('li', {}, s))),
        (d.private || []).length ? el('div', { class: 'muted' }, 'and private data: ' + d.private.join('; ')) : null);
    case 'flow.untrusted_write':
      return cardShell(ev, 'note bad', 'marked for review: ' + (d.path || ''),
        el('div', { class: 'muted' }, (d.tool || '') + ' after reading ' + (d.untrusted || []).join('; ')));
    case 'approval.decided':
      return cardShell(ev, d.approved || DECIDED_OK.includes(d.status) ? 'ok' : 'bad', 'approval ' + (d.status || (d.approved ? 'approved' : 'denied')), genericData(d));
    case 'tool.call': return toolCard(ev, ctx);
    default: return cardShell(ev, 'generic', ev.type, genericData(d));
  }
}

// loadHistory fills a compaction card's details with the session's stored
// history, page by page; rows a summary stands for in the model's context are
// marked compacted.
async function loadHistory(box, runID, session) {
  box.dataset.loaded = '1';
  const list = el('ol', { class: 'history-list' });
  box.appendChild(list);
  let after = -1;
  for (let pages = 0; pages < 50; pages++) {
    let page;
    try {
      page = await api('GET', '/api/runs/' + encodeURIComponent(runID) + '/sessions/' + encodeURIComponent(session) + '/history?limit=500&after=' + after);
    } catch (e) { box.appendChild(errorBox(e)); return; }
    for (const m of page.messages || []) {
      const msg = m.message || {};
      const calls = (msg.tool_calls || []).map((c) => c.name).join(', ');
      list.appendChild(el('li', { class: 'hist ' + (m.compacted ? 'compacted' : 'kept'), value: String(m.seq) },
        el('span', { class: 'role' }, (msg.role || '') + (msg.name ? ' ' + msg.name : '') + (m.compacted ? ' (summarized)' : '')),
        el('pre', { class: 'content' }, (msg.content || '').slice(0, 2000) + (calls ? '\ncalls ' + calls : ''))));
    }
    if (page.next_after === undefined || page.next_after === null) return;
    after = page.next_after;
  }
  box.appendChild(el('div', { class: 'muted' }, 'more in the API: /api/runs/' + runID + '/sessions/' + session + '/history'));
}

function genericData(d) {
  return el('details', {}, el('summary', {}, 'data'), el('pre', {}, JSON.stringify(d, null, 2)));
}

// OUTCOMES are the looks of a tool call by how it ended: each its class on the
// card (outcome-<kind>) and the label it starts with, so a refused or failed
// call never reads like one that ran. "waiting" is a call held for a person:
// its card is the approval.requested event's (no tool.call exists yet).
const OUTCOMES = {
  allowed: { kind: 'allowed', cls: 'tool', label: () => 'allowed' },
  denied: { kind: 'refused', cls: 'refusal', label: (d) => ['refused by ', el('strong', { class: 'layer' }, d.layer || 'the gate'), d.error ? ': ' + refusalReason(d) : ''] },
  error: { kind: 'failed', cls: 'bad', label: (d) => 'failed: ' + (d.error || 'the tool reported an error') },
  unknown: { kind: 'unknown', cls: 'bad', label: (d) => 'outcome unknown: ' + (d.error || 'started before a worker stopped; not run again') },
};

// refusalReason is a refusal's reason without the "denied by <layer>: " the
// event's error starts with (the label names the layer already).
function refusalReason(d) {
  const prefix = 'denied by ' + d.layer + ': ';
  return String(d.error).startsWith(prefix) ? String(d.error).slice(prefix.length) : String(d.error);
}

function outcomeLabel(kind, ...text) {
  return el('div', { class: 'outcome-label', 'data-outcome': kind }, ...text);
}

// WRITES are the tools whose allowed call is drawn as a diff. Only an allowed
// one: a refused or failed write changed nothing, and its arguments (a path
// that escapes, a missing content) are shown as what they are.
const WRITES = ['write_file', 'edit_file'];

function toolCard(ev, ctx) {
  const d = ev.data || {};
  const o = OUTCOMES[d.decision] || OUTCOMES.error;
  const c = el('li', { class: 'ev call ' + o.cls + ' outcome-' + o.kind, 'data-type': ev.type, 'data-id': ev.id, 'data-outcome': o.kind, 'data-tool': d.tool },
    el('div', { class: 'ev-head' }, el('code', { class: 'ev-title' }, d.tool || ''), ev.agent ? el('span', { class: 'agent' }, ev.agent) : null, stepDur(d), el('time', {}, fmtTime(ev.time))),
    outcomeLabel(o.kind, o.label(d)));
  const body = el('div', { class: 'tool-body' });
  c.appendChild(body);
  const key = (ev.agent || '') + '\u0000' + d.call_id + '\u0000' + d.tool;
  const want = (fill) => ctx.auditWanted.push({ key, fill });
  // The arguments come from the call's audit row, as the API gives them to
  // this viewer: masked by the gate, and for a Standard tool only their first
  // bytes (the event itself carries none).
  const showArgs = () => want((r) => body.insertBefore(argsView(parseArgs(r)), body.firstChild));
  if (d.decision === 'allowed' && WRITES.includes(d.tool)) {
    want((r) => body.appendChild(diffView(d.tool, parseArgs(r))));
    return c;
  }
  showArgs();
  if (d.decision !== 'allowed') return c;
  switch (d.tool) {
    case 'create_plan':
    case 'update_plan':
      ctx.refreshPlan();
      break;
    case 'run_tests':
    case 'analyze_code':
    case 'check_finishing':
      want((r) => body.appendChild(resultTable(r.result || d.result || '')));
      break;
    default:
      if (d.result) body.appendChild(el('details', {}, el('summary', {}, 'result'), el('pre', {}, d.result)));
  }
  return c;
}

// argsView shows a call's arguments: indented JSON, or the audit's cut summary
// as it is, marked as cut.
function argsView(a) {
  if (a.__summary === '') return el('div', { class: 'args-box muted' }, 'no arguments recorded');
  if (a.__summary !== undefined) {
    return el('div', { class: 'args-box' }, el('div', { class: 'muted' }, 'arguments (their first bytes, as the audit keeps them)'), el('pre', { class: 'args' }, a.__summary + ' …'));
  }
  return el('div', { class: 'args-box' }, el('div', { class: 'muted' }, 'arguments'), el('pre', { class: 'args' }, JSON.stringify(a, null, 2)));
}

async function loadPlan(ctx) {
  let p;
  try { p = (await api('GET', '/api/runs/' + encodeURIComponent(ctx.id) + '/plan')).plan; } catch (_) { return; }
  if (!p) return;
  const box = clear(ctx.planEl);
  box.hidden = false;
  const done = p.steps.filter((s) => s.status === 'completed').length;
  add(box, el('h2', {}, 'Plan ', el('span', { class: 'muted' }, done + '/' + p.steps.length)), p.goal ? el('p', {}, p.goal) : null,
    el('div', { class: 'bar' }, el('div', { class: 'fill', 'data-pct': p.steps.length ? Math.round(100 * done / p.steps.length) : 0 })),
    el('ol', { class: 'plan' }, p.steps.map((s) => el('li', { class: 'step ' + s.status, 'data-status': s.status },
      el('span', { class: 'tick' }, s.status === 'completed' ? '\u2611' : '\u2610'), ' ', s.title, ' ', badge(s.status), s.result ? el('div', { class: 'muted' }, s.result) : null))));
  setBars(box);
}

// diffView shows a write as added lines and an edit as its search and
// replacement (the workspace holds the file's whole new state).
function diffView(tool, a) {
  if (a.__summary !== undefined) {
    return el('div', { class: 'diff' }, el('div', { class: 'hdr' }, 'arguments (the audit keeps the first bytes of a Standard call):'), el('div', {}, a.__summary + ' …'));
  }
  const lines = [];
  const add = (text, sign, cls) => { for (const l of String(text).split('\n')) lines.push(el('div', { class: cls }, sign + ' ' + l)); };
  if (tool === 'write_file') {
    lines.push(el('div', { class: 'hdr' }, '+++ ' + (a.path || '')));
    add(a.content || '', '+', 'add');
  } else {
    lines.push(el('div', { class: 'hdr' }, '--- ' + (a.path || '') + (a.start_line ? ' lines ' + a.start_line + '–' + (a.end_line || '') : '')));
    if (a.search) add(a.search, '-', 'del');
    add(a.replace !== undefined ? a.replace : (a.new_text || a.content || ''), '+', 'add');
  }
  return el('div', { class: 'diff' }, lines);
}

// resultTable renders a test or lint report (run_tests' counts and failures,
// analyze_code's findings and counts per severity) as tables: its scalar fields
// as one, each list of objects as another. Anything else is shown as text.
function resultTable(text) {
  let v = null;
  try { v = JSON.parse(text); } catch (_) { /* plain text */ }
  if (Array.isArray(v)) v = { rows: v };
  if (!v || typeof v !== 'object') return el('pre', {}, String(text));
  const cell = (x) => (x !== null && typeof x === 'object' ? JSON.stringify(x) : String(x ?? ''));
  const bad = (k, x) => (/^(fail|failed|errors|critical|error)$/i.test(String(x)) || (/^(failed|errors|critical)$/.test(k) && Number(x) > 0) ? 'bad' : '');
  const out = el('div', { class: 'report' });
  const scalars = Object.entries(v).filter(([, x]) => x === null || typeof x !== 'object' || (!Array.isArray(x) && Object.values(x).every((y) => typeof y !== 'object')));
  if (scalars.length) {
    const flat = scalars.flatMap(([k, x]) => (x && typeof x === 'object' ? Object.entries(x).map(([k2, y]) => [k + '.' + k2, y]) : [[k, x]]))
      .filter(([k]) => k !== 'output_tail');
    add(out, scroller(el('table', { class: 'grid small summary' }, el('thead', {}, el('tr', {}, flat.map(([k]) => el('th', {}, k)))),
      el('tbody', {}, el('tr', {}, flat.map(([k, x]) => el('td', { class: bad(k, x) }, cell(x))))))));
  }
  for (const [k, rows] of Object.entries(v)) {
    if (!Array.isArray(rows) || !rows.length || typeof rows[0] !== 'object') continue;
    const cols = [...new Set(rows.flatMap((r) => Object.keys(r || {})))].slice(0, 8);
    add(out, el('div', { class: 'muted' }, k), scroller(el('table', { class: 'grid small' }, el('thead', {}, el('tr', {}, cols.map((c) => el('th', {}, c)))),
      el('tbody', {}, rows.slice(0, 200).map((r) => el('tr', {}, cols.map((c) => el('td', { class: bad(c, r[c]) }, cell(r[c])))))))));
  }
  if (v.output_tail) add(out, el('details', {}, el('summary', {}, 'output'), el('pre', {}, String(v.output_tail))));
  return out;
}

// ---------- inbox: approvals, questions, grants ----------

// INBOX_LIMIT bounds the pending list the nav counts (the API's page is at most
// 1000 rows of arguments; past the limit the badge says "N+").
const INBOX_LIMIT = 100;

// Statuses a decided approval ends in that went the agent's way; the others
// (denied, timed_out, cancelled) are shown as refusals.
const DECIDED_OK = ['approved', 'edited', 'answered'];

// setInboxCount shows n pending decisions on the nav's Inbox entry (hidden at 0).
function setInboxCount(n) {
  const b = document.getElementById('inbox-count');
  if (!b) return;
  b.textContent = n >= INBOX_LIMIT ? INBOX_LIMIT + '+' : String(n);
  b.setAttribute('data-count', String(n));
  b.hidden = n === 0;
}

// refreshInboxCount asks the API what waits for this principal: the calls and
// questions it may see (its own runs', or every run's for an approver). It polls
// from every page and is also kicked by a run's approval events, so the badge
// follows a decision made elsewhere within seconds.
async function refreshInboxCount() {
  if (token() === null) return;
  try {
    const data = await api('GET', '/api/approvals?status=pending&limit=' + INBOX_LIMIT);
    setInboxCount((data.approvals || []).length);
  } catch (_) { /* a token without read: no badge */ }
}
const kickInboxCount = debounce(refreshInboxCount, 250);

let inboxPoll = null;
function startInboxPoll() {
  if (inboxPoll) return;
  kickInboxCount();
  // A hidden tab does not poll; it catches up when it is shown again.
  inboxPoll = setInterval(() => { if (!document.hidden) refreshInboxCount(); }, 5000);
  document.addEventListener('visibilitychange', () => { if (!document.hidden) kickInboxCount(); });
}

// prettyArgs is the arguments as indented JSON (they come masked from the API).
function prettyArgs(args) {
  try { return JSON.stringify(typeof args === 'string' ? JSON.parse(args) : args, null, 2); } catch (_) { return String(args || ''); }
}

async function pageInbox() {
  const m = main();
  const runFilter = new URLSearchParams(location.search).get('run') || '';
  const list = el('div', { id: 'approvals' });
  const err = el('div');
  const grants = el('section', { class: 'card', id: 'grants' });
  const history = el('section', { class: 'card', id: 'history' });
  add(m, el('section', { class: 'card', id: 'inbox' }, el('h1', {}, 'Inbox'),
    el('p', { class: 'muted' }, 'Calls that wait for a decision and questions agents asked. Everything below was written by a model that may have read hostile pages: read it, do not trust it.'),
    runFilter ? el('p', { class: 'muted' }, 'run ', el('code', {}, runFilter), ' · ', el('a', { href: '/app/inbox' }, 'all runs')) : null, err, list),
  grants, history);
  const shown = new Map();
  // decided are the ids decided from this page: a list fetched just before the
  // decision still holds them, and must not bring their cards back.
  const decided = new Set();
  const refreshAll = () => { kickInboxCount(); loadGrants(grants); loadDecided(); };
  // One load at a time: the poll would otherwise add a card twice while an
  // earlier load still awaits its details.
  let loading = false;
  async function load() {
    if (loading) return;
    loading = true;
    try { await loadPending(); } finally { loading = false; }
  }
  async function loadPending() {
    clear(err);
    const qs = new URLSearchParams({ status: 'pending', limit: String(INBOX_LIMIT) });
    if (runFilter) qs.set('run_id', runFilter);
    let items;
    try { items = (await api('GET', '/api/approvals?' + qs)).approvals || []; } catch (e) { err.appendChild(errorBox(e)); return; }
    if (!runFilter) setInboxCount(items.length);
    const ids = new Set(items.map((a) => a.id));
    let gone = false;
    for (const [id, node] of shown) if (!ids.has(id)) { node.remove(); shown.delete(id); gone = true; }
    for (const a of items) {
      if (shown.has(a.id) || decided.has(a.id)) continue;
      let full = a;
      try { full = await api('GET', '/api/approvals/' + encodeURIComponent(a.id)); } catch (_) { /* the list row is enough */ }
      if (full.status !== 'pending' || decided.has(a.id) || shown.has(a.id)) continue;
      const done = () => { decided.add(a.id); node.remove(); shown.delete(a.id); empty(); refreshAll(); };
      const node = full.kind === 'question' ? questionCard(full, done) : approvalCard(full, done);
      shown.set(a.id, node);
      list.appendChild(node);
    }
    empty();
    if (gone) loadDecided(); // decided elsewhere (another approver, the CLI)
  }
  function empty() {
    if (!shown.size && !list.querySelector('.empty')) list.appendChild(el('p', { class: 'muted empty' }, 'Nothing waits for a decision.'));
    if (shown.size) for (const e of list.querySelectorAll('.empty')) e.remove();
  }
  async function loadDecided() {
    // decided=true: the API's history, latest decision first.
    const qs = new URLSearchParams({ decided: 'true', limit: '100' });
    if (runFilter) qs.set('run_id', runFilter);
    let rows;
    try { rows = (await api('GET', '/api/approvals?' + qs)).approvals || []; } catch (e) { clear(history).appendChild(errorBox(e)); return; }
    // Sorted here too: an API without decided= lists every status, oldest first.
    rows = rows.filter((a) => a.status !== 'pending')
      .sort((x, y) => (Date.parse(y.decided_at || y.created_at) || 0) - (Date.parse(x.decided_at || x.created_at) || 0)).slice(0, 100);
    const tbody = el('tbody');
    for (const a of rows) {
      const said = a.kind === 'question' ? (a.answer ? 'answer: ' + a.answer : '') : '';
      tbody.appendChild(el('tr', { 'data-approval-history': a.id, 'data-status': a.status },
        el('td', { 'data-label': 'when' }, fmtTime(a.decided_at || a.expires_at)),
        el('td', { 'data-label': 'status' }, badge(a.status)),
        el('td', { 'data-label': 'what' }, a.kind === 'question' ? 'question' : el('code', {}, a.tool || ''), ' ', el('span', { class: 'muted' }, a.agent || ''),
          a.kind === 'question' && a.view && a.view.question ? el('div', { class: 'muted' }, String(a.view.question).slice(0, 200)) : null),
        el('td', { 'data-label': 'by' }, a.decided_by || ''),
        el('td', { 'data-label': 'reason', class: 'pre' }, [said, a.decision_reason || ''].filter(Boolean).join('\n'),
          a.grant_id ? el('div', { class: 'muted' }, 'grant ', el('code', {}, a.grant_id)) : null,
          a.edited_args ? el('details', {}, el('summary', {}, 'edited arguments'), el('pre', {}, prettyArgs(a.edited_args))) : null),
        el('td', { 'data-label': 'run' }, el('a', { href: '/app/runs/' + encodeURIComponent(a.run_id) }, String(a.run_id || '').slice(0, 8)))));
    }
    if (!rows.length) tbody.appendChild(el('tr', {}, el('td', { colspan: 6, class: 'muted' }, 'No decisions yet.')));
    add(clear(history), el('h2', {}, 'Decided'),
      scroller(el('table', { class: 'grid stack', id: 'history-table' }, el('thead', {}, el('tr', {}, ['when', 'status', 'what', 'by', 'reason / answer', 'run'].map((h) => el('th', {}, h)))), tbody)));
  }
  await load();
  loadGrants(grants);
  loadDecided();
  const iv = setInterval(load, 2000);
  const slow = setInterval(() => { loadGrants(grants); loadDecided(); }, 10000);
  const tick = setInterval(() => { for (const t of m.querySelectorAll('[data-expires]')) t.textContent = timeLeft(t.getAttribute('data-expires')); }, 1000);
  onLeave(() => { clearInterval(iv); clearInterval(slow); clearInterval(tick); });
}

function timeLeft(iso) {
  const s = Math.round((new Date(iso) - Date.now()) / 1000);
  if (!iso || isNaN(s)) return '';
  if (s <= 0) return 'expired';
  const h = Math.floor(s / 3600);
  if (h > 0) return h + 'h ' + Math.floor((s % 3600) / 60) + 'm left';
  return (s >= 60 ? Math.floor(s / 60) + 'm ' : '') + (s % 60) + 's left';
}

// decision posts one verb on an approval and reports into out; done runs after
// a recorded decision. Buttons are disabled meanwhile so a double click is not a
// second decision (that would be a 409 anyway).
function decision(a, out, root, done) {
  return async (verb, body) => {
    clear(out);
    const buttons = [...root.querySelectorAll('button')];
    for (const b of buttons) b.disabled = true;
    try {
      await api('POST', '/api/approvals/' + encodeURIComponent(a.id) + '/' + verb, body);
      done();
    } catch (e) {
      out.appendChild(errorBox(e));
    } finally {
      for (const b of buttons) b.disabled = false;
    }
  };
}

// suggestPattern proposes a grant pattern from what the approver sees: the
// first command's first two words and a *, or the URL up to its last /.
function suggestPattern(match, view) {
  if (match === 'command') {
    const words = String((view.commands || [])[0] || '').trim().split(/\s+/).filter(Boolean);
    if (!words.length) return '';
    return words.length > 2 ? words.slice(0, 2).join(' ') + ' *' : words.join(' ');
  }
  if (match === 'url_prefix' && view.url) {
    try { const u = new URL(view.url); return u.origin + u.pathname.slice(0, u.pathname.lastIndexOf('/') + 1); } catch (_) { return ''; }
  }
  return '';
}

// approvalCard is one held call (kind call): what it would do and the four
// decisions. Grant, edit and reject open a panel each; only one is open.
function approvalCard(a, done) {
  const view = a.view || {};
  const out = el('div', { class: 'outcome' });
  const reason = el('input', { class: 'reason', placeholder: 'reason (recorded in the audit)', 'aria-label': 'reason', maxlength: '2000' });
  const args = prettyArgs(a.args);
  const panels = el('div', { class: 'panels' });
  const card = el('article', { class: 'card approval', 'data-approval': a.id, 'data-kind': 'call' });
  const post = decision(a, out, card, done);
  const open = (panel) => (ev) => {
    const was = !panel.hidden;
    for (const p of panels.children) p.hidden = true;
    panel.hidden = was;
    for (const b of card.querySelectorAll('button[aria-expanded]')) b.setAttribute('aria-expanded', 'false');
    ev.currentTarget.setAttribute('aria-expanded', String(!panel.hidden));
    if (!panel.hidden) { const f = panel.querySelector('textarea, input, select'); if (f) f.focus(); }
  };

  // Approve with a grant: later calls the grant matches run without asking.
  const scope = el('select', { class: 'grant-scope', 'aria-label': 'grant scope' }, ['run', 'project', 'team'].map((s) => el('option', { value: s }, s)));
  const match = el('select', { class: 'grant-match', 'aria-label': 'grant match' },
    el('option', { value: 'exact' }, 'exact (these arguments)'), el('option', { value: 'command' }, 'command (words, final *)'), el('option', { value: 'url_prefix' }, 'url_prefix'));
  const pattern = el('input', { class: 'grant-pattern', 'aria-label': 'grant pattern', placeholder: 'pattern', maxlength: '2000', disabled: true });
  const ttl = el('input', { class: 'grant-ttl', 'aria-label': 'grant ttl', value: '1h', size: '6' });
  if (view.commands && view.commands.length) match.value = 'command';
  else if (view.url) match.value = 'url_prefix';
  const syncPattern = () => { pattern.disabled = match.value === 'exact'; pattern.value = suggestPattern(match.value, view); };
  match.addEventListener('change', syncPattern);
  syncPattern();
  const grantPanel = el('form', { class: 'panel grant', hidden: true, onsubmit: (ev) => {
    ev.preventDefault();
    const grant = { scope: scope.value, match: match.value, ttl: ttl.value.trim() || '1h' };
    if (match.value !== 'exact') grant.pattern = pattern.value.trim();
    post('approve', { reason: reason.value, grant });
  } },
  el('div', { class: 'row' }, el('label', {}, 'scope', scope), el('label', {}, 'match', match), el('label', { class: 'grow' }, 'pattern', pattern), el('label', {}, 'ttl', ttl)),
  el('p', { class: 'muted' }, 'Covers this owner\'s later calls of ', el('code', {}, a.tool || ''), ' that match, within the scope, until it expires or is revoked. Deny rules, egress and DLP still apply.'),
  el('button', { type: 'submit', class: 'grant-submit' }, 'Approve and grant'));

  // Edit: the arguments as JSON; the edited call goes through the whole gate again.
  const editArgs = el('textarea', { class: 'edit-args', rows: Math.min(16, args.split('\n').length + 1), spellcheck: 'false', 'aria-label': 'edited arguments (JSON)' });
  editArgs.value = args;
  const editPanel = el('form', { class: 'panel edit', hidden: true, onsubmit: (ev) => {
    ev.preventDefault();
    clear(out);
    // JSON.parse only checks the text is one JSON value; the text itself is sent,
    // so numbers keep the digits the human typed (a JS number would round them).
    // Whether it is an acceptable object is the API's call (its 400 is shown).
    try { JSON.parse(editArgs.value); } catch (e) { out.appendChild(errorBox('not valid JSON: ' + e.message)); return; }
    post('edit', new RawBody('{"args":' + editArgs.value + ',"reason":' + JSON.stringify(reason.value) + '}'));
  } },
  el('label', { class: 'block' }, 'arguments (JSON)', editArgs),
  el('p', { class: 'muted' }, 'The edited call is judged by every layer of the gate again and the model is told a human edited it.'),
  el('button', { type: 'submit', class: 'edit-submit' }, 'Run the edited call'));

  // Reject with feedback: the agent reads the reason as a human reviewer's.
  const feedback = el('textarea', { class: 'feedback', rows: 2, required: true, maxlength: '2000', placeholder: 'what the agent should do instead', 'aria-label': 'feedback to the agent' });
  const rejectPanel = el('form', { class: 'panel reject', hidden: true, onsubmit: (ev) => { ev.preventDefault(); post('deny', { reason: feedback.value }); } },
    el('label', { class: 'block' }, 'feedback to the agent', feedback),
    el('button', { type: 'submit', class: 'deny danger' }, 'Reject'));
  add(panels, grantPanel, editPanel, rejectPanel);

  return add(card,
    el('h3', {}, el('code', {}, a.tool || ''), ' ', badge(a.tier || 'restricted'), ' ', el('span', { class: 'muted', 'data-expires': a.expires_at }, timeLeft(a.expires_at))),
    el('dl', { class: 'meta' },
      el('dt', {}, 'agent'), el('dd', {}, a.agent),
      el('dt', {}, 'run'), el('dd', {}, el('a', { href: '/app/runs/' + encodeURIComponent(a.run_id) }, a.run_id)),
      a.team ? [el('dt', {}, 'team'), el('dd', {}, a.team)] : null,
      a.why ? [el('dt', {}, 'why'), el('dd', { class: 'why' }, a.why)] : null,
      view.url ? [el('dt', {}, 'URL'), el('dd', {}, el('code', { class: 'url' }, view.url))] : null,
      (view.commands || []).length ? [el('dt', {}, 'commands'), el('dd', {}, el('ol', { class: 'commands' }, view.commands.map((c) => el('li', {}, el('code', {}, c)))))] : null,
      view.parse_error ? [el('dt', {}, 'parse'), el('dd', { class: 'error' }, view.parse_error)] : null,
      el('dt', {}, 'arguments'), el('dd', {}, el('pre', { class: 'args' }, args)),
      a.args_hash ? [el('dt', {}, 'sha256'), el('dd', {}, el('code', {}, a.args_hash))] : null),
    el('div', { class: 'row actions' }, reason,
      el('button', { type: 'button', class: 'approve', onclick: () => post('approve', { reason: reason.value }) }, 'Approve'),
      el('button', { type: 'button', class: 'secondary open-grant', 'aria-expanded': 'false', onclick: open(grantPanel) }, 'Approve with grant…'),
      el('button', { type: 'button', class: 'secondary open-edit', 'aria-expanded': 'false', onclick: open(editPanel) }, 'Edit…'),
      el('button', { type: 'button', class: 'secondary danger-outline open-reject', 'aria-expanded': 'false', onclick: open(rejectPanel) }, 'Reject…')),
    panels, out);
}

// questionCard is a question an agent asked with ask_user: its choices as
// buttons, and a free answer when it has no choices or allows another answer.
function questionCard(a, done) {
  const view = a.view || {};
  const choices = Array.isArray(view.choices) ? view.choices : [];
  const free = !choices.length || !!view.allow_other;
  const out = el('div', { class: 'outcome' });
  const card = el('article', { class: 'card approval question', 'data-approval': a.id, 'data-kind': 'question' });
  const post = decision(a, out, card, done);
  const answer = el('textarea', { class: 'answer', rows: 2, maxlength: '2000', 'aria-label': 'your answer', placeholder: choices.length ? 'another answer' : 'your answer' });
  return add(card,
    el('h3', {}, 'Question ', badge('question', 'pending'), ' ', el('span', { class: 'muted', 'data-expires': a.expires_at }, timeLeft(a.expires_at))),
    el('p', { class: 'question-text pre' }, view.question || a.why || ''),
    el('dl', { class: 'meta' },
      el('dt', {}, 'agent'), el('dd', {}, a.agent),
      el('dt', {}, 'run'), el('dd', {}, el('a', { href: '/app/runs/' + encodeURIComponent(a.run_id) }, a.run_id)),
      a.team ? [el('dt', {}, 'team'), el('dd', {}, a.team)] : null),
    choices.length ? el('div', { class: 'row choices', role: 'group', 'aria-label': 'choices' },
      choices.map((c, i) => el('button', { type: 'button', class: 'choice', 'data-index': i, onclick: () => post('answer', { answer: String(c) }) }, String(c)))) : null,
    free ? el('form', { class: 'row free-answer', onsubmit: (ev) => { ev.preventDefault(); post('answer', { answer: answer.value }); } },
      answer, el('button', { type: 'submit', class: 'answer-submit' }, 'Answer')) : null,
    out);
}

// loadGrants lists the scoped grants the principal may see, with Revoke (active
// or suspended) and Confirm (suspended by a policy change) buttons.
async function loadGrants(box) {
  let data;
  try { data = await api('GET', '/api/grants'); } catch (e) {
    clear(box).appendChild(el('h2', {}, 'Grants'));
    box.appendChild(e.status === 403 ? el('p', { class: 'muted' }, 'Grants are listed to approvers.') : errorBox(e));
    return;
  }
  const rows = (data && data.grants) || [];
  const tbody = el('tbody');
  for (const g of rows) {
    const out = el('div');
    const act = (verb) => async () => {
      clear(out);
      try { await api('POST', '/api/grants/' + encodeURIComponent(g.id) + '/' + verb); loadGrants(box); } catch (e) { out.appendChild(errorBox(e)); }
    };
    const live = g.status === 'active' || g.status === 'suspended';
    tbody.appendChild(el('tr', { 'data-grant': g.id, 'data-status': g.status },
      el('td', { 'data-label': 'status' }, badge(g.status)),
      el('td', { 'data-label': 'tool' }, el('code', {}, g.tool || '')),
      el('td', { 'data-label': 'scope' }, (g.scope || '') + (g.scope_id ? ' ' + g.scope_id : '')),
      el('td', { 'data-label': 'match' }, g.match || '', g.pattern ? [' ', el('code', { class: 'pattern' }, g.pattern)] : null),
      el('td', { 'data-label': 'expires' }, g.status === 'active' ? el('span', { 'data-expires': g.expires_at }, timeLeft(g.expires_at)) : fmtTime(g.expires_at)),
      el('td', { 'data-label': 'by' }, g.created_by || g.granted_by || g.decided_by || '', g.owner ? el('div', { class: 'muted' }, 'for ' + g.owner) : null),
      el('td', { 'data-label': 'policy' }, el('code', { class: 'muted' }, g.policy_revision || '')),
      el('td', { 'data-label': '' },
        g.status === 'suspended' ? el('button', { type: 'button', class: 'confirm', onclick: act('confirm') }, 'Confirm') : null, ' ',
        live ? el('button', { type: 'button', class: 'revoke danger', onclick: act('revoke') }, 'Revoke') : null, out)));
  }
  if (!rows.length) tbody.appendChild(el('tr', {}, el('td', { colspan: 8, class: 'muted' }, 'No grants.')));
  add(clear(box), el('h2', {}, 'Grants'),
    el('p', { class: 'muted' }, 'A suspended grant was made under an older permissions.yaml: it matches nothing until an approver confirms it for the current one.'),
    scroller(el('table', { class: 'grid stack', id: 'grants-table' },
      el('thead', {}, el('tr', {}, ['status', 'tool', 'scope', 'match', 'expires', 'by', 'policy', ''].map((h) => el('th', {}, h)))), tbody)));
}

// ---------- audit ----------

async function pageAudit() {
  const m = main();
  const qs = new URLSearchParams(location.search);
  const f = {
    run_id: el('input', { id: 'audit-run', placeholder: 'run id', value: qs.get('run') || '' }),
    agent: el('input', { placeholder: 'agent', value: qs.get('agent') || '' }),
    tool: el('input', { placeholder: 'tool', value: qs.get('tool') || '' }),
    decision: el('select', { 'aria-label': 'decision' }, ['', 'allowed', 'denied', 'error', 'timed_out', 'unknown'].map((d) => el('option', { value: d }, d || 'any decision'))),
    tier: el('select', { 'aria-label': 'tier' }, ['', 'standard', 'elevated', 'restricted'].map((d) => el('option', { value: d }, d || 'any tier'))),
  };
  f.decision.value = qs.get('decision') || '';
  f.tier.value = qs.get('tier') || '';
  const text = el('input', { type: 'search', placeholder: 'search arguments, reason, result' });
  const tbody = el('tbody');
  const err = el('div');
  const pager = el('div', { class: 'pager' });
  let rows = [];
  let befores = [0];
  const draw = () => {
    clear(tbody);
    const t = text.value.toLowerCase();
    for (const r of rows) {
      const args = r.args ? JSON.stringify(r.args) : (r.summary || '');
      if (t && ![args, r.deny_reason, r.result, r.error].some((x) => (x || '').toLowerCase().includes(t))) continue;
      tbody.appendChild(el('tr', { 'data-audit': r.id },
        el('td', {}, fmtTime(r.at)), el('td', {}, el('a', { href: '/app/runs/' + encodeURIComponent(r.run_id) }, r.run_id.slice(0, 8))),
        el('td', {}, r.agent), el('td', {}, r.tool), el('td', {}, badge(r.tier)),
        el('td', {}, badge(r.decision)), el('td', {}, r.deny_layer ? r.deny_layer + ': ' + (r.deny_reason || '') : (r.approved_by ? 'approved by ' + r.approved_by : (r.error || ''))),
        el('td', { class: 'clip' }, args), el('td', {}, String(r.duration_ms))));
    }
    if (!tbody.firstChild) tbody.appendChild(el('tr', {}, el('td', { colspan: 9, class: 'muted' }, 'No audit rows.')));
  };
  const load = async () => {
    clear(err);
    const q = new URLSearchParams({ limit: '100' });
    for (const [k, x] of Object.entries(f)) if (x.value.trim()) q.set(k, x.value.trim());
    const before = befores[befores.length - 1];
    if (before) q.set('before', String(before));
    let data = { audit: [], next_before: 0 };
    try { data = await api('GET', '/api/audit?' + q); } catch (e) { add(err, errorBox(e)); }
    rows = data.audit || [];
    draw();
    clear(pager);
    if (befores.length > 1) add(pager, el('button', { type: 'button', onclick: () => { befores.pop(); load(); } }, '← newer'));
    if (data.next_before) add(pager, el('button', { type: 'button', onclick: () => { befores.push(data.next_before); load(); } }, 'older →'));
  };
  const sync = () => {
    const q = new URLSearchParams();
    for (const [k, x] of Object.entries(f)) if (x.value.trim()) q.set(k === 'run_id' ? 'run' : k, x.value.trim());
    history.replaceState(null, '', '/app/audit' + (q.toString() ? '?' + q : ''));
  };
  for (const x of Object.values(f)) x.addEventListener('change', () => { befores = [0]; sync(); load(); });
  text.addEventListener('input', draw);
  add(m, el('section', { class: 'card' }, el('h1', {}, 'Audit'),
    el('p', { class: 'muted' }, 'Every gated tool call of the runs you may read, newest first: its tier, the decision and the layer that refused it.'),
    el('div', { class: 'filters' }, Object.values(f), text), err,
    scroller(el('table', { class: 'grid', id: 'audit' }, el('thead', {}, el('tr', {}, ['at', 'run', 'agent', 'tool', 'tier', 'decision', 'why', 'arguments', 'ms'].map((h) => el('th', {}, h)))), tbody)), pager));
  await load();
}

// ---------- leases ----------

async function pageLeases() {
  const m = main();
  const box = el('section', { class: 'card' }, el('h1', {}, 'GPU leases'));
  m.appendChild(box);
  let data;
  try { data = await api('GET', '/api/leases'); } catch (e) { box.appendChild(errorBox(e)); return; }
  if (!data.services.length) { box.appendChild(el('p', { class: 'muted' }, 'This deployment declares no GPU services.')); return; }
  box.appendChild(scroller(el('table', { class: 'grid', id: 'leases' },
    el('thead', {}, el('tr', {}, ['service', 'capacity', 'ttl', 'holders', 'waiters', 'last token', 'idle since'].map((h) => el('th', {}, h)))),
    el('tbody', {}, data.services.map((s) => el('tr', {},
      el('td', {}, s.service), el('td', {}, String(s.capacity)), el('td', {}, s.ttl),
      el('td', {}, (s.holders || []).map((h) => el('div', {}, JSON.stringify(h)))),
      el('td', {}, (s.waiters || []).map((w) => el('div', {}, JSON.stringify(w)))),
      el('td', {}, String(s.last_token)), el('td', {}, s.idle_since ? fmtTime(s.idle_since) : (s.stopping ? 'stopping' : ''))))))));
}

// ---------- triggers: schedules and inbound webhooks ----------

const OVERLAPS = ['skip', 'queue_one', 'cancel_previous', 'allow_all'];
const CATCH_UPS = ['none', 'last', 'all'];

// templateFields is a template picker with an input per variable the picked
// template uses; vars() reads them, and mapping (hooks) labels them as JSON
// pointers into the delivery instead of values.
async function templateFields(idPrefix, mapping) {
  let names = [];
  try { names = (await api('GET', '/api/templates')).templates || []; } catch (_) { /* shown on submit */ }
  const tmpl = el('select', { id: idPrefix + '-template', 'aria-label': 'template' }, names.map((n) => el('option', { value: n }, n)));
  if (names.includes('demo')) tmpl.value = 'demo';
  const box = el('div', { class: 'vars' });
  const load = async () => {
    clear(box);
    if (!tmpl.value) return;
    try {
      const info = await api('GET', '/api/templates/' + encodeURIComponent(tmpl.value));
      for (const v of info.variables) {
        box.appendChild(el('label', {}, mapping ? v + ' ← JSON pointer' : v, el('input', { 'data-var': v, required: true, placeholder: mapping ? '/repository/full_name' : '' })));
      }
    } catch (e) { box.appendChild(errorBox(e)); }
  };
  tmpl.addEventListener('change', load);
  await load();
  const vars = () => Object.fromEntries([...box.querySelectorAll('input[data-var]')].map((i) => [i.getAttribute('data-var'), i.value]));
  return { tmpl, box, vars };
}

async function pageTriggers() {
  const m = main();
  const schedBox = el('section', { class: 'card', id: 'schedules' });
  const hookBox = el('section', { class: 'card', id: 'hooks' });
  add(m, el('section', { class: 'card' }, el('h1', {}, 'Triggers'),
    el('p', { class: 'muted' }, 'Runs that start themselves: on a schedule, or when a signed webhook delivery arrives. Each starts as its owner, through the same checks as a run started by hand.')),
  schedBox, hookBox);
  await Promise.all([schedulesSection(schedBox), hooksSection(hookBox)]);
}

async function schedulesSection(box) {
  const list = el('div');
  const out = el('div', { id: 'schedule-result' });
  const f = await templateFields('schedule', false);
  const name = el('input', { id: 'schedule-name', required: true, maxlength: '200', placeholder: 'nightly report' });
  const cron = el('input', { id: 'schedule-cron', required: true, maxlength: '200', placeholder: '0 6 * * 1-5', value: '0 6 * * *' });
  const tz = el('input', { id: 'schedule-tz', maxlength: '64', placeholder: 'UTC', value: 'UTC' });
  const prompt = el('textarea', { id: 'schedule-prompt', rows: 2, required: true, placeholder: 'what should the team do each time?' });
  const overlap = el('select', { id: 'schedule-overlap', 'aria-label': 'overlap' }, OVERLAPS.map((o) => el('option', { value: o }, o)));
  const catchUp = el('select', { id: 'schedule-catchup', 'aria-label': 'catch-up' }, CATCH_UPS.map((o) => el('option', { value: o }, o)));
  const load = async () => {
    let rows;
    try { rows = (await api('GET', '/api/schedules')).schedules || []; } catch (e) { clear(list).appendChild(errorBox(e)); return; }
    const tbody = el('tbody');
    for (const sc of rows) {
      const act = (verb, method) => async () => {
        try { await api(method || 'POST', '/api/schedules/' + encodeURIComponent(sc.id) + (verb ? '/' + verb : '')); load(); } catch (e) { list.appendChild(errorBox(e)); }
      };
      const fires = el('details', { class: 'fires' }, el('summary', {}, 'fires'));
      fires.addEventListener('toggle', async () => {
        if (!fires.open || fires.dataset.loaded) return;
        fires.dataset.loaded = '1';
        try {
          const fl = (await api('GET', '/api/schedules/' + encodeURIComponent(sc.id) + '/fires')).fires || [];
          add(fires, fl.length ? el('ul', {}, fl.slice(0, 20).map((x) => el('li', { 'data-fire-status': x.status }, fmtTime(x.tick), ' ', badge(x.status),
            x.reason ? ' ' + x.reason : '', x.run_id ? [' ', el('a', { href: '/app/runs/' + encodeURIComponent(x.run_id) }, x.run_id.slice(0, 8))] : null))) : el('p', { class: 'muted' }, 'No tick yet.'));
        } catch (e) { fires.appendChild(errorBox(e)); }
      });
      const next = (sc.next_fires || [])[0];
      tbody.appendChild(el('tr', { 'data-schedule': sc.id, 'data-paused': String(!!sc.paused) },
        el('td', { 'data-label': 'name' }, sc.name, sc.paused ? [' ', badge('paused', 'pending')] : null),
        el('td', { 'data-label': 'when' }, el('code', {}, sc.cron), ' ', el('span', { class: 'muted' }, sc.time_zone || 'UTC')),
        el('td', { 'data-label': 'team' }, sc.template || 'inline team'),
        el('td', { 'data-label': 'next' }, next && !sc.paused ? el('time', { datetime: next.fire_at, title: fmtTime(next.fire_at) }, fmtTime(next.fire_at)) : '—'),
        el('td', { 'data-label': 'last' }, sc.last_status ? [badge(sc.last_status), sc.last_reason ? ' ' + sc.last_reason : '',
          sc.last_run_id ? [' ', el('a', { href: '/app/runs/' + encodeURIComponent(sc.last_run_id) }, sc.last_run_id.slice(0, 8))] : null] : '—', sc.missed ? el('div', { class: 'muted' }, sc.missed + ' missed') : null),
        el('td', { 'data-label': 'policy' }, sc.overlap + ' · catch-up ' + sc.catch_up + (sc.catch_up === 'all' && sc.catch_up_limit ? ' ' + sc.catch_up_limit : '')),
        el('td', { 'data-label': 'owner' }, sc.owner),
        el('td', { 'data-label': '' },
          sc.paused ? el('button', { type: 'button', class: 'resume secondary', onclick: act('resume') }, 'Resume') : el('button', { type: 'button', class: 'pause secondary', onclick: act('pause') }, 'Pause'), ' ',
          el('button', { type: 'button', class: 'delete danger', onclick: act('', 'DELETE') }, 'Delete'), fires)));
    }
    if (!rows.length) tbody.appendChild(el('tr', {}, el('td', { colspan: 8, class: 'muted' }, 'No schedules.')));
    add(clear(list), scroller(el('table', { class: 'grid stack', id: 'schedules-table' }, el('thead', {}, el('tr', {}, ['name', 'when', 'team', 'next', 'last', 'policy', 'owner', ''].map((h) => el('th', {}, h)))), tbody)));
  };
  const form = el('form', { id: 'schedule-form', onsubmit: async (ev) => {
    ev.preventDefault();
    clear(out);
    const body = { name: name.value, cron: cron.value, time_zone: tz.value || 'UTC', template: f.tmpl.value, prompt: prompt.value, variables: f.vars(), overlap: overlap.value, catch_up: catchUp.value };
    try { await api('POST', '/api/schedules', body); form.reset(); cron.value = '0 6 * * *'; tz.value = 'UTC'; load(); } catch (e) { out.appendChild(errorBox(e)); }
  } },
  el('div', { class: 'row' }, el('label', {}, 'name', name), el('label', {}, 'cron', cron), el('label', {}, 'time zone', tz), el('label', {}, 'template', f.tmpl),
    el('label', {}, 'overlap', overlap), el('label', {}, 'catch-up', catchUp)),
  el('label', { class: 'block' }, 'prompt', prompt), f.box,
  el('button', { type: 'submit', id: 'schedule-create' }, 'Create schedule'), out);
  add(box, el('h2', {}, 'Schedules'),
    el('p', { class: 'muted' }, 'A cron expression in a time zone; each tick fires once across every scheduler. Overlap decides what a tick does while the last run still runs; catch-up, what happens to the ticks missed while no scheduler ran (docs/schedules.md).'),
    list, el('details', { class: 'create' }, el('summary', {}, 'New schedule'), form));
  await load();
}

async function hooksSection(box) {
  const list = el('div');
  const out = el('div', { id: 'hook-result' });
  const f = await templateFields('hook', true);
  const name = el('input', { id: 'hook-name', required: true, maxlength: '200', placeholder: 'github pushes' });
  const scheme = el('select', { id: 'hook-scheme', 'aria-label': 'scheme' }, ['github', 'stripe', 'hmac'].map((o) => el('option', { value: o }, o)));
  const prompt = el('textarea', { id: 'hook-prompt', rows: 2, required: true, placeholder: 'review the push to {{.repo}}' });
  // showSecret shows a secret the API answers only once, for the sender's settings.
  const showSecret = (h) => add(clear(out), el('div', { class: 'note secret', id: 'hook-secret' },
    el('strong', {}, 'Secret of ' + h.name + ' (shown this once; put it in the sender now):'), el('pre', {}, h.secret),
    el('div', {}, 'Deliveries go to ', el('code', {}, location.origin + h.url), ' (or the hooks listener, api.hooks.addr).')));
  const load = async () => {
    let rows;
    try { rows = (await api('GET', '/api/hooks')).hooks || []; } catch (e) { clear(list).appendChild(errorBox(e)); return; }
    const tbody = el('tbody');
    for (const h of rows) {
      const act = (verb, method) => async () => {
        try {
          const r = await api(method || 'POST', '/api/hooks/' + encodeURIComponent(h.id) + (verb ? '/' + verb : ''));
          if (r && r.secret) showSecret(r);
          load();
        } catch (e) { list.appendChild(errorBox(e)); }
      };
      const deliveries = el('details', { class: 'deliveries' }, el('summary', {}, 'deliveries'));
      deliveries.addEventListener('toggle', async () => {
        if (!deliveries.open || deliveries.dataset.loaded) return;
        deliveries.dataset.loaded = '1';
        try {
          const ds = (await api('GET', '/api/hooks/' + encodeURIComponent(h.id) + '/deliveries')).deliveries || [];
          add(deliveries, ds.length ? el('ul', {}, ds.slice(0, 20).map((d) => el('li', { 'data-outcome': d.outcome }, fmtTime(d.received_at), ' ', badge(d.outcome === 'accepted' ? 'accepted' : 'refused', d.outcome === 'accepted' ? 'completed' : 'failed'),
            d.reason ? ' ' + d.reason : '', d.detail ? el('span', { class: 'muted' }, ' ' + d.detail) : '',
            d.run_id ? [' ', el('a', { href: '/app/runs/' + encodeURIComponent(d.run_id) }, d.run_id.slice(0, 8))] : null))) : el('p', { class: 'muted' }, 'No delivery yet.'));
        } catch (e) { deliveries.appendChild(errorBox(e)); }
      });
      tbody.appendChild(el('tr', { 'data-hook': h.id },
        el('td', { 'data-label': 'name' }, h.name, h.enabled ? null : [' ', badge('disabled', 'failed')]),
        el('td', { 'data-label': 'scheme' }, h.scheme),
        el('td', { 'data-label': 'url' }, el('code', { class: 'url' }, h.url)),
        el('td', { 'data-label': 'team' }, h.template || 'inline team'),
        el('td', { 'data-label': 'variables' }, Object.entries(h.variables || {}).map(([k, v]) => el('div', {}, k + ' ← ', el('code', {}, v)))),
        el('td', { 'data-label': 'created' }, timeAgo(h.created_at), h.rotated_at ? el('div', { class: 'muted' }, 'secret rotated ' + relTime(h.rotated_at)) : null),
        el('td', { 'data-label': '' }, el('button', { type: 'button', class: 'rotate secondary', onclick: act('rotate') }, 'Rotate secret'), ' ',
          el('button', { type: 'button', class: 'delete danger', onclick: act('', 'DELETE') }, 'Delete'), deliveries)));
    }
    if (!rows.length) tbody.appendChild(el('tr', {}, el('td', { colspan: 7, class: 'muted' }, 'No webhooks.')));
    add(clear(list), scroller(el('table', { class: 'grid stack', id: 'hooks-table' }, el('thead', {}, el('tr', {}, ['name', 'scheme', 'url', 'team', 'variables', 'created', ''].map((x) => el('th', {}, x)))), tbody)));
  };
  const form = el('form', { id: 'hook-form', onsubmit: async (ev) => {
    ev.preventDefault();
    clear(out);
    try {
      const h = await api('POST', '/api/hooks', { name: name.value, scheme: scheme.value, template: f.tmpl.value, prompt: prompt.value, variables: f.vars() });
      form.reset();
      showSecret(h);
      load();
    } catch (e) { out.appendChild(errorBox(e)); }
  } },
  el('div', { class: 'row' }, el('label', {}, 'name', name), el('label', {}, 'scheme', scheme), el('label', {}, 'template', f.tmpl)),
  el('label', { class: 'block' }, 'prompt ({{.variable}} placeholders only)', prompt), f.box,
  el('button', { type: 'submit', id: 'hook-create' }, 'Create webhook'));
  add(box, el('h2', {}, 'Inbound webhooks'),
    el('p', { class: 'muted' }, 'A delivery signed with the hook\'s secret (GitHub, Stripe or a generic HMAC scheme) starts a run, its variables taken from the payload by JSON pointers; a replayed delivery starts nothing (docs/hooks.md).'),
    list, out, el('details', { class: 'create' }, el('summary', {}, 'New webhook'), form));
  await load();
}

// ---------- fleet ----------

// pageFleet is the fleet at a glance (GET /api/fleet): its workers, queues,
// the runs in flight the viewer may see, the GPU leases, the limits in force,
// and the way into the queue monitor (asynqmon) for an admin.
async function pageFleet() {
  const m = main();
  const box = el('section', { class: 'card', id: 'fleet' }, el('h1', {}, 'Fleet'));
  const err = el('div');
  const body = el('div');
  const stamp = el('span', { class: 'muted', id: 'fleet-stamp' });
  add(m, add(box, el('p', { class: 'muted' }, 'Workers, queues, runs in flight, GPU leases and the limits in force; refreshed every 5 s. ', stamp), err, body));
  const table = (id, heads, rows, empty) => scroller(el('table', { class: 'grid', id }, el('thead', {}, el('tr', {}, heads.map((h) => el('th', {}, h)))),
    el('tbody', {}, rows.length ? rows : el('tr', {}, el('td', { colspan: heads.length, class: 'muted' }, empty)))));
  async function load() {
    let f;
    try { f = await api('GET', '/api/fleet'); } catch (e) { clear(err).appendChild(errorBox(e)); return; }
    clear(err);
    stamp.textContent = 'as of ' + new Date().toLocaleTimeString();
    const runs = f.runs || {};
    const mon = f.monitoring || {};
    const monOut = el('span');
    add(clear(body),
      el('h2', {}, 'Runs in flight'),
      el('p', { id: 'fleet-runs' }, ['queued', 'running', 'waiting'].map((k) => el('a', { class: 'stat', href: '/app/runs?status=' + k, 'data-stat': k }, el('strong', {}, String(runs[k] || 0)), ' ' + k))),
      el('h2', {}, 'Workers ', el('span', { class: 'muted' }, String((f.workers || []).length))),
      table('fleet-workers', ['worker', 'host', 'pid', 'status', 'started', 'busy', 'queues'], (f.workers || []).map((w) => el('tr', { 'data-worker': w.id },
        el('td', {}, el('code', { title: w.id }, String(w.id || '').slice(0, 12))), el('td', {}, w.host || ''), el('td', {}, String(w.pid || '')),
        el('td', {}, badge(w.status || 'unknown')), el('td', {}, w.started ? timeAgo(w.started) : ''),
        el('td', {}, (w.active || 0) + ' / ' + (w.concurrency || 0)),
        el('td', {}, Object.entries(w.queues || {}).map(([q, p]) => q + ':' + p).join(' ')))), 'No worker is running: runs wait in the queues.'),
      el('h2', {}, 'Queues'),
      table('fleet-queues', ['queue', 'pending', 'active', 'scheduled', 'retry', 'archived', 'latency', 'today done / failed', ''], (f.queues || []).map((q) => el('tr', { 'data-queue': q.name },
        el('td', {}, el('code', {}, q.name)), el('td', {}, String(q.pending)), el('td', {}, String(q.active)), el('td', {}, String(q.scheduled)),
        el('td', { class: q.retry ? 'bad' : '' }, String(q.retry)), el('td', { class: q.archived ? 'bad' : '' }, String(q.archived)),
        el('td', {}, fmtDur(q.latency_ms || 0)), el('td', {}, (q.processed || 0) + ' / ' + (q.failed || 0)),
        el('td', {}, q.paused ? badge('paused', 'pending') : ''))), 'No queue has had a task yet.'),
      el('h2', {}, 'GPU leases'),
      table('fleet-leases', ['service', 'held', 'waiting'], (f.leases || []).map((l) => el('tr', { 'data-service': l.service },
        el('td', {}, l.service), el('td', {}, (l.held || 0) + ' / ' + (l.capacity || 0)), el('td', {}, String(l.waiting || 0)))), 'No GPU service is declared.'),
      el('h2', {}, 'Limits'),
      table('fleet-limits', ['limit', 'value', 'why'], (f.limits || []).map((l) => el('tr', { 'data-limit': l.name },
        el('td', {}, el('code', {}, l.name)), el('td', {}, String(l.value)), el('td', { class: 'muted' }, l.why || ''))), 'None reported.'),
      el('h2', {}, 'Queue monitor'),
      mon.available ? el('p', {}, el('button', { type: 'button', id: 'open-monitor', class: 'secondary', onclick: async () => {
        clear(monOut);
        // A navigation cannot send the bearer token: the API sets a short-lived
        // cookie that only /monitoring reads, for an admin token.
        // The only request that accepts a cookie: api() omits credentials, so
        // this one is made here, with the bearer token as every other.
        try {
          const resp = await fetch(mon.session || '/api/monitoring/session', { method: 'POST', credentials: 'same-origin', cache: 'no-store',
            headers: Object.assign({ 'Accept': 'application/json', 'Content-Type': 'application/json' }, authHeaders()) });
          if (resp.status === 403) throw new Error('The queue monitor is for admin tokens.');
          if (!resp.ok) throw new APIError(resp.status, 'HTTP ' + resp.status + ': ' + ((await resp.json().catch(() => ({}))).error || 'the monitor session was refused'));
          window.open(mon.path || '/monitoring/', '_blank', 'noopener');
        } catch (e) { monOut.appendChild(errorBox(e)); }
      } }, 'Open asynqmon'), ' ', el('span', { class: 'muted' }, mon.read_only ? 'read-only' : 'can pause, delete and retry tasks'), monOut)
        : el('p', { class: 'muted' }, 'asynqmon is not mounted on this API process.'));
  }
  await load();
  const iv = setInterval(() => { if (!document.hidden) load(); }, 5000);
  onLeave(() => clearInterval(iv));
}

// ---------- tools ----------

async function pageTools() {
  const m = main();
  const box = el('section', { class: 'card' }, el('h1', {}, 'Tool catalog'));
  m.appendChild(box);
  let data;
  try { data = await api('GET', '/api/tools/mcp-schemas'); } catch (e) { box.appendChild(errorBox(e)); return; }
  const tiers = [...new Set(data.tools.map((t) => t.tier))].sort();
  const tierSel = el('select', {}, el('option', { value: '' }, 'any tier'), tiers.map((t) => el('option', { value: t }, t)));
  const q = el('input', { type: 'search', placeholder: 'search tools' });
  const list = el('div', { id: 'tools' });
  const draw = () => {
    clear(list);
    const groups = new Map();
    for (const t of data.tools) {
      if (tierSel.value && t.tier !== tierSel.value) continue;
      if (q.value && !(t.name + ' ' + t.description).toLowerCase().includes(q.value.toLowerCase())) continue;
      if (!groups.has(t.group)) groups.set(t.group, []);
      groups.get(t.group).push(t);
    }
    for (const [g, ts] of [...groups].sort()) {
      list.appendChild(el('div', { class: 'group' }, el('h2', {}, g, ' ', el('span', { class: 'muted' }, ts.length + ' tools')),
        scroller(el('table', { class: 'grid' }, el('tbody', {}, ts.map((t) => el('tr', {},
          el('td', {}, el('code', {}, t.name)), el('td', {}, badge(t.tier)), el('td', {}, t.outbound ? 'outbound' : ''),
          el('td', {}, t.description, el('details', {}, el('summary', {}, 'parameters'), el('pre', {}, JSON.stringify(t.parameters, null, 2)))))))))));
    }
  };
  tierSel.addEventListener('change', draw);
  q.addEventListener('input', draw);
  add(box, el('p', { class: 'muted' }, data.count + ' tools'), el('div', { class: 'filters' }, tierSel, q), list);
  draw();
}

// ---------- workspace ----------

const MEDIA_PREVIEW_MAX = 16 << 20;

// sniff names the media type of bytes it recognises (never SVG or HTML: those
// can carry script); null for anything else.
function sniff(b) {
  const at = (o, ...xs) => xs.every((x, i) => b[o + i] === x);
  const ascii = (o, s) => [...s].every((ch, i) => b[o + i] === ch.charCodeAt(0));
  if (at(0, 0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a)) return 'image/png';
  if (at(0, 0xff, 0xd8, 0xff)) return 'image/jpeg';
  if (ascii(0, 'GIF87a') || ascii(0, 'GIF89a')) return 'image/gif';
  if (ascii(0, 'RIFF') && ascii(8, 'WEBP')) return 'image/webp';
  if (ascii(4, 'ftyp')) return 'video/mp4';
  if (at(0, 0x1a, 0x45, 0xdf, 0xa3)) return 'video/webm';
  return null;
}

async function fetchFile(id, path) {
  const url = '/api/runs/' + encodeURIComponent(id) + '/file?path=' + encodeURIComponent(path);
  const resp = await fetch(url, { headers: authHeaders(), credentials: 'omit', cache: 'no-store' });
  if (!resp.ok) throw new Error('HTTP ' + resp.status);
  return new Uint8Array(await resp.arrayBuffer());
}

async function download(id, path) {
  // An opaque type: the browser saves it, it does not render it here.
  saveBlob(new Blob([await fetchFile(id, path)], { type: 'application/octet-stream' }), path.split('/').pop());
}

// saveBlob hands bytes to the browser as a download named name.
function saveBlob(blob, name) {
  const url = URL.createObjectURL(blob);
  const a = el('a', { href: url, download: name });
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60000);
}

async function preview(id, f, box) {
  clear(box);
  if (f.size > MEDIA_PREVIEW_MAX) { box.appendChild(el('span', { class: 'muted' }, 'too large to preview')); return; }
  const bytes = await fetchFile(id, f.path);
  const type = sniff(bytes);
  if (!type) { box.appendChild(el('span', { class: 'muted not-media' }, 'not an image or video (by its bytes): download it')); return; }
  const url = URL.createObjectURL(new Blob([bytes], { type }));
  box.appendChild(type.startsWith('image/') ? el('img', { src: url, alt: f.path, class: 'media' }) : el('video', { src: url, controls: true, class: 'media' }));
}

const MEDIA_NAME = /\.(png|jpe?g|gif|webp|mp4|webm|mov)$/i;

async function pageFiles(id) {
  const m = main();
  const box = el('section', { class: 'card' }, el('h1', {}, 'Workspace of run ', el('a', { href: '/app/runs/' + encodeURIComponent(id) }, el('code', {}, id))),
    el('p', { class: 'muted' }, 'Read-only. Files are downloads; pictures and videos are shown once their bytes are recognised.'));
  m.appendChild(box);
  let data;
  try { data = await api('GET', '/api/runs/' + encodeURIComponent(id) + '/files'); } catch (e) { box.appendChild(errorBox(e)); return; }
  if (!data.files.length) { box.appendChild(el('p', { class: 'muted' }, 'The workspace is empty.')); return; }
  const tbody = el('tbody');
  let previews = 0;
  for (const f of data.files) {
    const pv = el('div', { class: 'preview' });
    const err = el('span');
    tbody.appendChild(el('tr', { 'data-file': f.path },
      el('td', {}, el('code', { class: 'path' }, f.path)), el('td', {}, fmtSize(f.size)), el('td', {}, fmtTime(f.modified)),
      el('td', {}, el('button', { type: 'button', class: 'download', onclick: () => download(id, f.path).catch((e) => err.appendChild(errorBox(e))) }, 'Download'), ' ',
        el('button', { type: 'button', class: 'link', onclick: () => preview(id, f, pv).catch((e) => err.appendChild(errorBox(e))) }, 'Preview'), err, pv)));
    if (MEDIA_NAME.test(f.path) && previews++ < 12) preview(id, f, pv).catch(() => {});
  }
  add(box, scroller(el('table', { class: 'grid', id: 'files' }, el('thead', {}, el('tr', {}, ['path', 'size', 'modified', ''].map((h) => el('th', {}, h)))), tbody)),
    data.truncated ? el('p', { class: 'muted' }, 'Only the first files are listed.') : null);
}

// ---------- routing ----------

let leaveHooks = [];
function onLeave(fn) { leaveHooks.push(fn); }

// navigate moves between Studio pages without a reload, so the streams of the
// page left are closed and the token stays in this tab.
function navigate(path) {
  history.pushState(null, '', path);
  route();
}

function route() {
  for (const fn of leaveHooks) { try { fn(); } catch (_) { /* ignore */ } }
  leaveHooks = [];
  pageRoot = clear(document.getElementById('main')).appendChild(el('div', { class: 'page' }));
  if (token() === null) { setInboxCount(0); signIn(); return; }
  document.getElementById('signout').hidden = false;
  startInboxPoll();
  const p = location.pathname.replace(/\/+$/, '');
  let page = 'runs';
  let id = '';
  let mt;
  if ((mt = p.match(/^\/app\/runs\/([0-9a-fA-F-]{36})\/files$/))) { page = 'files'; id = mt[1]; }
  else if ((mt = p.match(/^\/app\/runs\/([0-9a-fA-F-]{36})$/))) { page = 'run'; id = mt[1]; }
  // /app/approvals is the inbox's former address (links and bookmarks to it).
  else if (p === '/app/inbox' || p === '/app/approvals') page = 'inbox';
  else if (p === '/app/audit') page = 'audit';
  else if (p === '/app/leases') page = 'leases';
  else if (p === '/app/tools') page = 'tools';
  else if (p === '/app/fleet') page = 'fleet';
  else if (p === '/app/triggers') page = 'triggers';
  document.body.setAttribute('data-page', page);
  for (const a of document.querySelectorAll('#nav a')) a.classList.toggle('active', a.getAttribute('data-nav') === (page === 'run' || page === 'files' ? 'runs' : page));
  const pages = { runs: pageRuns, run: pageRun, files: pageFiles, inbox: pageInbox, audit: pageAudit, leases: pageLeases, tools: pageTools, fleet: pageFleet, triggers: pageTriggers };
  document.title = page + ' · Aetherium Studio';
  pages[page](id).catch((e) => { if (!(e instanceof APIError && e.status === 401)) main().appendChild(errorBox(e)); });
}

document.addEventListener('DOMContentLoaded', () => {
  takeURLToken();
  document.getElementById('signout').addEventListener('click', () => { sessionStorage.removeItem(TOKEN_KEY); route(); });
  // In-app links navigate without a reload.
  document.addEventListener('click', (ev) => {
    const a = ev.target.closest && ev.target.closest('a[href^="/app"]');
    if (!a || ev.ctrlKey || ev.metaKey || ev.shiftKey || a.hasAttribute('download')) return;
    ev.preventDefault();
    navigate(a.getAttribute('href'));
  });
  window.addEventListener('popstate', route);
  route();
});
