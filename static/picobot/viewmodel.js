/* PicoBot WebUI — what the transcript and sidebar show, derived from ChatStore. No DOM here.
 *
 * A turn renders the same structure live (from its snapshot) and committed (from its rows):
 * one item keyed `t:<turn_id>` whose blocks are keyed by type and iteration (tools by call id),
 * so the element survives the commit and nothing jumps. A user message keeps its key
 * `u:<client_msg_id>` from sending to history. Outcomes ("Failed: …", "Stopped") come from the
 * user row's `outcome` (persisted), else from what this client saw live, else from the rows'
 * completion_status.
 */
(function (root) {
  'use strict';

  const DAY_MS = 86400000;

  /** The slash commands (PROTOCOL.md "Slash commands") for completion: [name, args, summary].
   *  `instant`: Enter on it in the popup sends it at once; the others complete to "name " and wait. */
  const INSTANT = new Set(['/new', '/sessions', '/compact', '/info', '/tasks', '/stop', '/help']);
  const COMMANDS = [
    ['/new', '[title]', 'Start a new dialog'],
    ['/sessions', '', 'List your dialogs'],
    ['/switch', '<dialog_id>', 'Go to another dialog'],
    ['/rename', '<title>', 'Rename this dialog'],
    ['/delete', '[dialog_id]', 'Delete this (or the given) dialog'],
    ['/compact', '', 'Summarise older history now'],
    ['/info', '', 'About this dialog: ids, counts, model, usage'],
    ['/model', '[name]', 'List the model presets, or switch this dialog to one'],
    ['/schedule', 'add "<cron>" <prompt> | list | delete <id>', 'Scheduled prompts of this dialog'],
    ['/tasks', '', 'Your background tasks'],
    ['/stop', '[task <id>]', 'Stop the running turn, or a background task'],
    ['/help', '', 'List the commands'],
  ].map(([name, args, summary]) => ({ name, args, summary, instant: INSTANT.has(name) }));

  /** Commands matching what the composer holds: only while it is a lone `/word`. */
  function completions(text) {
    if (!/^\/\S*$/.test(text)) return [];
    const typed = text.toLowerCase();
    return COMMANDS.filter((c) => c.name.startsWith(typed));
  }

  /** The outcome line of a turn; a stop says "Stopped" once (never "Stopped: stopped"). */
  function outcomeText(status, error) {
    if (status === 'cancelled') return 'Stopped';
    const e = String(error || '').trim();
    const label = status === 'interrupted' || /^interrupted\b/i.test(e) ? 'Interrupted' : 'Failed';
    if (!e) return label;
    if (e.toLowerCase().startsWith(label.toLowerCase())) return e[0].toUpperCase() + e.slice(1);
    return `${label}: ${e}`;
  }

  const KEPT_AT_RESTART = 'Interrupted by a server restart — the answer is kept as of shortly before the restart.';

  /** {status, text, retry} for a turn outcome, or null when it completed. */
  function noteView(note) {
    if (!note || !note.status || note.status === 'completed') return null;
    let status = note.status;
    if (status === 'failed' && /^interrupted\b/i.test(note.error || '')) status = 'interrupted';
    return { status, text: outcomeText(status, note.error), retry: status !== 'cancelled' };
  }

  function rowNote(userRow, liveNote, rows) {
    if (userRow && userRow.outcome && userRow.outcome.status) return userRow.outcome;
    if (liveNote) return liveNote;
    const cut = rows.find((r) => r.role === 'assistant' && r.completion_status && r.completion_status !== 'completed');
    return cut ? { status: cut.completion_status, error: '' } : null;
  }

  /** Keys blocks by type and iteration (a tool by its call id): the same keys live and committed. */
  function keyBlocks(blocks) {
    const counts = new Map();
    return blocks.map((b) => {
      if (b.type === 'tool') return Object.assign({ key: 'tool:' + b.id }, b);
      const k = `${b.type}:${b.iteration || 0}`;
      const n = (counts.get(k) || 0) + 1;
      counts.set(k, n);
      return Object.assign({ key: n > 1 ? `${k}:${n}` : k }, b);
    });
  }

  /** Where a turn stopped at the model's output limit (`truncated`, PROTOCOL §1): 'answer' when it
   *  has answer text, 'thinking' when it has none; null otherwise. */
  function cutOff(truncated, blocks) {
    if (!truncated) return null;
    return blocks.some((b) => b.type === 'assistant' && b.text) ? 'answer' : 'thinking';
  }

  /** `retried`: its Retry was used (wasRetried): the note shows "Retried" instead. `offline`: the
   *  connection is down, so a running turn's progress is unknown until it is back. */
  function liveTurn(t, userText, retried = false, offline = false) {
    const blocks = (t.blocks || []).filter((b) => ['reasoning', 'assistant', 'tool'].includes(b.type));
    const note = t.status === 'failed' || t.status === 'cancelled'
      ? noteView({ status: t.status, error: root.PicoBot.errorText(t.error) }) : null;
    const retry = !!(note && note.retry && userText);
    const running = t.status === 'running';
    return { id: t.id, status: t.status, phase: running && offline ? 'reconnecting' : t.phase || '', running,
      blocks: keyBlocks(blocks), note, canRetry: retry && !retried, retried: retry && retried,
      cutOff: running ? null : cutOff(t.truncated, blocks), messageId: null, at: t.seenAt || null, committed: false };
  }

  /** A committed turn from its assistant/tool rows (results joined to their calls). */
  function committedTurn(id, rows, note, userRow, retried = false) {
    const results = new Map();
    for (const r of rows) if (r.role === 'tool' && r.tool_call_id) results.set(r.tool_call_id, r);
    const called = new Set();
    const blocks = [];
    for (const r of rows) {
      const iteration = r.iteration || 0;
      if (r.role === 'assistant') {
        if (r.reasoning) blocks.push({ type: 'reasoning', iteration, text: r.reasoning });
        if (r.content) blocks.push({ type: 'assistant', iteration, text: r.content });
        for (const call of r.tool_calls || []) {
          called.add(call.id);
          const res = results.get(call.id);
          blocks.push({ type: 'tool', id: call.id, iteration, name: call.name, arguments: call.arguments,
            status: res ? (res.is_error ? 'failed' : 'completed') : 'cancelled', preview: res ? res.content : '' });
        }
      } else if (r.role === 'tool' && !called.has(r.tool_call_id)) {
        blocks.push({ type: 'tool', id: r.tool_call_id || r.id, iteration, name: r.tool_name,
          arguments: {}, status: r.is_error ? 'failed' : 'completed', preview: r.content });
      }
    }
    let nv = noteView(note);
    // A restart keeps the answer as of the last checkpoint (PICOBOT_TURN_CHECKPOINT_SECONDS), so
    // its last seconds are missing: say so when the user row's outcome and a kept answer agree.
    const kept = rows.some((r) => r.role === 'assistant' && r.completion_status === 'interrupted');
    if (nv && nv.status === 'interrupted' && kept && userRow && userRow.outcome && noteView(userRow.outcome)?.status === 'interrupted') {
      nv = Object.assign({}, nv, { text: KEPT_AT_RESTART });
    }
    const last = rows.filter((r) => r.role === 'assistant').pop();
    const retry = !!(nv && nv.retry && userRow);
    const truncated = rows.some((r) => r.role === 'assistant' && r.truncated);
    return { id, status: nv ? nv.status : 'completed', phase: '', running: false, blocks: keyBlocks(blocks),
      note: nv, cutOff: cutOff(truncated, blocks), canRetry: retry && !retried, retried: retry && retried, messageId: last ? last.id : null,
      at: rows.length ? rows[rows.length - 1].created_at : (userRow && userRow.created_at), committed: true };
  }

  /** A server image URL (history `media[].url`, PROTOCOL §1), or null for anything else. */
  function mediaUrl(item) {
    const u = item && item.url;
    return typeof u === 'string' && u.startsWith('/api/') ? u : null;
  }

  /** A user message's thumbnails, [{src, href}] in order, or null for none. `local`: the
   *  [{mime_type, data}] this page sent (shown as they are, so a thumbnail does not reload at
   *  commit); `served`: the row's `media` ([{mime_type, url}]), whose URL is the full-size link
   *  and, after a reload, the thumbnail too. */
  function thumbnails(local, served) {
    const out = [];
    const n = Math.max(local ? local.length : 0, served ? served.length : 0);
    for (let i = 0; i < n; i++) {
      const mine = local && local[i];
      const href = mediaUrl(served && served[i]);
      const src = mine ? `data:${mine.mime_type};base64,${mine.data}` : href;
      if (src) out.push({ src, href });
    }
    return out.length ? out : null;
  }

  function userFromRow(store, m) {
    return { kind: 'user', key: 'u:' + (store.clientIds.get(m.id) || m.id), seq: m.seq, text: m.content,
      at: m.created_at, status: 'committed', messageId: m.id, media: thumbnails(store.media.get(m.id), m.media),
      origin: originText(m.origin) };
  }

  /** The mark of a user row no person typed (PROTOCOL §1 `origin`), or null. */
  function originText(origin) {
    if (!origin || !origin.kind) return null;
    // The server's label names what it is ("Scheduled (0 9 * * *): …"); the mark adds the icon.
    const [icon, what] = origin.kind === 'schedule' ? ['⏰', 'Scheduled'] : origin.kind === 'task_notification' ? ['⚙', 'Background task'] : ['•', 'Automated'];
    return `${icon} ${origin.label || what}`;
  }

  function userFromPending(p) {
    return { kind: 'user', key: 'u:' + p.client_msg_id, seq: Infinity, text: p.content, at: p.sentAt,
      status: p.status, queued: p.queued, error: p.error, errorCode: p.errorCode, clientMsgId: p.client_msg_id,
      media: thumbnails(p.media, null) };
  }

  /** Whether the failed turn of `userMsg` (a row or a pending message) was retried: a later
   *  message of the dialog — sent, queued or in history — carries the same text (what its Retry
   *  sends), so its Retry is spent, also after a reload. */
  function wasRetried(msgs, mine, userMsg) {
    if (!userMsg) return false;
    const text = userMsg.content;
    if (userMsg.seq !== undefined && msgs.some((m) => m.role === 'user' && m.seq > userMsg.seq && m.content === text)) return true;
    const after = userMsg.seq !== undefined ? -Infinity : userMsg.sentAt;
    return mine.some((p) => p !== userMsg && p.content === text && p.sentAt >= after);
  }

  /** The active dialog as an ordered list of keyed items: user messages, turns (committed, then
   *  the live one after the message it answers), queued messages, and system lines placed where
   *  they arrived. */
  function items(store) {
    const s = store.activeSession;
    if (!s) return [];
    const out = [];
    const msgs = s.messages;
    const shownTurns = new Set();
    const liveId = s.turn && s.turn.id;
    const mine = store.pending.filter((p) => root.PicoBot.sameSession(p, s.id, store.activeSessionId));
    let lastUser = null;
    for (let i = 0; i < msgs.length;) {
      const m = msgs[i];
      if (m.role === 'user') {
        out.push(userFromRow(store, m)); lastUser = m; i += 1;
        const tid = m.turn_id;
        const hasRows = i < msgs.length && msgs[i].role !== 'user' && msgs[i].turn_id === tid;
        if (tid && !hasRows && tid !== liveId) {
          const note = rowNote(m, s.notes.get(tid), []);
          if (note) {
            shownTurns.add(tid);
            out.push({ kind: 'turn', key: 't:' + tid, seq: m.seq,
              turn: committedTurn(tid, [], note, m, wasRetried(msgs, mine, m)) });
          }
        }
        continue;
      }
      const tid = m.turn_id;
      const rows = [];
      while (i < msgs.length && msgs[i].role !== 'user' && msgs[i].turn_id === tid) rows.push(msgs[i++]);
      const userRow = lastUser && lastUser.turn_id === tid ? lastUser : null;
      const id = tid || rows[0].id;
      shownTurns.add(id);
      const note = rowNote(userRow, s.notes.get(tid), rows);
      out.push({ kind: 'turn', key: 't:' + id, seq: rows[rows.length - 1].seq,
        turn: committedTurn(id, rows, note, userRow, wasRetried(msgs, mine, userRow)) });
    }
    for (const [id, note] of s.notes) {
      if (!shownTurns.has(id) && id !== liveId) {
        out.push({ kind: 'turn', key: 't:' + id, seq: Infinity, turn: committedTurn(id, [], note, null) });
      }
    }
    for (const p of mine) if (liveId && p.turnId === liveId) out.push(userFromPending(p));
    if (s.turn) {
      const own = msgs.find((m) => m.role === 'user' && m.turn_id === liveId) || mine.find((p) => p.turnId === liveId);
      out.push({ kind: 'turn', key: 't:' + liveId, seq: Infinity,
        turn: liveTurn(s.turn, own && own.content, wasRetried(msgs, mine, own), store.online === false) });
    }
    for (const p of mine) if (!liveId || p.turnId !== liveId) out.push(userFromPending(p));
    for (const line of s.system) placeLine(out, line);
    return out;
  }

  /** Insert a system line after the turn running when it arrived, else after the rows then
   *  shown; lines at one place keep their arrival order. */
  function placeLine(out, line) {
    const item = { kind: 'system', key: line.key, seq: line.afterSeq, line };
    let at = line.afterTurn ? out.findIndex((x) => x.key === 't:' + line.afterTurn) + 1 : 0;
    if (at === 0) {
      at = out.findIndex((x) => x.seq > line.afterSeq);
      if (at < 0) at = out.length;
    }
    while (at < out.length && out[at].kind === 'system') at += 1;
    out.splice(at, 0, item);
  }

  /** People-facing text of an `error` frame (the code stays for a tooltip). */
  const FRIENDLY = {
    not_found: 'That dialog does not exist (or was deleted).',
    internal_error: 'Something went wrong on the server. Try again in a moment.',
    inbox_full: 'Too many messages are waiting in this dialog. Wait for the answers, then send again.',
    content_too_long: 'The message is too long (at most 32 000 characters).',
    frame_too_large: 'The message is too large to send.',
    unauthorized: 'You are signed out. Reload the page to sign in again.',
    client_msg_id_in_use: 'This message was already sent to another dialog.',
  };

  /** Refusals a resend cannot change (the same message would be refused again): no Retry. */
  const PERMANENT = new Set(['invalid_media', 'content_too_long', 'frame_too_large', 'invalid_frame']);
  function retryable(code) { return !PERMANENT.has(code); }

  /** The image type of `bytes` (a Uint8Array of the file's first 12 bytes or more) by its magic
   *  bytes, as the server checks them (conversations/agent/media.py), or null. */
  function sniffImage(bytes) {
    const b = bytes || [];
    const starts = (sig) => sig.every((x, i) => b[i] === x);
    const ascii = (from, text) => [...text].every((ch, i) => b[from + i] === ch.charCodeAt(0));
    if (starts([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])) return 'image/png';
    if (starts([0xff, 0xd8, 0xff])) return 'image/jpeg';
    if (ascii(0, 'GIF87a') || ascii(0, 'GIF89a')) return 'image/gif';
    if (ascii(0, 'RIFF') && ascii(8, 'WEBP')) return 'image/webp';
    return null;
  }

  function friendlyError(code, message, ref) {
    let text = FRIENDLY[code];
    if (!text) {
      const m = String(message || code || 'Something went wrong').trim();
      text = m[0].toUpperCase() + m.slice(1);
      if (code === 'invalid_media') text = `The images were refused: ${m}`;
    }
    return ref ? `${text} (reference ${ref})` : text;
  }

  /** The sidebar's date group of a dialog last active at `ms` (local days). */
  function dateGroup(ms, now = Date.now()) {
    const n = new Date(now);
    const today = new Date(n.getFullYear(), n.getMonth(), n.getDate()).getTime();
    if (ms >= today) return 'Today';
    if (ms >= today - DAY_MS) return 'Yesterday';
    if (ms >= today - 7 * DAY_MS) return 'Previous 7 days';
    if (ms >= today - 30 * DAY_MS) return 'Previous 30 days';
    return new Date(ms).toLocaleDateString('en', { year: 'numeric', month: 'long' });
  }

  /** Dialogs (most recent first) as [{label, dialogs}] in order. */
  function groupDialogs(dialogs, now = Date.now()) {
    const groups = [];
    for (const d of dialogs) {
      const label = dateGroup(d.last_active_at || 0, now);
      const last = groups[groups.length - 1];
      if (last && last.label === label) last.dialogs.push(d);
      else groups.push({ label, dialogs: [d] });
    }
    return groups;
  }

  /** "replay" rather than "replay · replay". */
  function providerLabel(p) {
    if (!p) return '';
    const parts = [p.name, p.model].filter(Boolean);
    return (parts.length === 2 && parts[0] === parts[1] ? [parts[0]] : parts).join(' · ');
  }

  /** Short local time (with the date when not today) and the full local date for a tooltip. */
  function timeLabels(ms, now = Date.now()) {
    if (!ms) return { short: '', full: '' };
    const d = new Date(ms);
    const sameDay = d.toDateString() === new Date(now).toDateString();
    const time = d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
    const short = sameDay ? time : `${d.toLocaleDateString([], { month: 'short', day: 'numeric' })} ${time}`;
    return { short, full: d.toLocaleString([], { dateStyle: 'full', timeStyle: 'medium' }) };
  }

  /** `/help`'s "usage — summary" lines, or null when the text is not that list. */
  function helpLines(text) {
    const lines = String(text || '').split('\n');
    if (!/^commands:?$/i.test(lines[0].trim())) return null;
    return lines.slice(1).filter((l) => l.trim()).map((l) => {
      const [usage, ...rest] = l.split(' — ');
      return { usage: usage.trim(), summary: rest.join(' — ').trim() };
    });
  }

  /** Notice text as Markdown that keeps its line breaks (our notices are plain lines). */
  function noticeMarkdown(text) {
    const t = String(text || '');
    return t.includes('```') ? t : t.replace(/([^\n])\n(?=[^\n])/g, '$1  \n');
  }

  root.PicoBot = Object.assign(root.PicoBot || {}, {
    View: { items, liveTurn, committedTurn, outcomeText, originText, noteView, friendlyError, dateGroup, groupDialogs,
      providerLabel, timeLabels, helpLines, noticeMarkdown, completions, COMMANDS, retryable, sniffImage },
  });
})(typeof window !== 'undefined' ? window : globalThis);
