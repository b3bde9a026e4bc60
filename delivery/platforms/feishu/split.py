"""Splitting a long Markdown answer into parts that each fit one Feishu message (FEISHU.md §7, §9).

A card is at most 30 KB of JSON and a text message 150 KB (FEISHU.md §7, §9), so a long answer
goes out as several parts (seed 003 §10.3: a platform with a size limit gets the answer in order,
complete). :func:`split_markdown_parts` cuts, in this order of preference:

1. before a paragraph (after a blank line), a heading or a code fence, or after a fence;
2. at any other line boundary outside a code fence;
3. inside a line (a line larger than the budget): after a space, else between two characters.

It never cuts inside a code fence that fits in one part. A fence larger than the budget is cut
at its line boundaries: the piece before the cut is closed with the fence's marker (e.g. `````)
and the next piece reopens it with the fence's own opening line (e.g. `````python``), so every
part renders as balanced Markdown. It never cuts inside a character (a Python code point) nor
between a base character and what extends it (a combining mark, a variation selector, an emoji
modifier or tag, either side of a zero-width joiner, the second regional indicator of a flag,
``\\r\\n``).

Nothing is lost: ``"".join(part.body for part in parts) == text``; the added fence lines are
``part.reopen`` and ``part.close``. Each ``measure(part.text) <= budget``, except that a part
always holds at least one character (with its extensions), so a budget smaller than that (or
than a fence's opening line) yields parts over the budget rather than no progress.

Pure: no Django, Channels or HTTP client imports.
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["MarkdownPart", "is_cut_allowed", "split_markdown", "split_markdown_parts"]

# Lenient on indentation on purpose: models indent fences inside list items by 2-4+ spaces.
_FENCE_OPEN = re.compile(r"^([ \t]*)(`{3,}|~{3,})(.*)$")
_ZWJ = "\u200d"
_ZWNJ = "\u200c"
_PARA, _LINE = 0, 1


@dataclass(frozen=True, slots=True)
class MarkdownPart:
    """One part of a split answer.

    Attributes:
        reopen: The opening line of a code fence the previous part cut (with its newline), or "".
        body: This part's slice of the original text.
        close: The closing marker added because this part ends inside a fence (preceded by a
            newline when ``body`` does not end with one), or "".
    """

    reopen: str
    body: str
    close: str

    @property
    def text(self) -> str:
        """What is sent: ``reopen + body + close``."""
        return self.reopen + self.body + self.close


@dataclass(frozen=True, slots=True)
class _Fence:
    start: int  # offset of the opening line
    body_start: int  # offset just after the opening line
    close_start: int  # offset of the closing line (len(text) when the fence is never closed)
    end: int  # offset just after the closing line
    opening: str  # the opening line, newline included
    closing: str  # indentation + marker, to close a cut piece


def split_markdown(text: str, budget: int, measure: Callable[[str], int]) -> list[str]:
    """Splits ``text`` into parts of at most ``budget`` (module docstring).

    Args:
        text: Markdown (any string; lone surrogates are kept as they are).
        budget: The largest allowed ``measure`` of a part, in the measure's unit (e.g. bytes).
        measure: The size of a part, e.g. UTF-8 bytes of its JSON encoding. Must grow (weakly)
            with the text.

    Returns:
        ``[part.text for part in split_markdown_parts(...)]``: ``[]`` for "", ``[text]`` when it
        fits.
    """
    return [part.text for part in split_markdown_parts(text, budget, measure)]


def split_markdown_parts(text: str, budget: int, measure: Callable[[str], int]) -> list[MarkdownPart]:
    """Like :func:`split_markdown`, but says which fence lines were added to each part.

    Returns:
        The parts in order; ``"".join(p.body for p in parts) == text``. Empty for "".
    """
    if not text:
        return []
    if measure(text) <= budget:
        return [MarkdownPart("", text, "")]
    return _Splitter(text, budget, measure).run()


def is_cut_allowed(text: str, index: int) -> bool:
    """Whether ``text[:index]`` / ``text[index:]`` keeps every user-perceived character whole.

    A simplification of Unicode's grapheme cluster rules (UAX #29) that covers what models write:
    combining marks, variation selectors, emoji modifiers and tags, ZWJ sequences, flags (pairs
    of regional indicators), ``\\r\\n`` and surrogate pairs. Hangul jamo sequences and
    "prepend" characters are not handled (precomposed Hangul is one code point).
    """
    if index <= 0 or index >= len(text):
        return True
    prev, char = text[index - 1], text[index]
    if prev == _ZWJ or (prev == "\r" and char == "\n"):
        return False
    code = ord(char)
    if (
        char in (_ZWJ, _ZWNJ)
        or 0xFE00 <= code <= 0xFE0F  # variation selectors
        or 0x1F3FB <= code <= 0x1F3FF  # emoji skin-tone modifiers
        or 0xE0020 <= code <= 0xE007F  # emoji tag sequences (subdivision flags)
        or 0xE0100 <= code <= 0xE01EF  # variation selectors supplement
        or (0xDC00 <= code <= 0xDFFF and 0xD800 <= ord(prev) <= 0xDBFF)  # an unrepaired pair
        or unicodedata.category(char) in ("Mn", "Mc", "Me")
    ):
        return False
    if _is_regional_indicator(char) and _is_regional_indicator(prev):
        run = 0
        while index - run - 1 >= 0 and _is_regional_indicator(text[index - run - 1]):
            run += 1
        return run % 2 == 0  # flags pair up from the start of the run
    return True


def _is_regional_indicator(char: str) -> bool:
    return 0x1F1E6 <= ord(char) <= 0x1F1FF


class _Splitter:
    """One split: the text's fences and cut candidates, then a greedy walk."""

    def __init__(self, text: str, budget: int, measure: Callable[[str], int]) -> None:
        self.text = text
        self.budget = budget
        self.measure = measure
        self.fences = _find_fences(text)
        self.fence_starts = [fence.start for fence in self.fences]
        oversized = {id(f) for f in self.fences if measure(text[f.start : f.end]) > budget}
        self.offsets, self.kinds = self._candidates(oversized)

    def _candidates(self, oversized: set[int]) -> tuple[list[int], list[int]]:
        """Cut offsets (line starts) in order, each with its preference class."""
        text = self.text
        offsets: list[int] = []
        kinds: list[int] = []
        prev_start = 0
        start = text.find("\n") + 1
        while 0 < start < len(text):
            fence = self._fence_at(start)
            if fence is not None and fence.start < start < fence.end:
                # Inside a fence: only a fence too large for one part may be cut, and not just
                # after its opening line or just before its closing one (an empty code block).
                if id(fence) in oversized and fence.body_start < start < fence.close_start:
                    offsets.append(start)
                    kinds.append(_LINE)
            else:
                previous_blank = not text[prev_start:start].strip()
                line_end = text.find("\n", start)
                line = text[start : line_end if line_end >= 0 else len(text)]
                after_fence = fence is not None and start == fence.end
                starts_block = line.startswith("#") or _FENCE_OPEN.match(line) is not None
                offsets.append(start)
                kinds.append(_PARA if previous_blank or after_fence or starts_block else _LINE)
            prev_start = start
            start = text.find("\n", start) + 1
        offsets.append(len(text))
        kinds.append(_PARA)
        return offsets, kinds

    def _fence_at(self, offset: int) -> _Fence | None:
        """The last fence starting at or before ``offset``, or None."""
        index = bisect.bisect_right(self.fence_starts, offset) - 1
        return self.fences[index] if index >= 0 else None

    def _open_fence(self, offset: int) -> _Fence | None:
        """The fence a cut at ``offset`` falls inside (its body, up to its closing line), or None."""
        fence = self._fence_at(offset)
        if fence is not None and fence.body_start <= offset <= fence.close_start:
            return fence
        return None

    def _part(self, pos: int, end: int) -> MarkdownPart:
        before = self._open_fence(pos) if pos > 0 else None
        reopen = before.opening if before is not None else ""
        after = self._open_fence(end) if end < len(self.text) else None
        close = ""
        if after is not None:
            close = after.closing if self.text[end - 1] == "\n" else "\n" + after.closing
        return MarkdownPart(reopen, self.text[pos:end], close)

    def _fits(self, pos: int, end: int) -> bool:
        return self.measure(self._part(pos, end).text) <= self.budget

    def run(self) -> list[MarkdownPart]:
        parts: list[MarkdownPart] = []
        pos = 0
        while pos < len(self.text):
            end = self._next_cut(pos)
            parts.append(self._part(pos, end))
            pos = end
        return parts

    def _next_cut(self, pos: int) -> int:
        lo = bisect.bisect_right(self.offsets, pos)
        best = self._last_fitting(pos, lo, len(self.offsets), lambda i: self.offsets[i])
        if best is None:
            return self._cut_in_line(pos, self.offsets[lo])
        # Prefer a paragraph boundary unless it would leave the part less than half full.
        best_end = self.offsets[best]
        for index in range(best, lo - 1, -1):
            if (self.offsets[index] - pos) * 2 < best_end - pos:
                break
            if self.kinds[index] == _PARA:
                return self.offsets[index]
        return best_end

    def _last_fitting(self, pos: int, lo: int, hi: int, end_of: Callable[[int], int]) -> int | None:
        """The largest index in ``[lo, hi)`` whose end fits (binary search, then checked)."""
        if lo >= hi or not self._fits(pos, end_of(lo)):
            return None
        left, right = lo, hi - 1  # invariant: left fits
        while left < right:
            middle = (left + right + 1) // 2
            if self._fits(pos, end_of(middle)):
                left = middle
            else:
                right = middle - 1
        return left

    def _cut_in_line(self, pos: int, limit: int) -> int:
        """A cut inside ``(pos, limit)``: the text up to the next candidate does not fit.

        Inside a fence the cut never falls in its opening or closing line: a marker cut in two
        opens or closes nothing.
        """
        text = self.text
        fence = self._fence_at(pos)
        if fence is None or not fence.start <= pos < fence.close_start:
            fence = None
        elif fence.close_start < limit:
            limit = fence.close_start
        end = self._last_fitting(pos, pos + 1, limit, lambda i: i)
        if end is None:
            end = pos + 1  # not even one character fits: progress over budget
        while end > pos + 1 and not is_cut_allowed(text, end):
            end -= 1
        while end < limit and not is_cut_allowed(text, end):
            end += 1  # forced: the first whole character
        # After a space if that keeps the part at least half full.
        space = max(text.rfind(" ", pos, end), text.rfind("\t", pos, end))
        if space >= 0 and (space + 1 - pos) * 2 >= end - pos and is_cut_allowed(text, space + 1):
            end = space + 1
        if fence is not None and end < fence.body_start:
            end = fence.body_start  # the whole opening line, over budget if it alone is
        return end


