/* PicoBot WebUI — the sidebar's dialog list in ChatStore (PROTOCOL.md §1 `sessions`,
 * `session_changed`). No DOM here; loaded after protocol.js, it adds these methods to ChatStore.
 *
 * The list holds the dialogs loaded so far, most recent first: the first page, then further
 * pages as the sidebar scrolls (`offset` = what is loaded), all filtered by the server-side
 * `query`. Our `sessions` requests are answered in order on one connection, so a FIFO tells the
 * sidebar's answers from a typed `/sessions` (shown in the transcript, then the sidebar refreshed).
 */
(function (root) {
  'use strict';

  const DIALOG_PAGE = 20; // sidebar page size (the server allows up to 100)
  const DEFAULT_TITLE = 'New chat'; // until auto-titling names it, the preview tells dialogs apart

  /** A sidebar preview as the server makes it (dialog_reads.preview_text): whitespace collapsed,
   *  at most 100 characters (… marks a cut), "Image" / "N images" for images alone. */
  function previewOf(text, images = 0) {
    const flat = String(text || '').replace(/\s+/g, ' ').trim();
    if (!flat && images) return images === 1 ? 'Image' : `${images} images`;
    return flat.length <= 100 ? flat : flat.slice(0, 99).trimEnd() + '…';
  }

  /** Merge one `sessions` answer into the loaded sidebar list (most recent first): offset 0
   *  replaces the list, a later page appends the dialogs not listed yet (activity may have moved
   *  one between pages). */
  function mergeDialogPage(list, frame) {
    const items = Array.isArray(frame.items) ? frame.items : [];
    if (!frame.offset) return items.slice();
    const have = new Set(list.map((d) => d.session_id));
    return list.concat(items.filter((d) => !have.has(d.session_id)));
  }

  function titleMatches(title, query) {
    return !query || String(title || '').toLowerCase().includes(query.toLowerCase());
  }

  class DialogListRules {
    /** The `sessions` request for the sidebar: the first page (`more` false: also after a search
     *  or to refresh what is loaded) or the next one; null while a page is in flight or none is left. */
    requestDialogs(more = false) {
      const list = this.dialogList;
      if (more && (!list.hasMore || list.inFlight)) return null;
      const f = { type: 'sessions', offset: more ? this.dialogs.length : 0,
        limit: more ? DIALOG_PAGE : Math.min(100, Math.max(DIALOG_PAGE, this.dialogs.length)) };
      if (list.query) f.query = list.query;
      list.inFlight += 1;
      this.sessionsAsked.push('sidebar');
      return f;
    }

    /** Search the sidebar by title or first message (server side); returns the request for the first page. */
    setQuery(query) {
      this.dialogList.query = String(query || '').trim();
      return this.requestDialogs(false);
    }

    on_sessions(f, fx) {
      if (this.sessionsAsked.shift() === 'command') {
        // A typed /sessions: a readable list in the transcript, and a fresh sidebar.
        this._systemLine(this.activeSessionId, { kind: 'sessions', items: f.items || [], hasMore: !!f.has_more });
        fx.send.push(this.requestDialogs(false));
        fx.render = true;
        return;
      }
      const list = this.dialogList;
      list.inFlight = Math.max(0, list.inFlight - 1);
      if ((f.query || '') !== list.query) return; // the answer to a search typed over since
      this.dialogs = mergeDialogPage(this.dialogs, f);
      for (const d of this.dialogs) this.known.set(d.session_id, d);
      list.hasMore = !!f.has_more;
      const active = this.dialogs.find((d) => d.active);
      if (!f.offset && active && active.session_id !== this.activeSessionId) this._activate(active.session_id, fx);
      fx.render = true;
    }

    /** False when "+ New" has nothing to do: the dialog on screen is still empty (no history,
     *  nothing pending, no turn) and keeps the default title — the composer is focused instead. */
    newDialogNeeded() {
      const s = this.activeSession;
      const d = this.activeDialog;
      if (!s || !s.loaded || !d || s.messages.length || s.hasMore || s.turn) return true;
      if (this.pending.some((p) => root.PicoBot.sameSession(p, s.id, this.activeSessionId))) return true;
      return !!d.title && d.title !== DEFAULT_TITLE;
    }

    /** A typed `/rename` or `/new` is answered by `session_changed` alone: say what it did under
     *  the command line (the sidebar's own rename and new echo nothing, so expect nothing). */
    _answerTyped(f) {
      if (f.deleted) return;
      for (const [id, e] of this.typedAnswers) {
        let text = null;
        if (e.kind === 'rename' && f.session_id === e.sessionId) text = `Renamed to “${f.title || ''}”.`;
        else if (e.kind === 'new' && f.active && f.session_id !== e.sessionId) text = 'New dialog started.';
        if (!text) continue;
        this.typedAnswers.delete(id);
        this._systemLine(e.sessionId, { kind: 'notice', level: 'info', text });
        return;
      }
    }

    /** A message sent into a dialog shows in its sidebar item at once (its ack, or its turn's
     *  start): the count as its commit makes it, and the preview when the item had none. Counted
     *  once: its commit then adds nothing for it. */
    _noteSent(p, sessionId, fx) {
      const d = this.dialogs.find((x) => x.session_id === sessionId);
      if (!p || !d || this.sentCounted.has(p.client_msg_id)) return;
      this.sentCounted.add(p.client_msg_id);
      d.message_count = (d.message_count || 0) + 1;
      if (!d.preview) d.preview = previewOf(p.content, p.media ? p.media.length : 0);
      fx.render = true;
    }

    on_session_changed(f, fx) {
      this._answerTyped(f);
      if (f.deleted) {
        this.dialogs = this.dialogs.filter((d) => d.session_id !== f.session_id);
        this.sessions.delete(f.session_id);
        this.unread.delete(f.session_id);
        fx.render = true;
        return;
      }
      let d = this.dialogs.find((x) => x.session_id === f.session_id);
      this.known.set(f.session_id, Object.assign(this.known.get(f.session_id) || {}, f));
      // A dialog not loaded yet is listed when it becomes the active one (new, or switched to).
      if (!d && f.active && titleMatches(f.title, this.dialogList.query)) {
        d = { session_id: f.session_id, message_count: 0, last_active_at: Date.now() };
        this.dialogs.unshift(d);
      }
      if (d) Object.assign(d, { dialog_id: f.dialog_id, title: f.title, active: !!f.active });
      if (f.active) {
        for (const x of this.dialogs) x.active = x === d;
        this._activate(f.session_id, fx);
      }
      fx.render = true;
    }

    /** Keep the sidebar current without a `sessions` round trip: newest activity first. */
    _touchDialog(sessionId, rows, fx) {
      const d = this.dialogs.find((x) => x.session_id === sessionId);
      if (!rows.length) return;
      if (!d) {
        // Activity moved a dialog we have not loaded to the top: refresh the first page.
        if (!this.dialogList.query && !this.dialogList.inFlight) fx.send.push(this.requestDialogs(false));
        return;
      }
      d.last_active_at = Math.max(d.last_active_at || 0, ...rows.map((r) => r.created_at || 0));
      // message_count counts user messages (DESIGN §3), as the server's `sessions` does; those
      // counted when sent (_noteSent) are not counted again.
      const users = rows.filter((r) => r.role === 'user');
      d.message_count = (d.message_count || 0) + users.filter((r) => !this.sentCounted.has(this.clientIds.get(r.id))).length;
      if (!d.preview && users.length) d.preview = previewOf(users[0].content, (users[0].media || []).length);
      this.dialogs = [d, ...this.dialogs.filter((x) => x !== d)];
    }
  }

  const target = root.PicoBot.ChatStore.prototype;
  for (const name of Object.getOwnPropertyNames(DialogListRules.prototype)) {
    if (name !== 'constructor') Object.defineProperty(target, name, Object.getOwnPropertyDescriptor(DialogListRules.prototype, name));
  }
  root.PicoBot = Object.assign(root.PicoBot, { mergeDialogPage, titleMatches, previewOf, DIALOG_PAGE, DEFAULT_TITLE });
})(typeof window !== 'undefined' ? window : globalThis);
