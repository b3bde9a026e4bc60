/* PicoBot WebUI — the dialog sidebar: every dialog of the chat, paged as the list scrolls,
 * searched by title or first message on the server, grouped by date, with unread marks, inline rename, delete with
 * a confirm, and new. Changes go through the slash commands' control path (`/switch`, `/rename`,
 * `/delete`, `/new` as `message` frames naming the dialog's session_id), like typing them.
 */
(function (root) {
  'use strict';

  const Dom = root.PicoBot.Dom;
  const { h, reconcile } = Dom;
  const View = root.PicoBot.View;
  const SEARCH_DELAY_MS = 250;
  const DEFAULT_TITLE = root.PicoBot.DEFAULT_TITLE; // until auto-titling names it, the preview tells dialogs apart

  function create(ctx, ui) {
    const { store } = ctx;
    let mode = null; // {sessionId, kind: 'rename' | 'delete'}: the one item being edited
    let searchTimer = null;

    function command(content, sessionId) { ctx.sendFrame(store.command(content, sessionId)); }

    function switchTo(d) {
      ctx.setSidebar(false);
      if (d.session_id !== store.activeSessionId && d.dialog_id) command(`/switch ${d.dialog_id}`);
    }

    function setMode(next) {
      mode = next;
      render();
      if (!mode) return;
      const el = ui.sessions.querySelector(mode.kind === 'rename' ? '[data-testid="rename-input"]' : '[data-testid="confirm-delete"]');
      if (el) { el.focus(); if (el.select) el.select(); }
    }

    /** True while an inline rename or delete confirm is open (Esc belongs to it). */
    function busy() { return !!mode; }

    function buildItem(it) {
      const li = h('li', { className: 'session-row', 'data-testid': 'session-row' });
      li.addEventListener('click', (e) => onItemClick(li._d, e));
      li.addEventListener('keydown', (e) => onItemKey(li._d, e));
      updateItem(li, it);
      return li;
    }

    function updateItem(li, { d }) {
      li._d = d;
      li.dataset.sessionId = d.session_id;
      const editing = mode && mode.sessionId === d.session_id ? mode.kind : '';
      const unread = store.unread.has(d.session_id);
      const active = d.session_id === store.activeSessionId;
      const meta = `${View.timeLabels(d.last_active_at).short}${d.message_count ? ` · ${d.message_count} msg` : ''}`;
      const preview = (!d.title || d.title === DEFAULT_TITLE) && d.preview ? d.preview : '';
      const sig = JSON.stringify([d.title, active, unread, meta, editing, preview]);
      if (li._sig === sig) return;
      li._sig = sig;
      li.classList.toggle('active', active);
      li.classList.toggle('unread', unread);
      const title = d.title || 'Untitled dialog';
      if (editing === 'rename') {
        const input = h('input', { type: 'text', className: 'rename-input', 'data-testid': 'rename-input',
          maxlength: '200', 'aria-label': 'New title' });
        input.value = d.title || '';
        li.replaceChildren(input,
          h('button', { type: 'button', className: 'icon-action', 'data-action': 'save', 'data-testid': 'rename-save', 'aria-label': 'Save', title: 'Save', text: '✓' }),
          h('button', { type: 'button', className: 'icon-action', 'data-action': 'cancel', 'aria-label': 'Cancel', title: 'Cancel', text: '✕' }));
        return;
      }
      if (editing === 'delete') {
        li.replaceChildren(h('span', { className: 'confirm-text', text: `Delete “${title}”?` }),
          h('button', { type: 'button', className: 'btn btn-small btn-danger', 'data-action': 'confirm-delete', 'data-testid': 'confirm-delete', text: 'Delete' }),
          h('button', { type: 'button', className: 'btn btn-small', 'data-action': 'cancel', 'data-testid': 'cancel-delete', text: 'Cancel' }));
        return;
      }
      const btn = h('button', { type: 'button', className: 'session-item', 'data-testid': 'session-item',
        'data-action': 'open', 'data-session-id': d.session_id, 'aria-current': active ? 'true' : null, title },
      h('span', { className: 'session-title', text: title }),
      preview ? h('span', { className: 'session-preview', 'data-testid': 'session-preview', text: preview }) : null,
      h('span', { className: 'session-meta', text: meta }));
      const mark = unread ? h('span', { className: 'unread-mark', 'data-testid': 'unread-mark', title: 'New messages', 'aria-label': 'unread' }) : '';
      const del = h('button', { type: 'button', className: 'icon-action', 'data-action': 'delete', 'data-testid': 'delete-dialog', 'aria-label': `Delete ${title}`, title: 'Delete' });
      del.append(Dom.icon('trash'));
      li.replaceChildren(btn, mark,
        h('span', { className: 'session-actions' },
          h('button', { type: 'button', className: 'icon-action', 'data-action': 'rename', 'data-testid': 'rename-dialog', 'aria-label': `Rename ${title}`, title: 'Rename', text: '✎' }),
          del));
    }

    function onItemClick(d, e) {
      const action = e.target.closest('[data-action]');
      if (!action) return;
      e.stopPropagation();
      const kind = action.dataset.action;
      if (kind === 'open') switchTo(d);
      else if (kind === 'rename' || kind === 'delete') setMode({ sessionId: d.session_id, kind });
      else if (kind === 'cancel') setMode(null);
      else if (kind === 'save') saveRename(d, action.parentElement.querySelector('input'));
      else if (kind === 'confirm-delete') { setMode(null); command('/delete', d.session_id); }
    }

    function onItemKey(d, e) {
      if (!mode || mode.sessionId !== d.session_id) return;
      if (e.key === 'Escape') { e.preventDefault(); e.stopPropagation(); setMode(null); }
      else if (e.key === 'Enter' && mode.kind === 'rename' && !e.isComposing) { e.preventDefault(); saveRename(d, e.target); }
    }

    function saveRename(d, input) {
      const title = input ? input.value.replace(/\s+/g, ' ').trim() : '';
      setMode(null);
      if (title && title !== d.title) command(`/rename ${title}`, d.session_id);
    }

    function render() {
      const groups = View.groupDialogs(store.dialogs);
      const items = [];
      for (const g of groups) {
        items.push({ key: 'g:' + g.label, kind: 'group', label: g.label });
        for (const d of g.dialogs) items.push({ key: 'd:' + d.session_id, kind: 'dialog', d });
      }
      reconcile(ui.sessions, items,
        (it) => (it.kind === 'group' ? h('li', { className: 'session-group', 'data-testid': 'session-group', text: it.label }) : buildItem(it)),
        (el, it) => { if (it.kind === 'dialog') updateItem(el, it); });
      const list = store.dialogList;
      ui.noMatch.hidden = !(list.query && !store.dialogs.length && !list.inFlight);
      ui.loadMore.hidden = !list.hasMore;
      ui.loadMore.disabled = list.inFlight > 0;
      maybeLoadMore();
    }

    /** Load the next page when the end of the list is in view (or the list does not fill it). */
    function maybeLoadMore() {
      const sc = ui.sidebar;
      if (sc.scrollTop + sc.clientHeight >= sc.scrollHeight - 120) ctx.sendFrame(store.requestDialogs(true), true);
    }

    ui.sidebar.addEventListener('scroll', maybeLoadMore, { passive: true });
    ui.loadMore.addEventListener('click', () => ctx.sendFrame(store.requestDialogs(true)));
    ui.search.addEventListener('input', () => {
      clearTimeout(searchTimer);
      searchTimer = setTimeout(() => { ctx.sendFrame(store.setQuery(ui.search.value)); }, SEARCH_DELAY_MS);
    });
    ui.search.addEventListener('keydown', (e) => {
      if (e.key === 'Escape' && ui.search.value) {
        e.preventDefault(); e.stopPropagation();
        ui.search.value = '';
        ctx.sendFrame(store.setQuery(''));
      }
    });
    // A dialog still empty and untitled is the new one: never pile up empty "New chat"s.
    ui.newDialog.addEventListener('click', () => {
      ctx.setSidebar(false);
      if (store.newDialogNeeded()) command('/new');
      else ctx.focusComposer();
    });

    return { render, switchTo, busy, refreshTimes: () => { for (const li of ui.sessions.children) li._sig = null; render(); } };
  }

  root.PicoBot = Object.assign(root.PicoBot || {}, { Sidebar: { create } });
})(window);
