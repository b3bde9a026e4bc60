"""The fault × invariant matrix (issue 16): what is injected, what must hold, and the README table.

``FAULTS`` lists every injected fault (its id, its layer, what the scenario does); ``INVARIANTS``
every rule checked after each of them (DESIGN §5 invariants, PROTOCOL §1). One pytest id per
cell: ``tests/faults/test_matrix.py::test_cell[<fault>-<invariant>]``.

``python -m tests.faults.catalog`` prints the README's matrix; ``--write README.md`` replaces it
between the README's markers (``tests/faults/test_readme_matrix.py`` fails when they differ).
Pure module: no Django.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

MATRIX_TEST = "tests/faults/test_matrix.py::test_cell"


@dataclass(frozen=True)
class Fault:
    """One injected fault: ``id`` (a pytest id part), the ``layer`` it hits, ``what`` the scenario does."""

    id: str
    layer: str
    what: str


@dataclass(frozen=True)
class Invariant:
    """One rule checked after every fault: ``id`` (a pytest id part), ``short`` (the table's
    column header), ``rule`` (what is asserted)."""

    id: str
    short: str
    rule: str


FAULTS: tuple[Fault, ...] = (
    Fault("provider-stall", "provider", "the stream goes silent after some answer text (idle timeout)"),
    Fault("provider-reset", "provider", "the connection is cut mid-stream after some answer text"),
    Fault("provider-5xx", "provider", "HTTP 500 on the first attempt, then a good answer (retried)"),
    Fault("provider-malformed-json", "provider", "a `data:` event that is not JSON mid-stream"),
    Fault("provider-huge-chunks", "provider", "the answer arrives as 1 MiB deltas (4 MiB in all)"),
    Fault("provider-slow-drip", "provider", "the answer arrives 24 bytes at a time, 2 ms apart"),
    Fault("db-locked", "database", '"database is locked" on the commit twice, then it succeeds'),
    Fault("db-write-failure", "database", "starting a turn fails past the retries, then storage recovers"),
    Fault("db-commit-failure", "database", "the turn's commit fails on every attempt"),
    Fault("db-slow-commit", "database", "the commit holds its transaction for twice the lease"),
    Fault("layer-drop", "channel layer", "every group message and wake-up is dropped while a turn ends"),
    Fault("layer-expire", "channel layer", "every layer message expires unread while a turn ends"),
    Fault("layer-redis-down", "channel layer", "the Redis server stops mid-turn and comes back"),
    Fault("sink-open-failure", "sink", "opening the turn's sink raises"),
    Fault("sink-update-failure", "sink", "every running update raises"),
    Fault("sink-finish-failure", "sink", "every attempt of the final raises"),
    Fault("sink-slow-client", "sink", "a client reads one frame per 20 ms and sends no `seen`"),
    Fault("sink-non-reading-client", "sink", "a second client of the chat reads nothing until the end"),
    Fault("process-kill-mid-provider", "process", "`serve` is SIGKILLed while the answer streams"),
    Fault("process-kill-mid-tool", "process", "`serve` is SIGKILLed while a tool runs"),
    Fault("process-kill-mid-commit", "process", "`serve` is SIGKILLed inside the commit transaction"),
)

INVARIANTS: tuple[Invariant, ...] = (
    Invariant(
        "completed_only_after_commit",
        "Completed only after commit",
        "every `completed` final reached a client after its turn's commit (and its rows are committed)",
    ),
    Invariant(
        "one_final",
        "One user-visible final",
        "every acknowledged message's turn shows exactly one terminal snapshot on the client that "
        "sent it, and no plain fallback beside it",
    ),
    Invariant(
        "no_duplicate_user_message",
        "No duplicate user message",
        "each message (also one sent again with its `client_msg_id`) is in history once, in one "
        "`turn_committed`, and once in every provider request",
    ),
    Invariant(
        "no_orphaned_tool_call",
        "No orphaned tool call",
        "every tool call in a request sent to the provider, and in history, has its tool result",
    ),
    Invariant(
        "no_turn_left_running",
        "No turn left running",
        "after the fault settles (or the restart) no inbox row is queued or started and a new "
        "connection's `ready.running` is empty",
    ),
    Invariant(
        "no_false_interrupted",
        'No false "interrupted"',
        "only a turn whose process died is reported interrupted (inbox row, notice, final); it is",
    ),
    Invariant(
        "memory_bounded",
        "Memory bounded",
        "the scenario's peak traced memory (the server's peak RSS for `serve`) and the frames a "
        "non-reading client holds stay under their bounds",
    ),
)


def cell_id(fault: Fault, invariant: Invariant) -> str:
    """The pytest id of one cell (without the module): ``<fault>-<invariant>``."""
    return f"{fault.id}-{invariant.id}"


LAYER_CODES = {"provider": "P", "database": "D", "channel layer": "L", "sink": "S", "process": "K"}


def short_ids() -> dict[str, str]:
    """Fault id → its short id in the README's table: the layer's letter and its number there (``P1``)."""
    counts: dict[str, int] = {}
    codes = {}
    for fault in FAULTS:
        letter = LAYER_CODES[fault.layer]
        counts[letter] = counts.get(letter, 0) + 1
        codes[fault.id] = f"{letter}{counts[letter]}"
    return codes


def matrix_table() -> str:
    """The README's matrix (Markdown): the invariants (numbered columns), then one row per fault;
    the cell of fault ``P1`` and invariant 3 reads ``P1.3`` and is the test
    ``MATRIX_TEST[<P1's fault id>-<invariant 3's id>]``."""
    codes = short_ids()
    legend = ["| # | invariant (test id part) | asserted |", "|---|---|---|"]
    legend += [f"| {n} | {inv.short} (`{inv.id}`) | {inv.rule} |" for n, inv in enumerate(INVARIANTS, 1)]
    header = "| fault (test id part) | injected | " + " | ".join(
        str(n) for n in range(1, len(INVARIANTS) + 1)
    )
    rows = [header + " |", "|---|---|" + "---|" * len(INVARIANTS)]
    for fault in FAULTS:
        code = codes[fault.id]
        cells = " | ".join(f"{code}.{n}" for n in range(1, len(INVARIANTS) + 1))
        rows.append(f"| {code} `{fault.id}` | {fault.layer}: {fault.what} | {cells} |")
    return "\n".join(legend) + "\n\n" + "\n".join(rows) + "\n"


def cell_test_id(short: str) -> str:
    """The full pytest id of a README cell (``P1.3``). Raises KeyError/ValueError for an unknown one."""
    code, number = short.split(".")
    fault = next(f for f in FAULTS if short_ids()[f.id] == code)
    return f"{MATRIX_TEST}[{cell_id(fault, INVARIANTS[int(number) - 1])}]"


TABLE_START = "<!-- fault-matrix: generated by `python -m tests.faults.catalog --write README.md` -->"
TABLE_END = "<!-- /fault-matrix -->"


def with_matrix_table(readme: str) -> str:
    """``readme`` with the text between the markers replaced by :func:`matrix_table`.
    Raises ValueError when the markers are missing."""
    start, end = readme.find(TABLE_START), readme.find(TABLE_END)
    if start < 0 or end < start:
        raise ValueError("the README has no fault-matrix markers")
    return readme[: start + len(TABLE_START)] + "\n" + matrix_table() + readme[end:]


def main(argv: list[str] | None = None) -> None:
    """``python -m tests.faults.catalog [--write README.md]``; exit 2 on a file without markers."""
    parser = argparse.ArgumentParser(
        prog="python -m tests.faults.catalog", description="Print or write the README's fault matrix."
    )
    parser.add_argument("--write", metavar="README", type=Path, help="replace the matrix in this file")
    args = parser.parse_args(argv)
    if args.write is None:
        sys.stdout.write(matrix_table())
        return
    try:
        text = args.write.read_text(encoding="utf-8")
        args.write.write_text(with_matrix_table(text), encoding="utf-8")
    except (OSError, ValueError) as exc:
        parser.exit(2, f"{parser.prog}: {args.write}: {getattr(exc, 'strerror', None) or exc}\n")


if __name__ == "__main__":
    main()
