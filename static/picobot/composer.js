/* PicoBot WebUI — the composer: Enter sends, Shift+Enter is a new line, `/` at the start opens
 * command completion, images attach by the paperclip, paste or drop.
 *
 * Completion: arrows move, Enter/Tab accept the highlighted command; one that takes an argument
 * becomes "name " and waits, one without (View.COMMANDS `instant`) is sent at once on Enter.
 * Images follow PROTOCOL §1 `message.media`: PNG, JPEG, GIF or WebP by their magic bytes (as the
 * server checks) and decodable, at most 8, at most 5 MiB in all, sent base64 as {mime_type, data};
 * a message may be images alone.
 */
(function (root) {
  'use strict';

  const { h, setText } = root.PicoBot.Dom;
  const View = root.PicoBot.View;
  const IMAGE_TYPES = ['image/png', 'image/jpeg', 'image/gif', 'image/webp'];
  const MAX_MEDIA_BYTES = 5 * 1024 * 1024;
  const MAX_MEDIA_ITEMS = 8;

  function create(ctx, ui) {
    let attached = []; // [{mime_type, data, size, url}]
    let popup = { open: false, index: 0, matches: [], dismissed: false };

    // --- sending ------------------------------------------------------------------------------
    function submit() {
      const content = ui.composer.value;
      if (!content.trim() && !attached.length) return;
      if (content.trim().startsWith('/')) {
        if (attached.length) { showError('Commands cannot carry images; remove them or send a message.'); return; }
        // Commands act on the dialog on screen (another tab may have switched the chat's active one).
        if (!ctx.sendFrame(ctx.store.command(content.trim()))) return;
        ctx.store.echoCommand(content);
      } else {
        const media = attached.map(({ mime_type, data }) => ({ mime_type, data }));
        ctx.sendMessage(ctx.store.addPending(content, media));
        clearAttachments();
      }
      ui.composer.value = '';
      closePopup();
      autosize();
    }

    // --- command completion -------------------------------------------------------------------
    function updatePopup() {
      const matches = popup.dismissed ? [] : View.completions(ui.composer.value);
      popup.matches = matches;
      popup.open = matches.length > 0;
      if (popup.index >= matches.length) popup.index = 0;
      ui.completion.hidden = !popup.open;
      ui.composer.setAttribute('aria-expanded', String(popup.open));
      if (!popup.open) { ui.composer.removeAttribute('aria-activedescendant'); return; }
      ui.completion.replaceChildren(...matches.map((c, i) => {
        const li = h('li', { id: `cmd-${c.name.slice(1)}`, role: 'option', className: 'completion-item',
          'data-testid': 'completion-item', 'aria-selected': String(i === popup.index) },
        h('code', { text: c.name }), c.args ? h('span', { className: 'muted', text: ` ${c.args}` }) : null,
        h('span', { className: 'completion-summary', text: c.summary }));
        li.addEventListener('mousedown', (e) => { e.preventDefault(); popup.index = i; applyCompletion(); });
        return li;
      }));
      ui.composer.setAttribute('aria-activedescendant', `cmd-${matches[popup.index].name.slice(1)}`);
    }

    function closePopup() { popup.dismissed = false; popup.open = false; ui.completion.hidden = true; }

    function applyCompletion() {
      const c = popup.matches[popup.index];
      if (!c) return;
      ui.composer.value = c.name + (c.args ? ' ' : '');
      popup.dismissed = true;
      updatePopup();
      ui.composer.focus();
    }

    function onKeydown(e) {
      if (e.isComposing) return; // Enter that confirms an IME candidate must not send
      if (popup.open) {
        const n = popup.matches.length;
        if (e.key === 'ArrowDown' || e.key === 'ArrowUp') {
          e.preventDefault();
          popup.index = (popup.index + (e.key === 'ArrowDown' ? 1 : n - 1)) % n;
          updatePopup();
          return;
        }
        if (e.key === 'Escape') { e.preventDefault(); e.stopPropagation(); popup.dismissed = true; updatePopup(); return; }
        const c = popup.matches[popup.index];
        if (e.key === 'Tab' || (e.key === 'Enter' && !e.shiftKey && !c.instant)) { e.preventDefault(); applyCompletion(); return; }
        if (e.key === 'Enter' && !e.shiftKey) { e.preventDefault(); ui.composer.value = c.name; submit(); return; }
      }
      if (e.key === 'Enter' && !e.shiftKey) { e.preventDefault(); submit(); }
    }

    // --- images -------------------------------------------------------------------------------
    function showError(text) {
      setText(ui.composerError, text);
      ui.composerError.hidden = !text;
    }

    function readBase64(file) {
      return new Promise((resolve, reject) => {
        const r = new FileReader();
        r.onload = () => resolve(String(r.result).split(',', 2)[1] || '');
        r.onerror = () => reject(r.error);
        r.readAsDataURL(file);
      });
    }

    /** The file's image type by its bytes, or null when it is not an image PicoBot can send or
     *  does not decode (a .png holding text). */
    async function imageType(file) {
      try {
        const type = View.sniffImage(new Uint8Array(await file.slice(0, 16).arrayBuffer()));
        if (!type) return null;
        if (root.createImageBitmap) (await root.createImageBitmap(file)).close();
        return type;
      } catch (err) { return null; }
    }

    async function addFiles(files) {
      showError('');
      for (const file of Array.from(files || [])) {
        if (!IMAGE_TYPES.includes(file.type)) {
          showError(`“${file.name || 'file'}” is not an image PicoBot can send (PNG, JPEG, GIF or WebP).`);
          continue;
        }
        if (attached.length >= MAX_MEDIA_ITEMS) { showError(`At most ${MAX_MEDIA_ITEMS} images per message.`); break; }
        const total = attached.reduce((n, a) => n + a.size, 0) + file.size;
        if (total > MAX_MEDIA_BYTES) {
          showError(`“${file.name || 'image'}” is too big: images may be 5 MiB in all per message.`);
          continue;
        }
        const type = await imageType(file);
        if (!type) {
          showError(`“${file.name || 'file'}” is not a readable PNG, JPEG, GIF or WebP image.`);
          continue;
        }
        try {
          const data = await readBase64(file);
          attached.push({ mime_type: type, data, size: file.size, url: URL.createObjectURL(file), name: file.name });
        } catch (err) { showError(`Could not read “${file.name}”.`); }
      }
      renderAttachments();
    }

    function renderAttachments() {
      ui.attachments.hidden = !attached.length;
      ui.attachments.replaceChildren(...attached.map((a, i) => {
        const remove = h('button', { type: 'button', className: 'thumb-remove', 'data-testid': 'remove-attachment',
          'aria-label': `Remove ${a.name || 'image'}`, text: '×' });
        remove.addEventListener('click', () => { URL.revokeObjectURL(a.url); attached.splice(i, 1); renderAttachments(); });
        return h('div', { className: 'thumb-wrap', 'data-testid': 'attachment' },
          h('img', { src: a.url, alt: a.name || 'Attached image', className: 'thumb' }), remove);
      }));
    }

    function clearAttachments() {
      for (const a of attached) URL.revokeObjectURL(a.url);
      attached = [];
      showError('');
      renderAttachments();
    }

    function autosize() {
      // Empty: back to one line (scrollHeight would measure the wrapped placeholder).
      if (!ui.composer.value) { ui.composer.style.height = ''; return; }
      ui.composer.style.height = 'auto';
      ui.composer.style.height = `${ui.composer.scrollHeight + 2}px`;
    }

    ui.form.addEventListener('submit', (e) => { e.preventDefault(); submit(); });
    ui.composer.addEventListener('keydown', onKeydown);
    ui.composer.addEventListener('input', () => {
      if (!ui.composer.value.startsWith('/')) popup.dismissed = false;
      autosize(); updatePopup();
    });
    ui.composer.addEventListener('blur', () => { popup.dismissed = true; updatePopup(); popup.dismissed = false; });
    ui.composer.addEventListener('focus', updatePopup);
    ui.attach.replaceChildren(root.PicoBot.Dom.icon('clip'));
    // A phone's one-line composer fits only a short placeholder (the hint stays in its title).
    if (root.matchMedia && root.matchMedia('(max-width: 480px)').matches) ui.composer.placeholder = 'Message PicoBot';
    ui.attach.addEventListener('click', () => ui.fileInput.click());
    ui.fileInput.addEventListener('change', () => { addFiles(ui.fileInput.files); ui.fileInput.value = ''; });
    ui.composer.addEventListener('paste', (e) => {
      const files = Array.from(e.clipboardData ? e.clipboardData.files : []);
      if (files.length) { e.preventDefault(); addFiles(files); }
    });
    ui.chat.addEventListener('dragover', (e) => { e.preventDefault(); ui.chat.classList.add('dragging'); });
    ui.chat.addEventListener('dragleave', (e) => { if (e.target === ui.chat || !ui.chat.contains(e.relatedTarget)) ui.chat.classList.remove('dragging'); });
    ui.chat.addEventListener('drop', (e) => {
      e.preventDefault(); ui.chat.classList.remove('dragging');
      if (e.dataTransfer && e.dataTransfer.files.length) addFiles(e.dataTransfer.files);
    });

    return { popupOpen: () => popup.open, addFiles, focus: () => ui.composer.focus() };
  }

  root.PicoBot = Object.assign(root.PicoBot || {}, { Composer: { create } });
})(window);
