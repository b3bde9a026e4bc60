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
        implicit_start: the stream starts inside a span (the opening tag was in the prompt);
            the first closing tag of any name ends it (SC-02). If none comes, everything is
            reasoning.

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
            self._switch(tag)
            pos = start + len(tag)

    def flush(self) -> list[tuple[Kind, str]]:
        """End of stream: release any held text and reset for reuse.

        Returns:
            The remaining pieces (a held ``"<"`` comes out as text: SC-01's ``2 <``).
        """
        out: list[tuple[Kind, str]] = []
        self._emit(out, self._buf)
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
