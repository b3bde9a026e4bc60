/* PicoBot WebUI — the client's picture of the chat (PROTOCOL.md §1, seed 003 §12). No DOM here.
 *
 * ChatStore.apply(frame) mutates the state and returns effects ({send, toasts, seen, render, …})
 * that app.js carries out, so the rules (revision checks, gap detection, pending messages, dialog
 * paging, unread marks, command answers) run without a browser. Per dialog: `messages` (history,
 * seq order) plus one live `turn`, replaced only by a higher revision. viewmodel.js turns it into
 * what the transcript shows.
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
      notes: new Map(), // turn_id → {status, error}: outcomes seen live (rows may lack `outcome`)
      system: [], // command answers and notices shown as system lines (never history)
    };
  }

  function newEffects() {
    return { send: [], toasts: [], seen: [], render: false, scrollToBottom: false, prepended: false };
  }

  class ChatStore {
    constructor() {
      this.user = null; this.provider = null; this.chatId = null; this.activeSessionId = null;
      this.sessions = new Map(); // session_id → newSession()
      this.dialogs = []; // sidebar items loaded so far, most recent first
      this.dialogList = { query: '', hasMore: false, inFlight: 0 };
      this.sessionsAsked = []; // FIFO of our `sessions` requests: 'sidebar' | 'command'
      this.unread = new Set(); // dialogs that got committed rows while not shown
      this.pending = []; // user messages not yet in history, in send order
      this.finishedTurns = new Set(); // turn ids whose rows are committed: later snapshots are stale
      this.clientIds = new Map(); // message_id → client_msg_id: a committed row keeps its element
      this.media = new Map(); // message_id → images this page sent with it: shown as sent, also once committed
      this.commands = new Map(); // client_msg_id of a command → the dialog it was typed in
      this.lastCommand = null; // the latest command() frame, for echoCommand
      this.typedAnswers = new Map(); // client_msg_id of a typed /rename or /new → {kind, sessionId}
      this.sentCounted = new Set(); // client_msg_ids already counted in the sidebar (dialogs.js)
      this.known = new Map(); // session_id → the latest `sessions` item or `session_changed` of it
      this.seenNotices = [];
      this.readyCount = 0;
      this.online = false; // signed in on an open socket: set by `ready`, cleared by app.js on a drop
    }

    session(id) {
      let s = this.sessions.get(id);
      if (!s) { s = newSession(id); this.sessions.set(id, s); }
      return s;
    }

    get activeSession() { return this.activeSessionId ? this.session(this.activeSessionId) : null; }

    /** The dialog on screen (for the header), loaded in the sidebar or not. */
    get activeDialog() {
      return this.dialogs.find((d) => d.session_id === this.activeSessionId) || this.known.get(this.activeSessionId) || null;
    }

    /** Apply one server frame; unknown types are ignored (the server may add some). */
    apply(frame) {
      const fx = newEffects();
      const handler = this['on_' + frame.type];
      if (typeof handler === 'function') handler.call(this, frame, fx);
      return fx;
    }

    // --- client → server helpers -------------------------------------------------------------

    /** Record a user message as pending and return its `message` frame (resent on reconnect
     *  with the same client_msg_id, which the server de-duplicates). `media`: [{mime_type, data}]. */
    addPending(content, media) {
      const p = { client_msg_id: newClientMsgId(), content, session_id: this.activeSessionId,
        status: 'pending', error: null, message_id: null, queued: 0, turnId: null,
        sentAt: Date.now(), media: media && media.length ? media : null };
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

    /** What a failed turn's Retry resends: {content, media: [{mime_type, url}]} of its user row,
     *  or null. The caller fetches the images and sends `addPending(content, media)` — a new
     *  message with a new client_msg_id. */
    retrySource(turnId) {
      const s = this.activeSession;
      const row = s && s.messages.find((m) => m.turn_id === turnId && m.role === 'user');
      return row ? { content: row.content, media: Array.isArray(row.media) ? row.media : [] } : null;
    }

    /** Retry of a failed turn: its user text (and `media`, the fetched images) as a new message. */
    retryTurn(turnId, media) {
      const src = this.retrySource(turnId);
      return src ? this.addPending(src.content, media) : null;
    }

    /** A slash command for `sessionId` (default: the dialog on screen). It gets no ack and never
     *  enters history; its client_msg_id ties an `error` answer to the dialog it was typed in. */
    command(content, sessionId) {
      const f = { type: 'message', content, client_msg_id: newClientMsgId() };
      const target = sessionId || this.activeSessionId;
      if (target) f.session_id = target;
      this.commands.set(f.client_msg_id, target);
      if (this.commands.size > 100) this.commands.delete(this.commands.keys().next().value);
      if (/^\/sessions\b/i.test(content.trim())) this.sessionsAsked.push('command');
      this.lastCommand = f;
      return f;
    }

    /** Show a typed command in its dialog (a system line, not history) just before its answer. */
    echoCommand(content, sessionId) {
      const where = sessionId || this.activeSessionId;
      this._systemLine(where, { kind: 'command', level: 'info', text: content.trim() });
      // Its answer is a bare session_changed (dialogs.js _answerTyped says what it did).
      const c = this.lastCommand;
      const kind = /^\/rename\s+\S/i.test(content.trim()) ? 'rename' : /^\/new\b/i.test(content.trim()) ? 'new' : null;
      if (!kind || !c || c.content.trim() !== content.trim()) return;
      this.typedAnswers.set(c.client_msg_id, { kind, sessionId: where });
      if (this.typedAnswers.size > 20) this.typedAnswers.delete(this.typedAnswers.keys().next().value);
    }

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
      this.readyCount += 1; this.online = true;
      const running = Array.isArray(f.running) ? f.running : [];
      const runningIds = new Set(running.map((t) => t.id));
      // After a reconnect everything we hold may be behind: refetch history lazily, and drop
      // live turns that ended while we were away (their rows arrive with the history).
      for (const s of this.sessions.values()) {
        s.stale = true; s.historyRequested = false; s.olderBefore = null;
        if (s.turn && !TERMINAL.has(s.turn.status) && !runningIds.has(s.turn.id)) s.turn = null;
      }
      this.sessionsAsked = []; this.dialogList.inFlight = 0; // answers of the old socket never come
      this._activate(f.active_session_id, fx);
      for (const t of running) this._applyTurn(t, fx);
      fx.send.push(this.requestDialogs(false));
      for (const p of this.pending) if (p.status === 'pending') fx.send.push(messageFrame(p));
      fx.render = true;
      if (this.readyCount === 1) fx.scrollToBottom = true;
    }

    on_ack(f, fx) {
      const p = this.pending.find((x) => x.client_msg_id === f.client_msg_id);
      if (!p) return;
      Object.assign(p, { status: 'accepted', message_id: f.message_id, session_id: f.session_id,
        queued: f.queued || 0 });
      this.clientIds.set(f.message_id, p.client_msg_id);
      if (p.media) this.media.set(f.message_id, p.media);
      this._noteSent(p, f.session_id, fx);
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
      if (fresh.length && s.id !== this.activeSessionId) this.unread.add(s.id);
      this._touchDialog(s.id, fresh, fx);
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

    on_notification(f, fx) {
      // A notification with an `id` may be re-sent (an outbound retry): show it once.
      if (f.id) {
        if (this.seenNotices.includes(f.id)) return;
        this.seenNotices.push(f.id);
        if (this.seenNotices.length > 200) this.seenNotices.shift();
      }
      // A notice about one turn (interrupted by a restart, a plain fallback) repeats what that
      // turn's own terminal state shows.
      if (f.turn_id) return;
      const level = f.level || 'info';
      this._systemLine(f.session_id || this.activeSessionId,
        { kind: 'notice', level, text: String(f.content || ''), info: f.info || null });
      if (level !== 'info' && !f.session_id) fx.toasts.push({ level, text: String(f.content || '') });
      fx.render = true;
    }

    on_error(f, fx) {
      if (f.client_msg_id) this.typedAnswers.delete(f.client_msg_id);
      const p = f.client_msg_id && this.pending.find((x) => x.client_msg_id === f.client_msg_id);
      if (p) {
        p.status = 'failed'; p.error = f.message || f.code || 'error'; p.errorCode = f.code; fx.render = true;
        return;
      }
      const where = (f.client_msg_id && this.commands.get(f.client_msg_id)) || this.activeSessionId;
      this._systemLine(where, { kind: 'error', level: 'error', code: f.code || 'error',
        text: String(f.message || ''), ref: f.ref || null });
      fx.render = true;
    }

    // --- internals ---------------------------------------------------------------------------

    _systemLine(sessionId, line) {
      if (!sessionId) return;
      const s = this.session(sessionId);
      line.key = `s:${sessionId}:${s.system.length}`;
      line.at = Date.now();
      // Shown after the rows the dialog had when it arrived, or after the turn then running.
      line.afterSeq = s.messages.length ? s.messages[s.messages.length - 1].seq : 0;
      line.afterTurn = s.turn && !TERMINAL.has(s.turn.status) ? s.turn.id : null;
      s.system.push(line);
      if (s.system.length > 50) s.system.shift();
    }

    _activate(sessionId, fx) {
      if (!sessionId) return;
      if (sessionId !== this.activeSessionId) fx.scrollToBottom = true;
      this.activeSessionId = sessionId;
      this.unread.delete(sessionId);
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
        if (p) { p.turnId = t.id; this._noteSent(p, t.session_id, fx); }
        t.seenAt = Date.now();
      } else t.seenAt = cur.seenAt;
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
      if (!p) return;
      this.clientIds.set(row.id, p.client_msg_id);
      if (p.media) this.media.set(row.id, p.media);
      this._dropPending(p);
    }

    _dropPending(p) { this.pending = this.pending.filter((x) => x !== p); }

    /** The active dialog as keyed view items (viewmodel.js). */
    viewItems() { return root.PicoBot.View.items(this); }
  }

  function messageFrame(p) {
    const f = { type: 'message', content: p.content, client_msg_id: p.client_msg_id };
    if (p.session_id) f.session_id = p.session_id;
    if (p.media) f.media = p.media;
    return f;
  }

  function sameSession(p, sessionId, activeId) {
    return p.session_id ? p.session_id === sessionId : sessionId === activeId;
  }

  function noteOf(t) { return { turnId: t.id, status: t.status, error: errorText(t.error) }; }

  /** The turn's `error` as text: the server sends a string (older ones an object). */
  function errorText(e) {
    if (!e) return '';
    if (typeof e === 'string') return e;
    return e.message || e.code || '';
  }

  const api = { ChatStore, newClientMsgId, errorText, sameSession, TERMINAL };
  root.PicoBot = Object.assign(root.PicoBot || {}, api);
  if (typeof module !== 'undefined' && module.exports) module.exports = api;
})(typeof window !== 'undefined' ? window : globalThis);
