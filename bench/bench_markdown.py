"""Where to render Markdown: the gateway per streamed chunk, or the reader's browser (issue 14).

Run by hand, alone on the machine (needs ``pip install -r bench/requirements.txt``, the vendor
files of ``scripts/fetch_webui_assets.py`` and ``/usr/bin/chromium``)::

    .venv/bin/python bench/bench_markdown.py                 # 3 runs, ~1 min
    .venv/bin/python bench/bench_markdown.py --runs 5 --chunk-chars 20 --json md.json

One realistic answer (``tests/e2e/markdown_samples.long_answer``: ≥ 10 000 characters of
headings, prose, lists, tables and fenced code) is streamed in ``--chunk-chars`` pieces; after
every piece the text so far is rendered as a snapshot would be. Per run, each timed in-process:

* ``floor``: what the gateway does per chunk anyway, at its cheapest: ``json.dumps`` of the turn
  snapshot and one ``group_send`` + ``receive`` on ``LocalChannelLayer`` (one watcher).
* ``server``: incremental server-side rendering, as the issue describes it: markdown-it-py (the
  block parser's line maps split the text into top-level blocks), closed blocks rendered once and
  cached by their source, only the open tail rendered again, fenced code through Pygments, the
  HTML through nh3. Its output is checked against a one-shot render before timing.
* ``browser``: ``PicoBot.Markdown.render(el, text, {streaming: true})`` of static/picobot/
  markdown.js in Chromium (Playwright), per snapshot, render alone and render + forced layout.

The server side and the floor are timed in CPU time of their thread (``time.thread_time``), so
other processes on the machine disturb them less; the browser in ``performance.now()`` (wall).
Reported: medians over the runs (each run's figure is the mean per chunk), and the server cost
scaled to ``--dialogs`` dialogs streaming ``--rate`` chunks/s each (as in bench_load.py).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import nh3  # noqa: E402
from markdown_it import MarkdownIt  # noqa: E402
from pygments import highlight  # noqa: E402
from pygments.formatters import HtmlFormatter  # noqa: E402
from pygments.lexers import get_lexer_by_name  # noqa: E402
from pygments.util import ClassNotFound  # noqa: E402

from tests.e2e.markdown_samples import long_answer  # noqa: E402

SAFE_SCHEMES = ("http:", "https:", "mailto:")
ALLOWED_TAGS = {"a", "blockquote", "br", "code", "del", "div", "em", "h1", "h2", "h3", "h4", "h5", "h6",
                "hr", "li", "ol", "p", "pre", "s", "span", "strong", "table", "tbody", "td", "th", "thead",
                "tr", "ul"}  # fmt: skip
ALLOWED_ATTRS = {"*": {"class"}, "a": {"href", "title"}, "ol": {"start"}}
VENDOR = [
    "vendor/markdown-it.min.js",
    "vendor/purify.min.js",
    "vendor/highlight.min.js",
    "picobot/markdown.js",
]


# --- the server-side renderer the browser one is compared with ------------------------------------


class ServerMarkdown:
    """Incremental server-side Markdown (markdown-it-py + Pygments + nh3), one per streamed answer."""

    def __init__(self) -> None:
        md = MarkdownIt("commonmark", {"html": False, "breaks": True, "highlight": self._highlight})
        md.enable("table").enable("strikethrough")
        md.validateLink = lambda url: url.strip().lower().startswith(SAFE_SCHEMES)
        self.md = md
        self.cache: dict[str, str] = {}
        self.closed: list[str] = []  # HTML of the closed blocks, in order
        self.offset = 0  # where the open block starts in the text
        self.formatter = HtmlFormatter(nowrap=True)

    def _highlight(self, code: str, lang: str, _attrs: str) -> str:
        try:
            lexer = get_lexer_by_name(lang) if lang else None
        except ClassNotFound:
            lexer = None
        return highlight(code, lexer, self.formatter) if lexer else ""

    def _block(self, src: str) -> str:
        html = self.md.render(src)
        return nh3.clean(
            html, tags=ALLOWED_TAGS, attributes=ALLOWED_ATTRS, url_schemes={"http", "https", "mailto"}
        )

    def render(self, text: str, streaming: bool) -> str:
        """HTML of ``text`` (which extends the previous one): closed blocks are rendered once and
        never parsed again; the text from the open block on is parsed and rendered again."""
        tail = text[self.offset :]
        tokens: list[Any] = []
        self.md.block.parse(tail, self.md, {}, tokens)
        lines = tail.split("\n")
        starts = [0]
        for line in lines:
            starts.append(starts[-1] + len(line) + 1)
        spans = [t.map for t in tokens if t.level == 0 and t.nesting != -1 and t.map]
        keep_open = 1 if streaming else 0
        for start, end in spans[: len(spans) - keep_open]:
            self.closed.append(self._cached("\n".join(lines[start:end])))
        if streaming and spans:
            start, end = spans[-1]
            self.offset += starts[start]
            return "".join(self.closed) + self._block("\n".join(lines[start:end]))
        return "".join(self.closed)

    def _cached(self, src: str) -> str:
        html = self.cache.get(src)
        if html is None:
            html = self.cache[src] = self._block(src)
        return html

    def render_once(self, text: str) -> str:
        return self._block(text)


def snapshots(text: str, chunk_chars: int) -> list[str]:
    return [text[:i] for i in range(chunk_chars, len(text), chunk_chars)] + [text]


def time_server(prefixes: list[str]) -> float:
    """Mean µs per chunk of incremental server rendering (the last render is the final one)."""
    renderer = ServerMarkdown()
    gc.collect()
    t0 = time.thread_time()
    for i, prefix in enumerate(prefixes):
        renderer.render(prefix, streaming=i < len(prefixes) - 1)
    return (time.thread_time() - t0) / len(prefixes) * 1e6


def time_floor(prefixes: list[str]) -> float:
    """Mean µs per chunk of json.dumps(snapshot) + a local-layer group_send and receive."""
    from delivery.local_layer import LocalChannelLayer

    async def run() -> float:
        layer = LocalChannelLayer()
        channel = await layer.new_channel()
        await layer.group_add("turn-bench", channel)
        gc.collect()
        t0 = time.thread_time()
        for revision, prefix in enumerate(prefixes, 1):
            snapshot = {"id": "t1", "session_id": "s1", "message_id": "m1", "revision": revision,
                        "status": "running", "phase": "responding", "usage": None, "error": None,
                        "blocks": [{"type": "assistant", "id": "b1", "iteration": 0, "text": prefix}]}  # fmt: skip
            payload = json.dumps(snapshot, ensure_ascii=False)
            await layer.group_send("turn-bench", {"type": "turn.snapshot", "payload": payload})
            await layer.receive(channel)
        return (time.thread_time() - t0) / len(prefixes) * 1e6

    # In a thread of its own: Playwright's sync API keeps an event loop running in this one.
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, run()).result()


BROWSER_LOOP = """([prefixes, layout]) => {
  const el = document.createElement('div');
  el.className = 'answer';
  document.body.replaceChildren(el);
  const ms = [];
  prefixes.forEach((p, i) => {
    const t0 = performance.now();
    PicoBot.Markdown.render(el, p, {streaming: i < prefixes.length - 1});
    if (layout) el.getBoundingClientRect();
    ms.push(performance.now() - t0);
  });
  const once = document.createElement('div');
  PicoBot.Markdown.renderOnce(once, prefixes[prefixes.length - 1]);
  return {ms, same: once.innerHTML === el.innerHTML};
}"""


def time_browser(page: Any, prefixes: list[str], layout: bool) -> dict[str, float]:
    """Per-snapshot ms of markdown.js in a fresh page (optionally with a forced layout)."""
    page.goto("about:blank")
    page.add_style_tag(path=str(REPO / "static" / "picobot" / "app.css"))
    for rel in VENDOR:
        page.add_script_tag(path=str(REPO / "static" / rel))
    result = page.evaluate(BROWSER_LOOP, [prefixes, layout])
    assert result["same"], "the streamed render differs from the one-shot render"
    ms = result["ms"]
    return {"mean": statistics.fmean(ms), "median": statistics.median(ms), "max": max(ms)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--chars", type=int, default=10_000, help="minimum answer length")
    parser.add_argument("--chunk-chars", type=int, default=20)
    parser.add_argument("--dialogs", type=int, default=100)
    parser.add_argument("--rate", type=float, default=20.0, help="chunks per second per dialog")
    parser.add_argument("--json", type=Path, help="write every run's figures here")
    args = parser.parse_args(argv)

    text = long_answer(args.chars)
    prefixes = snapshots(text, args.chunk_chars)
    check = ServerMarkdown()
    for p in prefixes[:-1]:
        check.render(p, streaming=True)
    assert check.render(text, streaming=False) == ServerMarkdown().render_once(text), (
        "incremental != one-shot"
    )

    from playwright.sync_api import sync_playwright

    runs: list[dict[str, float]] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"]
        )
        page = browser.new_page()
        time_browser(page, prefixes[:50], layout=False)  # warm-up: JIT, highlight.js grammars
        for run in range(args.runs):
            figures = {"floor_us": time_floor(prefixes), "server_us": time_server(prefixes)}
            figures["server_per_floor"] = figures["server_us"] / figures["floor_us"]
            render_only = time_browser(page, prefixes, layout=False)
            with_layout = time_browser(page, prefixes, layout=True)
            figures |= {f"browser_{k}_ms": v for k, v in render_only.items()}
            figures |= {f"browser_layout_{k}_ms": v for k, v in with_layout.items()}
            runs.append(figures)
            print(f"run {run + 1}: " + ", ".join(f"{k} {v:.3f}" for k, v in figures.items()), flush=True)
        browser.close()

    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    chunks_per_s = args.dialogs * args.rate
    print(
        f"\nanswer {len(text)} chars, {len(prefixes)} chunks of {args.chunk_chars}; medians of {args.runs} runs"
    )
    print(f"gateway floor (json.dumps + layer send/receive): {med['floor_us']:.1f} µs/chunk")
    print(
        f"server-side Markdown (incremental): {med['server_us']:.1f} µs/chunk = "
        f"{med['server_per_floor']:.1f}× the floor (median of the runs' ratios); at {args.dialogs} dialogs × {args.rate:g} "
        f"chunks/s: {med['server_us'] * chunks_per_s / 1e6:.2f} cores (floor {med['floor_us'] * chunks_per_s / 1e6:.3f})"
    )
    print(
        f"browser markdown.js per snapshot: mean {med['browser_mean_ms']:.2f} ms, median "
        f"{med['browser_median_ms']:.2f} ms, max {med['browser_max_ms']:.1f} ms; with layout mean "
        f"{med['browser_layout_mean_ms']:.2f} ms, max {med['browser_layout_max_ms']:.1f} ms (server cost: 0)"
    )
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)}, "runs": runs,
                                         "median": med}, indent=2))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
