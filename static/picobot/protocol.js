/* PicoBot WebUI — protocol state and transport (PROTOCOL.md §1). No DOM in here.
 *
 * ChatStore.apply(frame) mutates the client's picture of the chat and returns effects
 * ({send, toasts, seen, render, ...}) that app.js carries out; keeping the rules here (revision
 * checks, gap detection, pending-message bookkeeping) lets them be exercised without a browser.
 * Connection owns the WebSocket: reconnect with backoff, ping/pong liveness, 4401 → login.
 */
(function (root) {
  'use strict';

  const TERMINAL = new Set(['completed', 'cancelled', 'failed']);

  /** A client_msg_id (≤ 64 chars). randomUUID needs a secure context, so plain-http LAN use
   *  falls back to getRandomValues, and a very old browser to Math.random. */
  function newClientMsgId() {
    const c = root.crypto;
    if (c && typeof c.randomUUID === 'function') return c.randomUUID();
    const b = new Uint8Array(16);
    if (c && c.getRandomValues) c.getRandomValues(b);
    else for (let i = 0; i < 16; i++) b[i] = Math.floor(Math.random() * 256);
    b[6] = (b[6] & 0x0f) | 0x40; b[8] = (b[8] & 0x3f) | 0x80;
    const h = Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
    return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
  }

  /** What this client knows of one dialog. `revision` is the highest committed seq we hold. */
  function newSession(id) {
    return {
      id, loaded: false, stale: false, historyRequested: false, olderBefore: null,
      revision: 0, messages: [], ids: new Set(), hasMore: false,
      turn: null, // the one live turn of this dialog (latest snapshot)
      notes: new Map(), // turn_id → {status, error}: failed/cancelled turns already committed
    };
  }

  function newEffects() {
    return { send: [], toasts: [], seen: [], render: false, scrollToBottom: false, prepended: false };
  }

  class ChatStore {
    constructor() {
      this.user = null; this.provider = null; this.chatId = null; this.activeSessionId = null;
      this.sessions = new Map(); // session_id → newSession()
      this.dialogs = []; // sidebar items, most recent first
      this.pending = []; // user messages not yet in history, in send order
      this.finishedTurns = new Set(); // turn ids whose rows are committed: later snapshots are stale
    }

    session(id) {
      let s = this.sessions.get(id);
      if (!s) { s = newSession(id); this.sessions.set(id, s); }
      return s;
    }

    get activeSession() { return this.activeSessionId ? this.session(this.activeSessionId) : null; }

    get activeDialog() { return this.dialogs.find((d) => d.session_id === this.activeSessionId) || null; }

    /** Apply one server frame; unknown types are ignored (the server may add some). */
    apply(frame) {
      const fx = newEffects();
      const handler = this['on_' + frame.type];
      if (typeof handler === 'function') handler.call(this, frame, fx);
      return fx;
    }

    // --- client → server helpers -------------------------------------------------------------

    /** Record a user message as pending and return its `message` frame (resent on reconnect
     *  with the same client_msg_id, which the server de-duplicates). */
    addPending(content) {
      const p = { client_msg_id: newClientMsgId(), content, session_id: this.activeSessionId,
        status: 'pending', error: null, message_id: null, queued: 0, turnId: null };
      this.pending.push(p);
      return messageFrame(p);
    }

    retryPending(clientMsgId) {
      const p = this.pending.find((x) => x.client_msg_id === clientMsgId);
      if (!p) return null;
      p.status = 'pending'; p.error = null;
      return messageFrame(p);
    }

    discardPending(clientMsgId) { this.pending = this.pending.filter((x) => x.client_msg_id !== clientMsgId); }

    /** The `history` frame for the page above the oldest row shown, or null if none/in flight. */
    requestOlder() {
      const s = this.activeSession;
      if (!s || !s.hasMore || !s.messages.length || s.olderBefore !== null) return null;
      s.olderBefore = s.messages[0].seq;
      return { type: 'history', session_id: s.id, before_seq: s.olderBefore };
    }

    // --- server → client ---------------------------------------------------------------------

    on_ready(f, fx) {
      this.user = f.user; this.provider = f.provider || {}; this.chatId = f.chat_id;
      const running = Array.isArray(f.running) ? f.running : [];
      const runningIds = new Set(running.map((t) => t.id));
      // After a reconnect everything we hold may be behind: refetch history lazily, and drop
      // live turns that ended while we were away (their rows arrive with the history).
      for (const s of this.sessions.values()) {
        s.stale = true; s.historyRequested = false; s.olderBefore = null;
        if (s.turn && !TERMINAL.has(s.turn.status) && !runningIds.has(s.turn.id)) s.turn = null;
      }
      this._activate(f.active_session_id, fx);
      for (const t of running) this._applyTurn(t, fx);
      fx.send.push({ type: 'sessions' });
      for (const p of this.pending) if (p.status === 'pending') fx.send.push(messageFrame(p));
      fx.render = true; fx.scrollToBottom = true;
    }

    on_ack(f, fx) {
      const p = this.pending.find((x) => x.client_msg_id === f.client_msg_id);
      if (!p) return;
      Object.assign(p, { status: 'accepted', message_id: f.message_id, session_id: f.session_id,
        queued: f.queued || 0 });
      if (this.session(f.session_id).ids.has(f.message_id)) this._dropPending(p);
      fx.render = true;
    }

    on_turn_updated(f, fx) { if (f.turn) this._applyTurn(f.turn, fx); }

    on_turn_committed(f, fx) {
      const s = this.session(f.session_id);
      const rows = (f.messages || []).slice().sort((a, b) => a.seq - b.seq);
      this._settleTurns(s, rows);
      for (const row of rows) if (row.role === 'user') this._matchPending(s.id, row);
      const fresh = rows.filter((r) => !s.ids.has(r.id)); // a duplicate delta changes nothing
      if (s.loaded && rows.length && rows[0].seq <= s.revision + 1) {
        this._merge(s, rows);
        s.revision = Math.max(s.revision, f.history_revision || 0);
      } else if (rows.length) {
        // A gap (or no history yet): the rows alone would leave a hole, so refetch the page —
        // once: further deltas before the answer arrive are covered by it.
        s.stale = true;
        if (s.id === this.activeSessionId && !s.historyRequested) this._requestHistory(s, fx);
      }
      this._touchDialog(s.id, fresh);
      fx.render = true;
    }

    on_session_history(f, fx) {
      const s = this.session(f.session_id);
      const rows = (f.messages || []).slice().sort((a, b) => a.seq - b.seq);
      const older = s.olderBefore !== null && (!rows.length || rows[rows.length - 1].seq < s.olderBefore);
      if (older) {
        // Prepend only if still contiguous with what we show (a refetch may have replaced it).
        if (!s.messages.length || s.messages[0].seq === s.olderBefore) {
          this._merge(s, rows); s.hasMore = !!f.has_more; fx.prepended = true;
        }
        s.olderBefore = null;
      } else if (s.loaded && (f.history_revision || 0) < s.revision) {
        // Computed before a commit we already applied: merging keeps the newer rows.
        this._merge(s, rows); s.stale = false; s.historyRequested = false;
      } else {
        s.messages = rows; s.ids = new Set(rows.map((m) => m.id)); s.hasMore = !!f.has_more;
        s.revision = f.history_revision || 0; s.loaded = true; s.stale = false;
        s.historyRequested = false;
        for (const row of rows) if (row.role === 'user') this._matchPending(s.id, row, false);
      }
      this._settleTurns(s, rows);
      fx.render = true;
    }

    on_sessions(f, fx) {
      this.dialogs = Array.isArray(f.items) ? f.items.slice() : [];
      const active = this.dialogs.find((d) => d.active);
      if (active && active.session_id !== this.activeSessionId) this._activate(active.session_id, fx);
      fx.render = true;
    }

    on_session_changed(f, fx) {
      if (f.deleted) {
        this.dialogs = this.dialogs.filter((d) => d.session_id !== f.session_id);
        this.sessions.delete(f.session_id);
        fx.render = true;
        return;
      }
      let d = this.dialogs.find((x) => x.session_id === f.session_id);
      if (!d) {
        d = { session_id: f.session_id, message_count: 0, last_active_at: Date.now() };
        this.dialogs.unshift(d);
      }
      Object.assign(d, { dialog_id: f.dialog_id, title: f.title, active: !!f.active });
      if (f.active) {
        for (const x of this.dialogs) x.active = x === d;
        this._activate(f.session_id, fx);
      }
      fx.render = true;
    }

    on_notification(f, fx) {
      // A notification with an `id` may be re-sent (an outbound retry): show it once.
      if (f.id) {
        this.seenNotices = this.seenNotices || [];
        if (this.seenNotices.includes(f.id)) return;
        this.seenNotices.push(f.id);
        if (this.seenNotices.length > 200) this.seenNotices.shift();
      }
      fx.toasts.push({ level: f.level || 'info', text: String(f.content || '') });
    }

    on_error(f, fx) {
      const text = `${f.code || 'error'}: ${f.message || ''}` + (f.ref ? ` (ref ${f.ref})` : '');
      const p = f.client_msg_id && this.pending.find((x) => x.client_msg_id === f.client_msg_id);
      if (p) {
        p.status = 'failed'; p.error = text; fx.render = true;
      } else {
        fx.toasts.push({ level: 'error', text });
      }
    }

    // --- internals ---------------------------------------------------------------------------

    _activate(sessionId, fx) {
      if (!sessionId) return;
      if (sessionId !== this.activeSessionId) fx.scrollToBottom = true;
      this.activeSessionId = sessionId;
      const s = this.session(sessionId);
      if ((!s.loaded || s.stale) && !s.historyRequested) this._requestHistory(s, fx);
      fx.render = true;
    }

    _requestHistory(s, fx) {
      s.historyRequested = true;
      fx.send.push({ type: 'history', session_id: s.id });
    }

    _applyTurn(t, fx) {
      if (!t || !t.id || !t.session_id) return;
      const s = this.session(t.session_id);
      if (this.finishedTurns.has(t.id)) {
        // Rows already committed (turn_committed may precede the terminal snapshot): keep only
        // the outcome so a failure or cancellation stays visible under those rows.
        if (t.status === 'failed' || t.status === 'cancelled') s.notes.set(t.id, noteOf(t));
        fx.render = true;
        return;
      }
      const cur = s.turn;
      if (cur && cur.id === t.id && t.revision <= cur.revision) return;
      if (!cur || cur.id !== t.id) {
        // A failed turn that committed no rows would vanish when replaced; keep its outcome.
        if (cur && (cur.status === 'failed' || cur.status === 'cancelled')) s.notes.set(cur.id, noteOf(cur));
        // Bind the oldest unbound message of this dialog to the new turn so it renders above it.
        const p = this.pending.find((x) => sameSession(x, s.id, this.activeSessionId) && !x.turnId && x.status !== 'failed');
        if (p) p.turnId = t.id;
      }
      s.turn = t;
      if (t.status === 'running') fx.seen.push({ turn_id: t.id, revision: t.revision });
      fx.render = true;
    }

    /** Retire live turns whose rows are now in `rows`. A running turn only retires once it has
     *  assistant/tool rows: its user row alone is committed when it starts. */
    _settleTurns(s, rows) {
      const t = s.turn;
      if (!t) return;
      const mine = rows.filter((r) => r.turn_id === t.id);
      if (!mine.length) return;
      if (TERMINAL.has(t.status) || mine.some((r) => r.role !== 'user')) {
        this.finishedTurns.add(t.id);
        if (t.status === 'failed' || t.status === 'cancelled') s.notes.set(t.id, noteOf(t));
        s.turn = null;
      }
    }

    _merge(s, rows) {
      let added = false;
      for (const row of rows) {
        if (s.ids.has(row.id)) continue;
        s.ids.add(row.id); s.messages.push(row); added = true;
      }
      if (added) s.messages.sort((a, b) => a.seq - b.seq);
    }

    /** A committed user row replaces its pending copy: by ack'd id, else (a message sent before
     *  its ack arrived) by content — only for fresh commits, never for a history refetch. */
    _matchPending(sessionId, row, byContent = true) {
      let p = this.pending.find((x) => x.message_id === row.id);
      if (!p && byContent) {
        p = this.pending.find((x) => x.status !== 'failed' && x.content === row.content &&
          sameSession(x, sessionId, this.activeSessionId));
      }
      if (p) this._dropPending(p);
    }

    /** Keep the sidebar current without a `sessions` round trip: newest activity first. */
    _touchDialog(sessionId, rows) {
      const d = this.dialogs.find((x) => x.session_id === sessionId);
      if (!d || !rows.length) return;
      d.last_active_at = Math.max(d.last_active_at || 0, ...rows.map((r) => r.created_at || 0));
      // message_count counts user messages (DESIGN §3), as the server's `sessions` does.
      d.message_count = (d.message_count || 0) + rows.filter((r) => r.role === 'user').length;
      this.dialogs = [d, ...this.dialogs.filter((x) => x !== d)];
    }

    _dropPending(p) { this.pending = this.pending.filter((x) => x !== p); }

    /** The active dialog as an ordered list of keyed items for the renderer:
     *  history rows (with turn outcome notes), the live turn's own message, the live turn, then
     *  messages still waiting in the dialog's queue. */
    viewItems() {
      const s = this.activeSession;
      if (!s) return [];
      const items = [];
      const results = new Map();
      for (const m of s.messages) if (m.role === 'tool' && m.tool_call_id) results.set(m.tool_call_id, m);
      const usedNotes = new Set();
      s.messages.forEach((m, i) => {
        items.push({ key: 'm:' + m.id, kind: 'row', msg: m, results });
        const next = s.messages[i + 1];
        if (m.turn_id && s.notes.has(m.turn_id) && (!next || next.turn_id !== m.turn_id)) {
          const note = s.notes.get(m.turn_id);
          usedNotes.add(m.turn_id);
          // A stopped partial answer already says so on its row; a failure adds its error.
          const marked = note.status === 'cancelled' && s.messages.some((r) => r.turn_id === m.turn_id && r.completion_status === 'cancelled');
          if (!marked) items.push({ key: 'n:' + m.turn_id, kind: 'note', note });
        }
      });
      for (const [id, note] of s.notes) {
        if (!usedNotes.has(id)) items.push({ key: 'n:' + id, kind: 'note', note });
      }
      const mine = this.pending.filter((p) => sameSession(p, s.id, this.activeSessionId));
      const turnId = s.turn && s.turn.id;
      for (const p of mine) if (turnId && p.turnId === turnId) items.push({ key: 'p:' + p.client_msg_id, kind: 'pending', p });
      if (s.turn) items.push({ key: 't:' + s.turn.id, kind: 'turn', turn: s.turn });
      for (const p of mine) if (!turnId || p.turnId !== turnId) items.push({ key: 'p:' + p.client_msg_id, kind: 'pending', p });
      return items;
    }
  }

  function messageFrame(p) {
    const f = { type: 'message', content: p.content, client_msg_id: p.client_msg_id };
    if (p.session_id) f.session_id = p.session_id;
    return f;
  }

  function sameSession(p, sessionId, activeId) {
    return p.session_id ? p.session_id === sessionId : sessionId === activeId;
  }

  function noteOf(t) { return { turnId: t.id, status: t.status, error: errorText(t.error) }; }

  /** The turn's `error` as text: the server may send a string or an object. */
  function errorText(e) {
    if (!e) return '';
    if (typeof e === 'string') return e;
    return [e.code, e.message].filter(Boolean).join(': ') + (e.ref ? ` (ref ${e.ref})` : '');
  }

  /** The WebSocket with reconnect/backoff and a ping every 25 s (a missed pong drops the socket,
   *  because a half-open TCP connection can otherwise look alive for minutes). */
  class Connection {
    constructor(url, { onFrame, onStatus, onUnauthorized }) {
      this.url = url; this.onFrame = onFrame; this.onStatus = onStatus; this.onUnauthorized = onUnauthorized;
      this.ws = null; this.attempt = 0; this.retryTimer = null; this.pingTimer = null;
      this.awaitingPong = false; this.nonce = 0;
    }

    start() { this._connect(); }

    /** Send a frame; false when not connected (the caller keeps what must survive a reconnect). */
    send(obj) {
      if (!this.ws || this.ws.readyState !== 1) return false;
      this.ws.send(JSON.stringify(obj));
      return true;
    }

    reconnectNow() {
      if (this.ws) return;
      clearTimeout(this.retryTimer);
      this._connect();
    }

    _connect() {
      this.retryTimer = null;
      this.onStatus('connecting');
      let ws;
      try { ws = new WebSocket(this.url); } catch (e) { this._retry(); return; }
      this.ws = ws;
      ws.onopen = () => { this.onStatus('open'); this._startPing(); };
      ws.onmessage = (ev) => {
        let frame;
        try { frame = JSON.parse(ev.data); } catch (e) { return; }
        if (!frame || typeof frame.type !== 'string') return;
        if (frame.type === 'pong') this.awaitingPong = false;
        if (frame.type === 'ready') this.attempt = 0;
        this.onFrame(frame);
      };
      ws.onclose = (ev) => this._closed(ev.code);
    }

    _closed(code) {
      clearInterval(this.pingTimer);
      this.ws = null;
      if (code === 4401) { this.onStatus('unauthorized'); this.onUnauthorized(); return; }
      this._retry();
    }

    _retry() {
      // 0.5 s doubling to 15 s, ±25 % jitter so a restarted server is not hit by every tab at once.
      const delay = Math.min(15000, 500 * 2 ** this.attempt) * (0.75 + Math.random() * 0.5);
      this.attempt += 1;
      this.onStatus('waiting', { delay, attempt: this.attempt });
      this.retryTimer = setTimeout(() => this._connect(), delay);
    }

    _startPing() {
      this.awaitingPong = false;
      this.pingTimer = setInterval(() => {
        if (this.awaitingPong) { this._drop(); return; }
        this.awaitingPong = true;
        this.send({ type: 'ping', nonce: String(++this.nonce) });
      }, 25000);
    }

    _drop() {
      const ws = this.ws;
      if (!ws) return;
      ws.onclose = ws.onmessage = null;
      try { ws.close(); } catch (e) { /* already closing */ }
      this._closed(1006);
    }
  }

  const api = { ChatStore, Connection, newClientMsgId, errorText, TERMINAL };
  root.PicoBot = Object.assign(root.PicoBot || {}, api);
  if (typeof module !== 'undefined' && module.exports) module.exports = api;
})(typeof window !== 'undefined' ? window : globalThis);
