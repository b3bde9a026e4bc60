/* PicoBot WebUI — Markdown for assistant text: markdown-it → DOMPurify → DOM.
 *
 * PicoBot.Markdown.render(el, text, {streaming}) replaces el's children with `text` rendered.
 * Model output is untrusted: raw HTML shows as text (html: false); links are http(s)/mailto only
 * and open in a new tab without opener or referrer; images are never loaded but shown as a link
 * (a remote image in model output can carry data out of the conversation); markdown-it's HTML goes
 * through DOMPurify (allow-list: no style, SVG, MathML or forms) before it touches the DOM, and the
 * copy buttons are DOM nodes added after sanitising.
 *
 * Streaming: the text is split into top-level blocks by markdown-it's block parser (line maps).
 * A closed block is rendered once: its nodes stay in place while the element streams, and other
 * elements showing the same block get a clone of a cached template; only the open tail (the last
 * block while `streaming`) is rendered again. Block by block equals the whole text at once
 * (reference definitions are shared through env), so the final render matches renderOnce().
 * Without window.markdownit / DOMPurify the text shows as plain text.
 *
 * PicoBot.Markdown.stats: {renders, finals, lastMs, maxMs, totalMs, lastAt, lastFinalAt,
 * lastFinalMs, blocksBuilt, blocksCloned, blocksReused} (performance.now() ms; for tests, bench).
 */
