"""Inline ``<think>`` span extraction for streamed text (seed 003 §7.2, DESIGN §6, case SC-01/02).

Models served behind OpenAI-compatible APIs often put their reasoning inside the content as
``<think>…</think>`` (also ``<thought>``, ``<reasoning>``). Tags arrive cut at any point
(``<thi`` + ``nk>``), so :class:`ThinkTagSplitter` is a small state machine over the
concatenated stream: it holds back only the longest suffix that may still become a tag and
releases it as soon as it cannot. Whatever the split, the output is the same.

Whitespace (SC-01): tag-extracted reasoning is stripped at both ends, and leading whitespace of
the text right after a closing tag is dropped. Both are done while streaming: leading whitespace
is dropped as it arrives; trailing reasoning whitespace is held until more non-space reasoning
arrives (then released) or the span closes (then dropped).

Pure module: no I/O.
"""

from __future__ import annotations

from typing import Literal

Kind = Literal["text", "reasoning"]


class ThinkTagSplitter:
    """Splits streamed text into visible text and reasoning.

    Args:
        tags: tag names recognised as reasoning spans (``think`` → ``<think>``/``</think>``).
            A span opened by ``<x>`` closes only at ``</x>``; text between is reasoning, other
            tags inside it are literal.
        implicit_start: the stream may start inside a span (the opening tag was in the
            prompt); the first closing tag of any name ends it (SC-02). Until that tag arrives
            the text is held back (it cannot be told apart from an answer yet): at the closing
            tag it comes out as reasoning; if the stream ends without one, as text (the model
            did not think: SC-02 "until you decide none is coming"); on a failed stream, as
            reasoning. An explicit opening tag at the very start (only whitespace before it) is
            swallowed, not shown. :meth:`cancel_implicit_start` turns the mode off (the server
            separates reasoning itself).

    Use :meth:`feed` per delta and :meth:`flush` once at the end of the stream.
    """

    def __init__(
        self, tags: tuple[str, ...] = ("think", "thought", "reasoning"), implicit_start: bool = False
    ) -> None:
        if not tags:
            raise ValueError("ThinkTagSplitter needs at least one tag name")
        self._opens = {f"<{t}>": f"</{t}>" for t in tags}
        self._open_tags = tuple(self._opens)
        self._all_closes = tuple(f"</{t}>" for t in tags)
        self._implicit_start = implicit_start
        self._reset()

    def _reset(self) -> None:
        self._buf = ""  # a possible tag prefix, held back
        self._in_span = self._implicit_start
        self._closes: tuple[str, ...] = self._all_closes if self._implicit_start else ()
        self._strip_text = False  # right after a closing tag
        self._span_started = False  # non-space reasoning already emitted in this span
        self._held_ws = ""  # trailing reasoning whitespace not yet released
        self._pending = self._implicit_start  # inside the implicit span, its text held back
        self._pending_text = ""
        self._explicit_open = False  # the model wrote the opening tag itself (no doubt it reasons)

    def feed(self, text: str) -> list[tuple[Kind, str]]:
        """Consume a delta.

        Returns:
            ``[(kind, text), ...]`` with kind ``"text"`` or ``"reasoning"``, adjacent pieces of
            one kind merged, no empty pieces; ``[]`` when everything is held back.
        """
        out: list[tuple[Kind, str]] = []
        s = self._buf + text
        self._buf = ""
        if "<" not in s:  # the common delta: no tag can start in it
            self._emit(out, s)
            return out
        pos = 0
        while True:
            if self._pending:
                tags = self._closes + self._open_tags
            else:
                tags = self._closes if self._in_span else self._open_tags
            found = self._find_tag(s, pos, tags)
            if found is None:
                self._emit(out, s[pos:])
                return out
            start, tag, complete = found
            self._emit(out, s[pos:start])
            if not complete:
                # A proper prefix of a tag at the very end: hold it back.
                self._buf = s[start:]
                return out
            pos = start + len(tag)
            if self._pending and tag in self._opens:
                if self._pending_text.strip():
                    self._emit(out, tag)  # inside the span other tags are literal
                else:
                    # An explicit opening tag where the implicit one was assumed: swallowed, and
                    # the span is certain now (an unclosed one stays reasoning at the end).
                    self._explicit_open = True
                continue
            if self._pending:
                self._pending = False
                self._emit(out, self._pending_text)
                self._pending_text = ""
            self._switch(tag)

    def cancel_implicit_start(self) -> list[tuple[Kind, str]]:
        """The stream does not start inside a span after all (e.g. the server streams reasoning
        in a separate field): leave the implicit span; text held for it comes out as text."""
        out: list[tuple[Kind, str]] = []
        if self._pending:
            held, self._pending_text = self._pending_text, ""
            self._pending = False
            self._in_span = False
            self._closes = ()
            self._emit(out, held)
        return out

    def flush(self, *, failed: bool = False) -> list[tuple[Kind, str]]:
        """End of stream: release any held text and reset for reuse.

        Args:
            failed: the stream failed. A held tag prefix longer than ``"<"`` is then dropped
                (it was most likely a tag cut by the failure, never visible text).

        Returns:
            The remaining pieces: a held ``"<"`` outside a span comes out as text (SC-01's
            ``2 <``); a held prefix of a closing tag inside a span is dropped (never reasoning);
            text held for an implicit span comes out as text (as reasoning when ``failed``).
        """
        out: list[tuple[Kind, str]] = []
        held = self._buf
        self._buf = ""
        if self._pending:
            pending, self._pending_text = self._pending_text, ""
            self._pending = False
            if not failed and not self._explicit_open:
                self._in_span = False
                self._closes = ()
            self._emit(out, pending)
        if held and not self._in_span and not (failed and held != "<"):
            self._emit(out, held)
        self._reset()
        return out

    # --- internals ----------------------------------------------------------------------------

    @staticmethod
    def _find_tag(s: str, pos: int, tags: tuple[str, ...]) -> tuple[int, str, bool] | None:
        """First complete tag at or after ``pos``, or a tag prefix ending the string.

        Returns ``(index, tag, True)`` for a complete tag, ``(index, "", False)`` when ``s``
        ends with a proper prefix of a tag starting at ``index``, or None. Each ``<`` costs
        O(tag length), so a feed is linear in its text.
        """
        longest = max(len(t) for t in tags)
        i = s.find("<", pos)
        while i != -1:
            for tag in tags:
                if s.startswith(tag, i):
                    return i, tag, True
            if len(s) - i < longest:
                rest = s[i:]
                if any(tag.startswith(rest) for tag in tags):
                    return i, "", False
            i = s.find("<", i + 1)
        return None

    def _switch(self, tag: str) -> None:
        if self._in_span:
            self._in_span = False
            self._closes = ()
            self._strip_text = True
            self._held_ws = ""
        else:
            self._in_span = True
            self._closes = (self._opens[tag],)
            self._span_started = False
            self._held_ws = ""

    def _emit(self, out: list[tuple[Kind, str]], piece: str) -> None:
        if not piece:
            return
        if self._pending:
            self._pending_text += piece
            return
        if not self._in_span:
            if self._strip_text:
                piece = piece.lstrip()
                if not piece:
                    return
                self._strip_text = False
            self._append(out, "text", piece)
            return
        if not self._span_started:
            piece = piece.lstrip()
            if not piece:
                return
            self._span_started = True
        body = piece.rstrip()
        if not body:
            self._held_ws += piece
            return
        self._append(out, "reasoning", self._held_ws + body)
        self._held_ws = piece[len(body) :]

    @staticmethod
    def _append(out: list[tuple[Kind, str]], kind: Kind, piece: str) -> None:
        if out and out[-1][0] == kind:
            out[-1] = (kind, out[-1][1] + piece)
        else:
            out.append((kind, piece))
