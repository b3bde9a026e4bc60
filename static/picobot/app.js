/* PicoBot WebUI — DOM rendering and input (the protocol rules live in protocol.js).
 *
 * Rendering is keyed: every history row, pending message and live turn keeps its element, so a
 * snapshot only touches what changed and an expanded "Thinking…" stays expanded while text
 * streams in. Untrusted text only ever goes through textContent.
 */
(function () {
  'use strict';

  const root = document.getElementById('picobot');
  if (!root) return; // pages without the chat (login) load no state
  const { ChatStore, Connection, errorText } = window.PicoBot;

  const $ = (sel) => root.querySelector(sel);
  const ui = {
    status: $('[data-testid="connection-status"]'),
    offline: $('[data-testid="offline-badge"]'),
    provider: $('[data-testid="provider"]'),
    user: $('[data-testid="user"]'),
    title: $('[data-testid="dialog-title"]'),
    sessions: $('[data-testid="session-list"]'),
    newDialog: $('[data-testid="new-dialog"]'),
    sidebarToggle: $('[data-testid="sidebar-toggle"]'),
    scroller: $('[data-testid="messages"]'),
    list: $('[data-testid="message-list"]'),
    empty: $('[data-testid="empty"]'),
    older: $('[data-testid="load-older"]'),
    form: $('[data-testid="composer-form"]'),
    composer: $('[data-testid="composer"]'),
    send: $('[data-testid="send"]'),
    stop: $('[data-testid="stop"]'),
    toasts: $('[data-testid="toasts"]'),
  };
  const LOGIN_URL = root.dataset.loginUrl || '/login/';
  const PHASES = { queued: 'Queued…', compacting: 'Compacting history…', reasoning: 'Thinking…',
    responding: 'Writing…', acting: 'Running tools…', finalizing: 'Finalizing…' };
  const TOOL_ICONS = { running: '◌', completed: '✓', failed: '✗', cancelled: '–' };

  const store = new ChatStore();
  const seenQueue = new Map(); // turn_id → highest revision rendered, flushed after paint
  let renderQueued = false;
  let pendingScroll = { bottom: false, prepended: false };

  // --- small DOM helpers ----------------------------------------------------------------------

  /** Create an element; `attrs` keys starting with "data-"/"aria-" become attributes. */
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === 'text') el.textContent = v;
      else if (k === 'className') el.className = v;
      else el.setAttribute(k, v === true ? '' : v);
    }
    for (const c of children) if (c !== null && c !== undefined) el.append(c);
    return el;
  }

  function truncate(text, n) { text = String(text ?? ''); return text.length > n ? text.slice(0, n - 1) + '…' : text; }

  function argsText(args) {
    if (args === null || args === undefined) return '';
    if (typeof args === 'string') return args;
    try { return JSON.stringify(args); } catch (e) { return String(args); }
  }

  function nameOf(x) { return typeof x === 'string' ? x : (x && (x.username || x.name || x.id)) || ''; }

  function relativeTime(ms) {
    if (!ms) return '';
    const s = (Date.now() - ms) / 1000;
    if (s < 60) return 'just now';
    if (s < 3600) return `${Math.floor(s / 60)} min ago`;
    if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
    return new Date(ms).toLocaleDateString();
  }

  /** Assistant Markdown through markdown.js (sanitised there); plain text when it is missing.
   *  `streaming`: the text may end inside an unfinished block. */
  function renderRichText(el, text, streaming = false) {
    const md = window.PicoBot && window.PicoBot.Markdown;
    if (md) { md.render(el, String(text ?? ''), { streaming }); return; }
    el.replaceChildren(h('p', { className: 'plain', text: String(text ?? '') }));
  }

  function setText(el, text) { if (el.textContent !== text) el.textContent = text; }

  // --- message builders -------------------------------------------------------------------------

  function messageShell(role, status, extra) {
    return h('article', Object.assign({ className: `msg msg-${role}`, 'data-testid': 'message',
      'data-role': role, 'data-status': status }, extra));
  }

  function reasoningEl(text, label) {
    const body = h('div', { className: 'reasoning-text', text });
    return h('details', { className: 'reasoning', 'data-testid': 'reasoning' }, h('summary', { text: label }), body);
  }

  function toolEl(name, args, status, preview) {
    const el = h('div', { className: 'tool', 'data-testid': 'tool' });
    updateTool(el, { name, arguments: args, status, preview });
    return el;
  }

  function updateTool(el, b) {
    const sig = JSON.stringify([b.name, b.arguments, b.status, b.preview]);
    if (el._sig === sig) return;
    el._sig = sig;
    const args = argsText(b.arguments);
    el.dataset.status = b.status;
    // replaceChildren would print a null child as "null": drop the optional parts first.
    el.replaceChildren(...[
      h('span', { className: 'tool-icon', 'aria-hidden': 'true', text: TOOL_ICONS[b.status] || '•' }),
      h('span', { className: 'tool-name', text: b.name || 'tool' }),
      args ? h('code', { className: 'tool-args', title: truncate(args, 2000), text: truncate(args, 140) }) : null,
      h('span', { className: 'tool-state', text: b.status }),
      b.preview ? h('div', { className: 'tool-preview', text: truncate(b.preview, 400) }) : null,
    ].filter(Boolean));
  }

  function answerEl(text) {
    const el = h('div', { className: 'answer', 'data-testid': 'answer' });
    renderRichText(el, text);
    el._text = text;
    return el;
  }

  function notice(text, testid) { return h('p', { className: 'notice', 'data-testid': testid, text }); }

  /** A committed history row (immutable: built once). */
  function buildRow({ msg: m, results }) {
    if (m.role === 'user') {
      const el = messageShell('user', 'committed', { 'data-message-id': m.id });
      el.append(h('div', { className: 'bubble', text: m.content }));
      return el;
    }
    if (m.role === 'tool') {
      const failed = !!m.is_error;
      const el = messageShell('tool', failed ? 'failed' : 'completed', { 'data-message-id': m.id });
      el.append(h('details', { className: 'tool-result' },
        h('summary', { text: `${failed ? '✗' : '✓'} Result of ${m.tool_name || 'tool'}` }),
        h('pre', { className: 'tool-output', text: m.content })));
      return el;
    }
    const status = m.completion_status || 'completed';
    const el = messageShell('assistant', status, { 'data-message-id': m.id, 'data-turn-id': m.turn_id });
    if (m.reasoning) el.append(reasoningEl(m.reasoning, 'Thoughts'));
    if (m.content) el.append(answerEl(m.content));
    for (const call of m.tool_calls || []) {
      const r = results.get(call.id);
      el.append(toolEl(call.name, call.arguments, r ? (r.is_error ? 'failed' : 'completed') : 'cancelled', ''));
    }
    if (!m.content && !(m.tool_calls || []).length && status === 'completed') {
      el.append(notice('The model returned no answer.', 'no-answer'));
    }
    if (status !== 'completed') el.append(notice(status === 'cancelled' ? 'Stopped.' : 'Interrupted.', 'completion-status'));
    return el;
  }

  /** A failed/cancelled outcome shown under a turn's committed rows. */
  function buildNote({ note }) {
    const label = note.status === 'cancelled' ? 'Stopped' : 'Failed';
    return h('div', { className: `note note-${note.status}`, 'data-testid': 'turn-error', 'data-status': note.status,
      role: 'status', text: note.error ? `${label}: ${note.error}` : `${label}.` });
  }

  function buildPending(item) {
    const el = messageShell('user', item.p.status, { 'data-client-msg-id': item.p.client_msg_id });
    el.append(h('div', { className: 'bubble', text: item.p.content }), h('div', { className: 'msg-meta' }));
    updatePending(el, item);
    return el;
  }

  function updatePending(el, { p }) {
    el.dataset.status = p.status;
    const meta = el.querySelector('.msg-meta');
    const sig = `${p.status}|${p.queued}|${p.error}`;
    if (meta._sig === sig) return;
    meta._sig = sig;
    if (p.status === 'pending') meta.replaceChildren('Sending…');
    else if (p.status === 'accepted') meta.replaceChildren(p.queued ? `Queued (${p.queued} ahead)` : 'Delivered');
    else {
      const retry = h('button', { type: 'button', className: 'link-btn', 'data-testid': 'retry', text: 'Retry' });
      retry.addEventListener('click', () => sendFrame(store.retryPending(p.client_msg_id)));
      const dismiss = h('button', { type: 'button', className: 'link-btn', 'data-testid': 'dismiss', text: 'Dismiss' });
      dismiss.addEventListener('click', () => { store.discardPending(p.client_msg_id); scheduleRender(); });
      meta.replaceChildren(h('span', { className: 'error-text', text: `Not sent — ${p.error}` }), ' ', retry, ' ', dismiss);
    }
  }

  /** The live turn: blocks keyed by id so open <details> and selections survive updates. */
  function buildTurn(item) {
    const el = messageShell('assistant', item.turn.status, { 'data-turn-id': item.turn.id });
    el.append(h('div', { className: 'blocks' }), h('div', { className: 'turn-footer' }));
    updateTurn(el, item);
    return el;
  }

  function updateTurn(el, { turn }) {
    el.dataset.status = turn.status;
    el.dataset.phase = turn.phase || '';
    el.setAttribute('aria-busy', String(turn.status === 'running'));
    const blocks = (turn.blocks || []).filter((b) => ['reasoning', 'assistant', 'tool'].includes(b.type));
    const running = turn.status === 'running';
    reconcile(el.querySelector('.blocks'), blocks.map((b, i) => ({ key: `${b.type}:${b.id ?? i}`, b,
      last: i === blocks.length - 1 })), buildBlock, (node, it) => updateBlock(node, it, running));
    const footer = el.querySelector('.turn-footer');
    const hasAnswer = blocks.some((b) => b.type === 'assistant' && b.text);
    let content = null;
    if (running) content = h('span', { className: 'phase', 'data-testid': 'turn-phase', text: PHASES[turn.phase] || 'Working…' });
    else if (turn.status === 'failed' || turn.status === 'cancelled') {
      content = buildNote({ note: { status: turn.status, error: errorText(turn.error) } });
    } else if (!hasAnswer) content = notice('The model returned no answer.', 'no-answer');
    const sig = `${turn.status}|${turn.phase}|${hasAnswer}|${errorText(turn.error)}`;
    if (footer._sig !== sig) { footer._sig = sig; footer.replaceChildren(...(content ? [content] : [])); }
  }

  function buildBlock(it) {
    const b = it.b;
    if (b.type === 'reasoning') return reasoningEl(b.text || '', 'Thinking…');
    if (b.type === 'tool') return toolEl(b.name, b.arguments, b.status, b.preview);
    return answerEl(b.text || '');
  }

  function updateBlock(el, it, running) {
    const b = it.b;
    if (b.type === 'reasoning') {
      setText(el.querySelector('.reasoning-text'), b.text || '');
      setText(el.querySelector('summary'), running && it.last ? 'Thinking…' : 'Thoughts');
    } else if (b.type === 'tool') updateTool(el, b);
    else if (el._text !== b.text) { renderRichText(el, b.text || '', running); el._text = b.text; }
  }

  /** Keyed list update: reuse elements by key, create missing ones, drop the rest, keep order. */
  function reconcile(parent, items, create, update) {
    const old = parent._keyed || new Map();
    const next = new Map();
    let cursor = parent.firstChild;
    for (const item of items) {
      let el = old.get(item.key);
      if (el) { if (update) update(el, item); } else el = create(item);
      next.set(item.key, el);
      if (el === cursor) cursor = cursor.nextSibling; else parent.insertBefore(el, cursor);
    }
    for (const [k, el] of old) if (!next.has(k)) el.remove();
    parent._keyed = next;
  }

  // --- rendering ---------------------------------------------------------------------------------

  const builders = { row: buildRow, note: buildNote, pending: buildPending, turn: buildTurn };
  const updaters = { pending: updatePending, turn: updateTurn };

  function render() {
    const sc = ui.scroller;
    const fromBottom = sc.scrollHeight - sc.scrollTop - sc.clientHeight;
    renderHeader();
    renderSessions();
    const items = store.viewItems();
    reconcile(ui.list, items, (it) => builders[it.kind](it), (el, it) => updaters[it.kind] && updaters[it.kind](el, it));
    const s = store.activeSession;
    ui.empty.hidden = items.length > 0 || !s || !s.loaded;
    ui.older.hidden = !(s && s.hasMore);
    ui.older.disabled = !!(s && s.olderBefore !== null);
    ui.stop.hidden = !(s && s.turn && s.turn.status === 'running');
    // Follow the conversation only if the reader was already at the bottom.
    if (pendingScroll.bottom || fromBottom < 48) sc.scrollTop = sc.scrollHeight;
    else if (pendingScroll.prepended) sc.scrollTop = sc.scrollHeight - sc.clientHeight - fromBottom;
    pendingScroll = { bottom: false, prepended: false };
  }

  function renderHeader() {
    if (store.user) setText(ui.user, nameOf(store.user));
    const p = store.provider;
    if (p) {
      setText(ui.provider, [p.name, p.model].filter(Boolean).join(' · '));
      ui.offline.hidden = !p.offline;
    }
    const d = store.activeDialog;
    setText(ui.title, d ? d.title || 'Untitled dialog' : '');
  }

  function renderSessions() {
    reconcile(ui.sessions, store.dialogs.map((d) => ({ key: d.session_id, d })), buildSessionItem, updateSessionItem);
  }

  function buildSessionItem(it) {
    const btn = h('button', { type: 'button', className: 'session-item', 'data-testid': 'session-item' },
      h('span', { className: 'session-title' }), h('span', { className: 'session-meta' }));
    btn.addEventListener('click', () => {
      setSidebar(false);
      const d = btn._d;
      if (!d.active && d.dialog_id) sendFrame({ type: 'message', content: `/switch ${d.dialog_id}` });
    });
    const li = h('li', {}, btn);
    updateSessionItem(li, it);
    return li;
  }

  function updateSessionItem(li, { d }) {
    const btn = li.firstChild;
    btn._d = d;
    btn.dataset.sessionId = d.session_id;
    if (d.active) btn.setAttribute('aria-current', 'true'); else btn.removeAttribute('aria-current');
    setText(btn.firstChild, d.title || 'Untitled dialog');
    const count = d.message_count ? ` · ${d.message_count} msg` : '';
    setText(btn.lastChild, relativeTime(d.last_active_at) + count);
  }

  /** Render once per frame however many frames arrived, then return flow-control credit for the
   *  snapshots actually painted (rAF does not run in a hidden tab, so credit waits with it). */
  function scheduleRender() {
    if (renderQueued) return;
    renderQueued = true;
    requestAnimationFrame(() => {
      renderQueued = false;
      render();
      for (const [turn_id, revision] of seenQueue) conn.send({ type: 'seen', turn_id, revision });
      seenQueue.clear();
    });
  }

  // --- frames in and out -------------------------------------------------------------------------

  function handleFrame(frame) {
    const fx = store.apply(frame);
    if (frame.type === 'ready') setStatus('online', 'Connected');
    for (const f of fx.send) conn.send(f);
    for (const t of fx.toasts) toast(t.level, t.text);
    for (const s of fx.seen) seenQueue.set(s.turn_id, Math.max(s.revision, seenQueue.get(s.turn_id) || 0));
    pendingScroll.bottom ||= fx.scrollToBottom;
    pendingScroll.prepended ||= fx.prepended;
    if (fx.render || fx.seen.length) scheduleRender();
  }

  function sendFrame(frame) {
    if (!frame) return;
    if (!conn.send(frame) && frame.type !== 'message') toast('warning', 'Not connected — try again in a moment.');
    scheduleRender();
  }

  function submitComposer() {
    const content = ui.composer.value;
    if (!content.trim()) return;
    if (content.trim().startsWith('/')) {
      // Slash commands get no ack and never enter history; they are not kept as pending. They act
      // on the dialog on screen (another tab may have switched the chat's active one meanwhile).
      const frame = { type: 'message', content: content.trim() };
      if (store.activeSessionId) frame.session_id = store.activeSessionId;
      if (!conn.send(frame)) { toast('warning', 'Not connected.'); return; }
    } else {
      // Sent now if connected, otherwise on the next `ready` (same client_msg_id, no duplicate).
      conn.send(store.addPending(content));
      pendingScroll.bottom = true;
      scheduleRender();
    }
    ui.composer.value = '';
    autosize();
  }

  // --- status, toasts --------------------------------------------------------------------------

  function setStatus(state, text) {
    ui.status.dataset.state = state;
    setText(ui.status, text);
  }

  function onConnStatus(state, info) {
    if (state === 'connecting') setStatus('connecting', 'Connecting…');
    else if (state === 'open') setStatus('connecting', 'Signing in…');
    else if (state === 'waiting') {
      setStatus('offline', `Disconnected — retrying in ${Math.ceil(info.delay / 1000)} s`);
      // A refused handshake (expired session) looks like any drop; ask the page itself.
      if (info.attempt >= 2) checkSession();
    }
  }

  function checkSession() {
    fetch(location.pathname, { redirect: 'manual', credentials: 'same-origin', cache: 'no-store' })
      .then((r) => { if (r.type === 'opaqueredirect' || r.status === 401 || r.status === 403) goToLogin(); })
      .catch(() => { /* server unreachable: keep retrying */ });
  }

  function goToLogin() { location.assign(`${LOGIN_URL}?next=${encodeURIComponent(location.pathname)}`); }

  function toast(level, text) {
    const close = h('button', { type: 'button', className: 'toast-close', 'aria-label': 'Dismiss', text: '×' });
    const el = h('div', { className: `toast toast-${level}`, 'data-testid': 'toast', 'data-level': level,
      role: level === 'error' ? 'alert' : 'status' }, h('div', { className: 'toast-text', text }), close);
    close.addEventListener('click', () => el.remove());
    ui.toasts.append(el);
    while (ui.toasts.children.length > 5) ui.toasts.firstChild.remove();
    if (level === 'info') setTimeout(() => el.remove(), 10000);
  }

  // --- wiring ------------------------------------------------------------------------------------

  function autosize() {
    ui.composer.style.height = 'auto';
    ui.composer.style.height = `${ui.composer.scrollHeight + 2}px`;
  }

  ui.form.addEventListener('submit', (e) => { e.preventDefault(); submitComposer(); });
  ui.composer.addEventListener('keydown', (e) => {
    // isComposing: Enter that confirms an IME candidate must not send.
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); submitComposer(); }
  });
  ui.composer.addEventListener('input', autosize);
  ui.stop.addEventListener('click', () => {
    const s = store.activeSession;
    if (!s) return;
    // Name the turn on screen: a stop meant for it never stops the one after it (PROTOCOL §1).
    const frame = { type: 'stop', session_id: s.id };
    if (s.turn && s.turn.status === 'running') frame.turn_id = s.turn.id;
    sendFrame(frame);
  });
  ui.older.addEventListener('click', () => sendFrame(store.requestOlder()));
  ui.newDialog.addEventListener('click', () => {
    setSidebar(false);
    sendFrame({ type: 'message', content: '/new' });
  });
  // On narrow screens the sidebar is a drawer over the chat: a click outside or Esc closes it.
  function setSidebar(open) {
    root.classList.toggle('sidebar-open', open);
    ui.sidebarToggle.setAttribute('aria-expanded', String(open));
  }
  ui.sidebarToggle.addEventListener('click', (e) => { e.stopPropagation(); setSidebar(!root.classList.contains('sidebar-open')); });
  root.addEventListener('click', (e) => { if (!e.target.closest('#sidebar')) setSidebar(false); });
  document.addEventListener('keydown', (e) => { if (e.key === 'Escape') setSidebar(false); });
  window.addEventListener('online', () => conn.reconnectNow());
  setInterval(() => renderSessions(), 60000); // keep "n min ago" honest

  const wsUrl = `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}${root.dataset.wsPath || '/ws/chat/'}`;
  const conn = new Connection(wsUrl, { onFrame: handleFrame, onStatus: onConnStatus, onUnauthorized: goToLogin });
  conn.start();
  ui.composer.focus();
})();
