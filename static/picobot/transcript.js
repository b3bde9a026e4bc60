/* PicoBot WebUI — the transcript: user messages, turns (live and committed alike), system lines.
 *
 * Rendering is keyed (viewmodel.js gives the keys): every element is built once and updated in
 * place, so an expanded "Thinking…" or tool card stays open while text streams in and across the
 * commit. A turn always has one footer line (phase while running, then time and copy), so its
 * height does not change when it ends.
 */
(function (root) {
  'use strict';

  const { h, setText, truncate, argsText, renderRichText, reconcile, copyButton } = root.PicoBot.Dom;
  const View = root.PicoBot.View;
  const PHASES = { queued: 'Queued…', compacting: 'Compacting history…', reasoning: 'Thinking…',
    responding: 'Writing…', acting: 'Running tools…', finalizing: 'Finalizing…', reconnecting: 'Reconnecting…' };
  const CUT_OFF = { answer: 'Cut off at the model\'s output limit.',
    thinking: 'The model stopped at its output limit while thinking; no answer.' };
  const TOOL_ICONS = { running: '◌', completed: '✓', failed: '✗', cancelled: '–' };
  const TOOL_STATES = { running: 'running…', completed: 'done', failed: 'failed', cancelled: 'not run' };

  function timeEl() { return h('time', { className: 'msg-time', 'data-testid': 'message-time' }); }

  function setTime(el, ms) {
    const t = View.timeLabels(ms);
    setText(el, t.short);
    if (t.full) { el.title = t.full; el.dateTime = new Date(ms).toISOString(); }
  }

  function shell(role, extra) {
    return h('article', Object.assign({ className: `msg msg-${role}`, 'data-testid': 'message', 'data-role': role }, extra));
  }

  /** An image of a history row (`{mime_type, url}`) as the `message` frame's `{mime_type, data}`. */
  async function fetchImage(m) {
    const r = await fetch(m.url, { credentials: 'same-origin' });
    if (!r.ok) throw new Error(`HTTP ${r.status}`);
    const bytes = new Uint8Array(await r.arrayBuffer());
    let bin = '';
    for (let i = 0; i < bytes.length; i += 0x8000) bin += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
    return { mime_type: m.mime_type, data: btoa(bin) };
  }

  function create(ctx, list) {
    const { store } = ctx;

    /** Resend a failed turn's message with its images (fetched back from the server). */
    function retryTurn(turnId, button) {
      const src = store.retrySource(turnId);
      if (!src) return;
      Promise.all(src.media.map(fetchImage)).then(
        (media) => ctx.sendMessage(store.retryTurn(turnId, media)),
        () => { button.disabled = false; ctx.toast('warning', 'The images of that message could not be loaded; try again.'); });
    }

    // --- user messages ------------------------------------------------------------------------
    function buildUser(it) {
      const el = shell('user');
      const bubble = h('div', { className: 'bubble', text: it.text, hidden: !it.text }); // images alone: no empty bubble
      const thumbs = h('div', { className: 'thumbs', 'data-testid': 'message-images' });
      const meta = h('span', { className: 'msg-meta' });
      el._text = it.text;
      const origin = h('div', { className: 'msg-origin', 'data-testid': 'message-origin', hidden: true });
      el.append(origin, bubble, thumbs, h('div', { className: 'msg-foot' }, timeEl(), copyButton(() => el._text), meta));
      updateUser(el, it);
      return el;
    }

    function updateUser(el, it) {
      el.dataset.status = it.status;
      if (it.messageId) el.dataset.messageId = it.messageId;
      if (it.clientMsgId) el.dataset.clientMsgId = it.clientMsgId;
      updateThumbs(el.querySelector('.thumbs'), it.media);
      const origin = el.querySelector('.msg-origin');
      if (it.origin && origin.hidden) { origin.textContent = it.origin; origin.hidden = false; el.dataset.origin = 'automated'; }
      setTime(el.querySelector('.msg-time'), it.at);
      const meta = el.querySelector('.msg-meta');
      const sig = `${it.status}|${it.queued}|${it.error}`;
      if (meta._sig === sig) return;
      meta._sig = sig;
      if (it.status === 'pending') meta.replaceChildren('Sending…');
      else if (it.status === 'accepted') meta.replaceChildren(it.queued ? `Queued (${it.queued} ahead)` : 'Delivered');
      else if (it.status === 'failed') {
        const retry = h('button', { type: 'button', className: 'link-btn', 'data-testid': 'retry', text: 'Retry' });
        retry.addEventListener('click', () => ctx.sendFrame(store.retryPending(it.clientMsgId)));
        const dismiss = h('button', { type: 'button', className: 'link-btn', 'data-testid': 'dismiss', text: 'Dismiss' });
        dismiss.addEventListener('click', () => { store.discardPending(it.clientMsgId); ctx.scheduleRender(); });
        const why = h('span', { className: 'error-text', title: it.errorCode || '',
          text: `Not sent — ${View.friendlyError(it.errorCode, it.error)}` });
        // A refusal of the message itself (bad image, too long) would come back on a resend.
        if (View.retryable(it.errorCode)) meta.replaceChildren(why, ' ', retry, ' ', dismiss);
        else meta.replaceChildren(why, ' ', dismiss);
      } else meta.replaceChildren();
    }

    /** Thumbnails are built once (a committed message keeps the ones it was sent with: no
     *  reload, no jump); each becomes a link to the full-size image once the server's URL is
     *  known (history `media[].url`), opened in a new tab. */
    function updateThumbs(thumbs, media) {
      if (media && !thumbs.childElementCount) {
        for (const m of media) {
          thumbs.append(h('a', { className: 'thumb-link', 'data-testid': 'message-image' },
            h('img', { src: m.src, alt: 'Attached image', className: 'thumb' })));
        }
      }
      (media || []).forEach((m, i) => {
        const link = thumbs.children[i];
        if (!link || !m.href || link.getAttribute('href') === m.href) return;
        Object.assign(link, { href: m.href, target: '_blank', rel: 'noopener', title: 'Open the full-size image' });
      });
      thumbs.hidden = !thumbs.childElementCount;
    }

    // --- turns --------------------------------------------------------------------------------
    function buildTurn(it) {
      const el = shell('assistant', { 'data-turn-id': it.turn.id });
      const phase = h('span', { className: 'phase', 'data-testid': 'turn-phase' });
      const copy = copyButton(() => answerText(el._turn));
      el.append(h('div', { className: 'blocks' }), h('div', { className: 'turn-note' }),
        h('div', { className: 'msg-foot' }, phase, timeEl(), copy));
      updateTurn(el, it);
      return el;
    }

    function answerText(turn) {
      return (turn ? turn.blocks : []).filter((b) => b.type === 'assistant').map((b) => b.text || '').join('\n\n');
    }

    function updateTurn(el, { turn }) {
      el._turn = turn;
      el.dataset.status = turn.status;
      el.dataset.phase = turn.phase;
      if (turn.messageId) el.dataset.messageId = turn.messageId; else delete el.dataset.messageId;
      el.setAttribute('aria-busy', String(turn.running));
      const n = turn.blocks.length;
      reconcile(el.querySelector('.blocks'), turn.blocks.map((b, i) => ({ key: b.key, kind: b.type, b, last: i === n - 1 })),
        (item) => updateBlock(buildBlock(item), item, turn.running), (node, item) => updateBlock(node, item, turn.running));
      updateNote(el.querySelector('.turn-note'), turn);
      const phase = el.querySelector('.phase');
      phase.hidden = !turn.running;
      phase.classList.toggle('phase-offline', turn.phase === 'reconnecting');
      setText(phase, turn.running ? PHASES[turn.phase] || 'Working…' : '');
      const time = el.querySelector('.msg-time');
      time.hidden = turn.running;
      setTime(time, turn.at);
      el.querySelector('.copy-btn').hidden = turn.running || !answerText(turn);
    }

    function updateNote(box, turn) {
      const hasAnswer = turn.blocks.some((b) => b.type === 'assistant' && b.text);
      const sig = JSON.stringify([turn.note, turn.canRetry, turn.retried, turn.running, hasAnswer, turn.cutOff]);
      if (box._sig === sig) return;
      box._sig = sig;
      const parts = [];
      if (turn.note) {
        parts.push(h('div', { className: `note note-${turn.note.status}`, 'data-testid': 'turn-error',
          'data-status': turn.note.status, role: 'status', text: turn.note.text }));
        if (turn.canRetry) {
          const retry = h('button', { type: 'button', className: 'btn btn-small', 'data-testid': 'retry-turn', text: '↻ Retry' });
          retry.addEventListener('click', () => { retry.disabled = true; retryTurn(turn.id, retry); });
          parts.push(retry);
        } else if (turn.retried) {
          parts.push(h('span', { className: 'muted retried', 'data-testid': 'retried', text: '↻ Retried' }));
        }
      }
      if (turn.cutOff) {
        parts.push(h('p', { className: 'notice muted', 'data-testid': 'cut-off', 'data-where': turn.cutOff, text: CUT_OFF[turn.cutOff] }));
      } else if (!turn.note && !turn.running && !hasAnswer && !turn.blocks.length) {
        parts.push(h('p', { className: 'notice', 'data-testid': 'no-answer', text: 'The model returned no answer.' }));
      }
      box.replaceChildren(...parts);
      box.hidden = !parts.length;
    }

    function buildBlock(it) {
      const b = it.b;
      let el;
      if (b.type === 'reasoning') {
        el = h('details', { className: 'reasoning', 'data-testid': 'reasoning' },
          h('summary', {}), h('div', { className: 'reasoning-text' }));
      } else if (b.type === 'tool') {
        el = h('details', { className: 'tool', 'data-testid': 'tool' },
          h('summary', { className: 'tool-head' }), h('div', { className: 'tool-body' }));
      } else el = h('div', { className: 'answer', 'data-testid': 'answer' });
      return el;
    }

    function updateBlock(el, it, running) {
      const b = it.b;
      if (b.type === 'reasoning') {
        setText(el.querySelector('.reasoning-text'), b.text || '');
        setText(el.querySelector('summary'), running && it.last ? 'Thinking…' : 'Thoughts');
      } else if (b.type === 'tool') updateTool(el, b);
      else if (el._text !== b.text || el._streaming !== (running && it.last)) {
        el._streaming = running && it.last;
        el._text = b.text;
        renderRichText(el, b.text || '', el._streaming);
      }
      return el;
    }

    function updateTool(el, b) {
      const args = argsText(b.arguments);
      const sig = JSON.stringify([b.name, args, b.status, b.preview]);
      if (el._sig === sig) return;
      el._sig = sig;
      el.dataset.status = b.status;
      el.querySelector('.tool-head').replaceChildren(...[
        h('span', { className: 'tool-icon', 'aria-hidden': 'true', text: TOOL_ICONS[b.status] || '•' }),
        h('span', { className: 'tool-name', text: b.name || 'tool' }),
        args && args !== '{}' ? h('code', { className: 'tool-args', text: truncate(args, 140) }) : null,
        h('span', { className: 'tool-state', text: TOOL_STATES[b.status] || b.status }),
      ].filter(Boolean));
      const body = [h('div', { className: 'tool-label', text: 'Arguments' }),
        h('pre', { className: 'tool-output', 'data-testid': 'tool-arguments', text: truncate(argsText(b.arguments, true), 4000) })];
      if (b.preview) {
        body.push(h('div', { className: 'tool-label', text: b.status === 'failed' ? 'Error' : 'Result' }),
          h('pre', { className: 'tool-output', 'data-testid': 'tool-result', text: truncate(b.preview, 1500) }));
      }
      el.querySelector('.tool-body').replaceChildren(...body);
    }

    // --- system lines -------------------------------------------------------------------------
    function buildSystem({ line }) {
      if (line.kind === 'command') {
        return h('div', { className: 'command-echo', 'data-testid': 'command-echo', role: 'note' }, h('code', { text: line.text }));
      }
      const el = h('div', { className: `system-line system-${line.kind} level-${line.level || 'info'}`,
        'data-testid': 'system-line', 'data-kind': line.kind, 'data-level': line.level || 'info', role: 'note' });
      const body = h('div', { className: 'system-body' });
      if (line.kind === 'error') {
        body.append(h('span', { className: 'error-text', title: line.code, 'data-code': line.code,
          text: View.friendlyError(line.code, line.text, line.ref) }));
      } else if (line.kind === 'sessions') body.append(...sessionsList(line));
      else if (line.info) body.append(infoList(line.info));
      else {
        const help = View.helpLines(line.text);
        if (help) {
          body.append(h('div', { className: 'system-title', text: 'Commands' }),
            h('dl', { className: 'kv' }, ...help.flatMap((c) => [h('dt', {}, h('code', { text: c.usage })), h('dd', { text: c.summary })])));
        } else {
          const text = h('div', { className: 'system-text' });
          renderRichText(text, View.noticeMarkdown(line.text));
          body.append(text);
        }
      }
      const time = timeEl();
      setTime(time, line.at);
      el.append(body, time);
      return el;
    }

    function sessionsList(line) {
      if (!line.items.length) return [h('div', { text: 'No dialogs yet.' })];
      const items = line.items.map((d) => {
        const b = h('button', { type: 'button', className: 'link-btn', 'data-testid': 'system-session',
          'data-session-id': d.session_id, text: d.title || 'Untitled dialog' });
        b.addEventListener('click', () => ctx.switchTo(d));
        const when = View.timeLabels(d.last_active_at).short;
        return h('li', {}, b, h('span', { className: 'muted',
          text: ` · ${d.message_count || 0} msg · ${when}${d.active ? ' · current' : ''}` }));
      });
      const out = [h('div', { className: 'system-title', text: 'Your dialogs' }), h('ul', { className: 'system-list' }, ...items)];
      if (line.hasMore) out.push(h('div', { className: 'muted', text: 'Older dialogs: scroll or search the sidebar.' }));
      return out;
    }

    function infoList(info) {
      const when = (ms) => View.timeLabels(ms).full;
      const usage = info.usage || {};
      const rows = [
        ['Title', `${info.title}${info.active ? ' (current)' : ''}`],
        ['Dialog id', info.dialog_id],
        ['Messages', `${info.total_message_count} in history, ${info.message_count} from you` +
          (info.queued ? `, ${info.queued} queued` : '') + (info.running ? ', a turn is running' : '')],
        ['Created', when(info.created_at)], ['Last active', when(info.last_active_at)],
        ['Model', info.model || 'default'],
        ['Tokens', `${(usage.input_tokens || 0).toLocaleString()} in, ${(usage.output_tokens || 0).toLocaleString()} out`],
      ];
      return h('dl', { className: 'kv', 'data-testid': 'info' }, ...rows.flatMap(([k, v]) => [h('dt', { text: k }), h('dd', { text: String(v) })]));
    }

    const builders = { user: buildUser, turn: buildTurn, system: buildSystem };
    const updaters = { user: updateUser, turn: updateTurn };

    function render(items) {
      reconcile(list, items, (it) => builders[it.kind](it), (el, it) => updaters[it.kind] && updaters[it.kind](el, it));
    }

    return { render };
  }

  root.PicoBot = Object.assign(root.PicoBot || {}, { Transcript: { create } });
})(window);
