/* PicoBot WebUI — Markdown rendering of assistant text (placeholder until the renderer lands).
 *
 * PicoBot.Markdown.render(el, text, {streaming}) replaces el's children with the rendered text.
 */
(function (root) {
  'use strict';
  function render(el, text) {
    const p = document.createElement('p');
    p.className = 'plain';
    p.textContent = text;
    el.replaceChildren(p);
  }
  root.PicoBot = Object.assign(root.PicoBot || {}, { Markdown: { render } });
})(window);
