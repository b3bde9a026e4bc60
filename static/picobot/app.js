/* PicoBot WebUI — wiring: the store (protocol.js), the WebSocket (connection.js), the sidebar,
 * transcript and composer modules, render scheduling, scrolling, status and toasts.
 *
 * Frames are applied to the store as they arrive and rendered once per animation frame; flow
 * control credit (`seen`) goes back only for snapshots actually painted (PROTOCOL §1).
 */
(function () {
  'use strict';

  const root = document.getElementById('picobot');
  if (!root) return; // pages without the chat (login) load no state
  const { ChatStore, Connection, View, Dom, Transcript, Sidebar, Composer } = window.PicoBot;
  const { h, setText } = Dom;

  const $ = (sel) => root.querySelector(`[data-testid="${sel}"]`);
  const ui = {
    status: $('connection-status'), offline: $('offline-badge'), provider: $('provider'), user: $('user'),
    title: $('dialog-title'), sidebar: root.querySelector('#sidebar'), sessions: $('session-list'),
    search: $('session-search'), loadMore: $('load-more-dialogs'), noMatch: $('no-match'),
    newDialog: $('new-dialog'), sidebarToggle: $('sidebar-toggle'), chat: root.querySelector('.chat'),
    scroller: $('messages'), list: $('message-list'), empty: $('empty'), older: $('load-older'),
    jump: $('jump-to-newest'), form: $('composer-form'), composer: $('composer'), send: $('send'),
    stop: $('stop'), attach: $('attach'), fileInput: $('file-input'), attachments: $('attachments'),
    composerError: $('composer-error'), completion: $('command-completion'), toasts: $('toasts'),
  };
  const LOGIN_URL = root.dataset.loginUrl || '/login/';
  const FOLLOW_PX = 48; // this close to the bottom counts as "at the newest message"

  const store = new ChatStore();
  const seenQueue = new Map(); // turn_id → highest revision rendered, flushed after paint
  let renderQueued = false;
  let pendingScroll = { bottom: false, prepended: false };

  const ctx = { store, sendFrame, sendMessage, scheduleRender, setSidebar, toast, switchTo: (d) => sidebar.switchTo(d),
    focusComposer: () => composer.focus() };
  const transcript = Transcript.create(ctx, ui.list);
  const sidebar = Sidebar.create(ctx, ui);
  const composer = Composer.create(ctx, ui);

  // --- rendering ---------------------------------------------------------------------------------

  function render() {
    const sc = ui.scroller;
    const fromBottom = sc.scrollHeight - sc.scrollTop - sc.clientHeight;
    const before = sc.scrollHeight;
    renderHeader();
    sidebar.render();
    const items = store.viewItems();
    transcript.render(items);
    const s = store.activeSession;
    ui.empty.hidden = items.length > 0 || !s || !s.loaded;
    ui.older.hidden = !(s && s.hasMore);
    ui.older.disabled = !!(s && s.olderBefore !== null);
    // While the socket is down the turn's fate is unknown and a stop could not be sent.
    ui.stop.hidden = !runningTurn() || !store.online;
    // Follow the conversation only if the reader was at the bottom; never pull them down while
    // they read older messages (the "jump to newest" button appears instead).
    if (pendingScroll.bottom || fromBottom < FOLLOW_PX) sc.scrollTop = sc.scrollHeight;
    else if (pendingScroll.prepended) sc.scrollTop = sc.scrollHeight - sc.clientHeight - fromBottom;
    else if (sc.scrollHeight > before) ui.jump.dataset.fresh = 'yes';
    pendingScroll = { bottom: false, prepended: false };
    updateJump();
  }

  function updateJump() {
    const sc = ui.scroller;
    const away = sc.scrollHeight - sc.scrollTop - sc.clientHeight >= FOLLOW_PX;
    ui.jump.hidden = !away;
    if (!away) delete ui.jump.dataset.fresh;
  }

  function renderHeader() {
    if (store.user) setText(ui.user, store.user);
    if (store.provider) {
      setText(ui.provider, View.providerLabel(store.provider));
      ui.offline.hidden = !store.provider.offline;
    }
    const d = store.activeDialog;
    setText(ui.title, d ? d.title || 'Untitled dialog' : '');
    document.title = d && d.title ? `${d.title} · PicoBot` : 'PicoBot';
  }

  function runningTurn() {
    const s = store.activeSession;
    return s && s.turn && s.turn.status === 'running' ? s.turn : null;
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
    for (const f of fx.send) if (f) conn.send(f);
    for (const t of fx.toasts) toast(t.level, t.text);
    for (const s of fx.seen) seenQueue.set(s.turn_id, Math.max(s.revision, seenQueue.get(s.turn_id) || 0));
    pendingScroll.bottom ||= fx.scrollToBottom;
    pendingScroll.prepended ||= fx.prepended;
    if (fx.render || fx.seen.length) scheduleRender();
  }

  /** Send a frame now; false (and a warning unless `quiet`) when not connected. */
  function sendFrame(frame, quiet = false) {
    if (!frame) return false;
    const ok = conn.send(frame);
    if (!ok && !quiet) toast('warning', 'Not connected — try again in a moment.');
    scheduleRender();
    return ok;
  }

  /** A user message: sent now if connected, else on the next `ready` (same client_msg_id). */
  function sendMessage(frame) {
    if (!frame) return;
    conn.send(frame);
    pendingScroll.bottom = true;
    scheduleRender();
  }

  function stopTurn() {
    const s = store.activeSession;
    if (!s) return;
    // Name the turn on screen: a stop meant for it never stops the one after it (PROTOCOL §1).
    const frame = { type: 'stop', session_id: s.id };
    const t = runningTurn();
    if (t) frame.turn_id = t.id;
    sendFrame(frame);
  }

  // --- status, toasts --------------------------------------------------------------------------

  function setStatus(state, text) {
    ui.status.dataset.state = state;
    setText(ui.status, text);
  }

  function onConnStatus(state, info) {
    if (store.online && state !== 'open') { store.online = false; scheduleRender(); }
    if (state === 'connecting') setStatus('connecting', 'Connecting…');
    else if (state === 'open') setStatus('connecting', 'Signing in…');
    else if (state === 'waiting') {
      setStatus('offline', `Reconnecting in ${Math.ceil(info.delay / 1000)} s`);
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

  /** Transient notices only (connection, storage warnings): inside the chat pane, above the
   *  messages, so they never cover the header or the composer. */
  function toast(level, text) {
    const close = h('button', { type: 'button', className: 'toast-close', 'aria-label': 'Dismiss', text: '×' });
    const el = h('div', { className: `toast toast-${level}`, 'data-testid': 'toast', 'data-level': level,
      role: level === 'error' ? 'alert' : 'status' }, h('div', { className: 'toast-text', text }), close);
    close.addEventListener('click', () => el.remove());
    ui.toasts.append(el);
    while (ui.toasts.children.length > 3) ui.toasts.firstChild.remove();
    setTimeout(() => el.remove(), level === 'info' ? 6000 : 12000);
  }

  // --- wiring ------------------------------------------------------------------------------------

  // On narrow screens the sidebar is a drawer over the chat: a click outside or Esc closes it.
  function setSidebar(open) {
    root.classList.toggle('sidebar-open', open);
    ui.sidebarToggle.setAttribute('aria-expanded', String(open));
  }

  function drawerOpen() { return root.classList.contains('sidebar-open'); }

  ui.stop.addEventListener('click', stopTurn);
  ui.older.addEventListener('click', () => sendFrame(store.requestOlder()));
  // At once, not smoothly: a smooth scroll aims at the height of the click's moment while the
  // stream grows, and the renders in between would see the reader as "away" and stop following.
  ui.jump.addEventListener('click', () => { ui.scroller.scrollTop = ui.scroller.scrollHeight; updateJump(); composer.focus(); });
  ui.scroller.addEventListener('scroll', updateJump, { passive: true });
  ui.sidebarToggle.addEventListener('click', (e) => { e.stopPropagation(); setSidebar(!drawerOpen()); });
  root.addEventListener('click', (e) => { if (drawerOpen() && !e.target.closest('#sidebar')) setSidebar(false); });
  // Esc: closes the drawer, else stops the running turn (popups and inline edits take it first).
  document.addEventListener('keydown', (e) => {
    if (e.key !== 'Escape' || e.defaultPrevented || composer.popupOpen() || sidebar.busy()) return;
    if (drawerOpen()) { setSidebar(false); return; }
    if (runningTurn() && store.online) { e.preventDefault(); stopTurn(); }
  });
  window.addEventListener('online', () => conn.reconnectNow());
  setInterval(() => sidebar.refreshTimes(), 60000); // keep times and date groups honest

  const wsUrl = `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}${root.dataset.wsPath || '/ws/chat/'}`;
  const conn = new Connection(wsUrl, { onFrame: handleFrame, onStatus: onConnStatus, onUnauthorized: goToLogin });
  conn.start();
  composer.focus();
})();