def _find_fences(text: str) -> list[_Fence]:
    """The code fences of ``text`` in order (CommonMark's rules, lenient on indentation)."""
    fences: list[_Fence] = []
    current: tuple[int, int, str, str, str] | None = None  # start, body_start, char, marker, indent
    start = 0
    while start < len(text):
        newline = text.find("\n", start)
        end = len(text) if newline < 0 else newline + 1
        line = text[start:end].rstrip("\r\n")
        if current is None:
            match = _FENCE_OPEN.match(line)
            # A backtick fence's info string cannot hold a backtick ("```x```" is inline code).
            if match and not (match.group(2)[0] == "`" and "`" in match.group(3)):
                current = (start, end, match.group(2)[0], match.group(2), match.group(1))
        else:
            fence_start, body_start, char, marker, indent = current
            stripped = line.strip(" \t")
            if len(stripped) >= len(marker) and stripped == char * len(stripped):
                fences.append(
                    _Fence(fence_start, body_start, start, end, text[fence_start:body_start], indent + marker)
                )
                current = None
        start = end
    if current is not None:  # never closed: it runs to the end of the text
        fence_start, body_start, _, marker, indent = current
        opening = text[fence_start:body_start]
        fences.append(_Fence(fence_start, body_start, len(text), len(text), opening, indent + marker))
    return fences
