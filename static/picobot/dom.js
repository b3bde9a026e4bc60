/* PicoBot WebUI — small DOM helpers shared by the UI modules. Untrusted text only ever goes
 * through textContent (h's `text`) or renderRichText (markdown.js sanitises). */
(function (root) {
  'use strict';

  /** Create an element; `text` sets textContent, `className` the class, other keys attributes
   *  (null/undefined/false skip one, true sets an empty one). */
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === 'text') el.textContent = v;
      else if (k === 'className') el.className = v;
      else el.setAttribute(k, v === true ? '' : v);
    }
    for (const c of children) if (c !== null && c !== undefined && c !== false) el.append(c);
    return el;
  }

  function setText(el, text) { if (el.textContent !== text) el.textContent = text; }

  function truncate(text, n) { text = String(text ?? ''); return text.length > n ? text.slice(0, n - 1) + '…' : text; }

  function argsText(args, pretty = false) {
    if (args === null || args === undefined) return '';
    if (typeof args === 'string') return args;
    try { return pretty ? JSON.stringify(args, null, 2) : JSON.stringify(args); } catch (e) { return String(args); }
  }

  /** Markdown through markdown.js (sanitised there); plain text when it is missing.
   *  `streaming`: the text may end inside an unfinished block. */
  function renderRichText(el, text, streaming = false) {
    const md = root.PicoBot && root.PicoBot.Markdown;
    if (md) { md.render(el, String(text ?? ''), { streaming }); return; }
    el.replaceChildren(h('p', { className: 'plain', text: String(text ?? '') }));
  }

  /** Keyed list update: reuse elements by key, create missing ones, drop the rest, keep order. */
  function reconcile(parent, items, create, update) {
    const old = parent._keyed || new Map();
    const next = new Map();
    let cursor = parent.firstChild;
    for (const item of items) {
      let el = old.get(item.key);
      if (el && el._kind !== undefined && el._kind !== item.kind) el = null; // kind changed: rebuild
      if (el) { if (update) update(el, item); } else { el = create(item); el._kind = item.kind; }
      next.set(item.key, el);
      if (el === cursor) cursor = cursor.nextSibling; else parent.insertBefore(el, cursor);
    }
    for (const [k, el] of old) if (next.get(k) !== el) el.remove();
    parent._keyed = next;
  }

  /** Copy text to the clipboard; the button says "Copied" for a moment (or "Copy failed"). */
  async function copyText(button, text) {
    let ok = false;
    try {
      if (navigator.clipboard && root.isSecureContext) { await navigator.clipboard.writeText(text); ok = true; }
    } catch (e) { ok = false; }
    if (!ok) {
      // Plain-http LAN use has no Clipboard API: the old selection copy still works there.
      const area = h('textarea', { className: 'sr-only', 'aria-hidden': 'true' });
      area.value = text;
      document.body.append(area);
      area.select();
      try { ok = document.execCommand('copy'); } catch (e) { ok = false; }
      area.remove();
    }
    button.dataset.copied = ok ? 'yes' : 'no';
    button.setAttribute('aria-label', ok ? 'Copied' : 'Copy failed');
    button.replaceChildren(icon(ok ? 'check' : 'alert'));
    clearTimeout(button._timer);
    button._timer = setTimeout(() => {
      delete button.dataset.copied; button.setAttribute('aria-label', 'Copy'); button.replaceChildren(icon('copy'));
    }, 1500);
    return ok;
  }

  function copyButton(getText) {
    const b = h('button', { type: 'button', className: 'msg-action copy-btn', 'data-testid': 'copy',
      'aria-label': 'Copy', title: 'Copy' }, icon('copy'));
    b.addEventListener('click', () => copyText(b, getText()));
    return b;
  }

  /** A small line icon (SVG built in the DOM: no emoji or symbol font needed, nothing inline to
   *  allow). Paths are separated by "|". */
  const ICONS = {
    copy: 'M9 9h11v11H9z|M5 15H4V4h11v1',
    check: 'M5 12l5 5 9-10',
    alert: 'M12 7v6|M12 17h.01',
    trash: 'M4 7h16M10 11v6M14 11v6M6 7l1 13h10l1-13M9 7V4h6v3',
    clip: 'M21 11.5l-8.5 8.5a5 5 0 01-7-7L14 4.5a3.3 3.3 0 014.7 4.7l-8.6 8.6a1.7 1.7 0 01-2.4-2.4L15.5 7.6',
  };

  function icon(name) {
    const ns = 'http://www.w3.org/2000/svg';
    const svg = document.createElementNS(ns, 'svg');
    for (const [k, v] of Object.entries({ viewBox: '0 0 24 24', width: '16', height: '16', fill: 'none',
      stroke: 'currentColor', 'stroke-width': '2', 'stroke-linecap': 'round', 'stroke-linejoin': 'round', 'aria-hidden': 'true' })) {
      svg.setAttribute(k, v);
    }
    for (const d of ICONS[name].split('|')) {
      const path = document.createElementNS(ns, 'path');
      path.setAttribute('d', d);
      svg.append(path);
    }
    return svg;
  }

  root.PicoBot = Object.assign(root.PicoBot || {}, {
    Dom: { h, setText, truncate, argsText, renderRichText, reconcile, copyText, copyButton, icon },
  });
})(window);