(function (root) {
  'use strict';

  const HIGHLIGHT_MAX_CHARS = 20000; // bigger code blocks stay plain (highlighting is linear but not free)
  const TEMPLATES_MAX = 500; // closed blocks kept as sanitised templates (LRU)
  const SAFE_URL = /^(?:https?:|mailto:)/i;
  const PURIFY_CONFIG = {
    ALLOWED_TAGS: ['a', 'blockquote', 'br', 'code', 'del', 'div', 'em', 'h1', 'h2', 'h3', 'h4', 'h5', 'h6',
      'hr', 'li', 'ol', 'p', 'pre', 's', 'span', 'strong', 'table', 'tbody', 'td', 'th', 'thead', 'tr', 'ul'],
    ALLOWED_ATTR: ['class', 'href', 'start', 'title'],
    FORBID_TAGS: ['style', 'svg', 'math', 'form', 'input', 'button', 'textarea', 'select', 'img', 'iframe'],
    FORBID_ATTR: ['style'],
    ALLOWED_URI_REGEXP: SAFE_URL,
    ALLOW_DATA_ATTR: false,
    ALLOW_ARIA_ATTR: false,
    RETURN_DOM_FRAGMENT: true,
  };
  const PARTIAL_FENCE_LINE = /^ {0,3}(`{1,}|~{1,})$/;

  const stats = { renders: 0, finals: 0, lastMs: 0, maxMs: 0, totalMs: 0, lastAt: 0, lastFinalAt: 0,
    lastFinalMs: 0, blocksBuilt: 0, blocksCloned: 0, blocksReused: 0 };
  const states = new WeakMap(); // el → {entries: [{key, nodes}], count}: what render() put there
  const templates = new Map(); // block key → sanitised DocumentFragment (insertion order = LRU)
  let engine; // undefined: not tried yet; null: libraries missing

  // --- the markdown-it instance -----------------------------------------------------------------

  function getEngine() {
    if (engine !== undefined) return engine;
    const purify = root.DOMPurify;
    if (typeof root.markdownit !== 'function' || !purify || !purify.isSupported) return null; // retried later
    const md = root.markdownit({ html: false, linkify: true, breaks: true, typographer: false, highlight });
    md.validateLink = (url) => SAFE_URL.test(String(url).trim());
    md.core.ruler.push('picobot_align', alignToClass);
    wrapCodeRule(md, 'fence', (t) => md.utils.unescapeAll(t.info || '').trim().split(/\s+/)[0]);
    wrapCodeRule(md, 'code_block', () => '');
    md.renderer.rules.image = (tokens, idx, options, env, self) => {
      const t = tokens[idx];
      const label = self.renderInlineAsText(t.children || [], options, env) || t.attrGet('src');
      return `<a href="${md.utils.escapeHtml(t.attrGet('src'))}" class="md-image-link">` +
        `${md.utils.escapeHtml(`Image: ${label}`)}</a>`;
    };
    engine = md;
    return md;
  }

  /** markdown-it's highlight hook: known languages only (no auto-detection), '' = escape as is. */
  function highlight(code, lang) {
    const hljs = root.hljs;
    if (!hljs || !lang || code.length > HIGHLIGHT_MAX_CHARS || !hljs.getLanguage(lang)) return '';
    try { return hljs.highlight(code, { language: lang, ignoreIllegals: true }).value; } catch (e) { return ''; }
  }

  /** Table alignment comes as style="text-align:…", which the sanitiser drops: make it a class. */
  function alignToClass(state) {
    for (const t of state.tokens) {
      if ((t.type !== 'th_open' && t.type !== 'td_open') || !t.attrs) continue;
      const m = /text-align:\s*(left|right|center)/.exec(t.attrGet('style') || '');
      t.attrs = t.attrs.filter(([name]) => name !== 'style');
      if (m) t.attrJoin('class', `align-${m[1]}`);
    }
  }

  function wrapCodeRule(md, name, langOf) {
    const inner = md.renderer.rules[name];
    md.renderer.rules[name] = (tokens, idx, options, env, self) => {
      const lang = langOf(tokens[idx]);
      return `<div class="code-block"><div class="code-head"><span class="code-lang">` +
        `${md.utils.escapeHtml(lang || 'text')}</span></div>${inner(tokens, idx, options, env, self)}</div>\n`;
    };
  }

  // --- HTML → sanitised, decorated nodes --------------------------------------------------------

  function build(md, src, env) {
    stats.blocksBuilt++;
    const html = md.render(src, { references: Object.assign({}, env.references) });
    const frag = root.DOMPurify.sanitize(html, PURIFY_CONFIG);
    for (const a of frag.querySelectorAll('a')) {
      a.setAttribute('target', '_blank');
      a.setAttribute('rel', 'noopener noreferrer nofollow');
    }
    for (const head of frag.querySelectorAll('.code-head')) head.append(copyButton());
    return frag;
  }

  function fromTemplate(md, key, src, env) {
    let tpl = templates.get(key);
    if (tpl) templates.delete(key); // re-inserted below: most recently used
    else {
      tpl = build(md, src, env);
      if (templates.size >= TEMPLATES_MAX) templates.delete(templates.keys().next().value);
    }
    templates.set(key, tpl);
    stats.blocksCloned++;
    return Array.from(tpl.cloneNode(true).childNodes);
  }

  // --- splitting into top-level blocks ------------------------------------------------------------

  /** Top-level blocks of `text`: [{src, type, markup}], plus the env (reference definitions). */
  function splitBlocks(md, text, streaming) {
    const env = {};
    const tokens = [];
    md.block.parse(text, md, env, tokens);
    const lines = text.split('\n');
    const blocks = [];
    for (const t of tokens) {
      if (t.level !== 0 || t.nesting === -1 || !t.map) continue;
      let end = t.map[1];
      // While streaming, a half-typed closing fence ("`", "``") is not shown as code.
      if (streaming && t.type === 'fence' && end === lines.length && end - 1 > t.map[0]) {
        const m = PARTIAL_FENCE_LINE.exec(lines[end - 1]);
        if (m && m[1][0] === t.markup[0] && m[1].length < t.markup.length) end -= 1;
      }
      blocks.push({ src: lines.slice(t.map[0], end).join('\n') });
    }
    const refs = env.references && Object.keys(env.references).length ? JSON.stringify(env.references) : '';
    return { blocks, env, refs };
  }

  // --- public API -------------------------------------------------------------------------------------

  function normalize(text) { return String(text ?? '').replace(/\r\n?/g, '\n').replace(/\0/g, '\uFFFD'); }

  function plain(el, text) {
    states.delete(el);
    el.classList.remove('md');
    const p = document.createElement('p');
    p.className = 'plain';
    p.textContent = text;
    el.replaceChildren(p);
  }

  /** Render `text` into `el`; `streaming`: the text may end inside an unfinished block. */
  function render(el, text, opts) {
    const t0 = performance.now();
    const streaming = !!(opts && opts.streaming);
    const md = getEngine();
    text = normalize(text);
    if (!md) { plain(el, text); return; }
    const { blocks, env, refs } = splitBlocks(md, text, streaming);
    let prev = states.get(el);
    if (prev && prev.count !== el.childNodes.length) prev = null; // someone else changed el
    const pool = new Map(); // this element's closed blocks, reusable in place
    for (const e of (prev ? prev.entries : [])) {
      if (e.key === null) continue;
      if (!pool.has(e.key)) pool.set(e.key, []);
      pool.get(e.key).push(e.nodes);
    }
    const entries = blocks.map((b, i) => {
      if (streaming && i === blocks.length - 1) {
        return { key: null, nodes: Array.from(build(md, b.src, env).childNodes) };
      }
      const key = `${refs}\u0000${b.src}`;
      const reused = pool.has(key) && pool.get(key).shift();
      if (reused) { stats.blocksReused++; return { key, nodes: reused }; }
      return { key, nodes: fromTemplate(md, key, b.src, env) };
    });
    updateChildren(el, prev ? prev.entries : null, entries);
    el.classList.add('md');
    states.set(el, { entries, count: el.childNodes.length });
    record(t0, streaming);
  }

  /** Touch the DOM only from the first block that changed. */
  function updateChildren(el, before, after) {
    if (!before) { el.replaceChildren(...after.flatMap((e) => e.nodes)); return; }
    let same = 0;
    while (same < before.length && same < after.length && before[same].nodes === after[same].nodes) same++;
    for (const e of before.slice(same)) for (const n of e.nodes) n.remove();
    for (const e of after.slice(same)) el.append(...e.nodes);
  }

  function record(t0, streaming) {
    const now = performance.now();
    const ms = now - t0;
    stats.renders++;
    stats.lastMs = ms;
    stats.maxMs = Math.max(stats.maxMs, ms);
    stats.totalMs += ms;
    stats.lastAt = now;
    if (!streaming) { stats.finals++; stats.lastFinalAt = now; stats.lastFinalMs = ms; }
  }

  /** The whole text in one markdown-it pass, no cache: what render() must equal (tests, bench). */
  function renderOnce(el, text) {
    const md = getEngine();
    text = normalize(text);
    if (!md) { plain(el, text); return; }
    states.delete(el);
    el.classList.add('md');
    el.replaceChildren(build(md, text, {}));
  }

  // --- copy buttons (one delegated listener, so cloned templates need no wiring) ----------------

  function copyButton() {
    const b = document.createElement('button');
    b.type = 'button';
    b.className = 'code-copy';
    b.setAttribute('data-testid', 'copy-code');
    b.setAttribute('aria-label', 'Copy code');
    b.textContent = 'Copy';
    return b;
  }

  function copyText(text) {
    if (navigator.clipboard && root.isSecureContext) {
      return navigator.clipboard.writeText(text).then(() => true, () => fallbackCopy(text));
    }
    return Promise.resolve(fallbackCopy(text));
  }

  /** Insecure contexts (plain http on a LAN address) have no navigator.clipboard. */
  function fallbackCopy(text) {
    const ta = document.createElement('textarea');
    ta.className = 'md-copy-buffer';
    ta.value = text;
    ta.setAttribute('readonly', '');
    document.body.append(ta);
    ta.select();
    let ok = false;
    try { ok = document.execCommand('copy'); } catch (e) { ok = false; }
    ta.remove();
    return ok;
  }

  document.addEventListener('click', (e) => {
    const btn = e.target instanceof Element ? e.target.closest('button.code-copy') : null;
    if (!btn) return;
    const code = btn.closest('.code-block') && btn.closest('.code-block').querySelector('pre');
    // The newline that ends every fenced block is not part of the code.
    copyText(code ? code.textContent.replace(/\n$/, '') : '').then((ok) => {
      btn.textContent = ok ? 'Copied' : 'Copy failed';
      btn.dataset.state = ok ? 'copied' : 'failed';
      setTimeout(() => { btn.textContent = 'Copy'; delete btn.dataset.state; }, 1500);
    });
  });

  root.PicoBot = Object.assign(root.PicoBot || {}, { Markdown: { render, renderOnce, stats } });
})(window);
