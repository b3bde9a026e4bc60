"""Turn-start cost with and without the runtime session (seed 004 §5), on a long dialog.

A turn start moves the next inbox row into history and hands the executor the dialog's history.
Without a runtime session that is a full read of every row since the summary (O(history)); with
one, ``start_next_turn(known_revision=…)`` reads only the new rows. This times both on a dialog of
``--rows`` committed messages in a throwaway SQLite database (or ``--database-url``).

    .venv/bin/python bench/bench_turn_start.py                 # 5 000 rows, 50 turns each way
    .venv/bin/python bench/bench_turn_start.py --rows 20000 --turns 20
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=5000, help="committed history rows before timing")
    parser.add_argument("--turns", type=int, default=50, help="turn starts timed per mode")
    parser.add_argument("--database-url", default="", help="default: a fresh SQLite file")
    args = parser.parse_args()

    data_dir = tempfile.mkdtemp(prefix="picobot-bench-")
    os.environ["PICOBOT_DATA_DIR"] = data_dir
    os.environ["PICOBOT_DATABASE_URL"] = args.database_url or f"sqlite:///{data_dir}/bench.sqlite3"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "picobot_site.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from conversations import storage
    from conversations.auth import get_or_create_user
    from conversations.models import Message

    user = get_or_create_user("bench")[0]
    dialog = storage.create_dialog(user, "cli_chat", "bench", f"bench {time.time_ns()}")
    body = "lorem ipsum dolor sit amet " * 20  # ~540 characters per row
    Message.objects.bulk_create(
        [
            Message(dialog=dialog, seq=i, role="user" if i % 2 else "assistant", content=body)
            for i in range(1, args.rows + 1)
        ],
        batch_size=2000,
    )
    type(dialog).objects.filter(pk=dialog.pk).update(history_revision=args.rows)

    def one_turn(known: bool, revision: int) -> tuple[float, int]:
        storage.accept_message(user, "cli_chat", "bench", "next question", session_id=dialog.id)
        epoch = storage.claim_lease(dialog.id, "bench", 60_000)
        extra = {"known_revision": revision, "known_summary_seq": 0} if known else {}
        started = time.perf_counter()
        start = storage.start_next_turn(dialog.id, "bench", epoch, **extra)
        elapsed = time.perf_counter() - started
        commit = storage.commit_turn(
            dialog.id, "bench", epoch, start.inbox_id, [{"role": "assistant", "content": "ok"}]
        )
        storage.release_lease(dialog.id, "bench", epoch)
        return elapsed, commit.history_revision

    revision = args.rows
    results: dict[str, list[float]] = {"full read": [], "session delta": []}
    for _ in range(args.turns):
        for mode in results:
            elapsed, revision = one_turn(mode == "session delta", revision)
            results[mode].append(elapsed * 1000)
    print(f"history ≈ {revision} rows; {args.turns} turn starts per mode (ms):")
    for mode, times in results.items():
        print(
            f"  {mode:14s} median {statistics.median(times):8.2f}   p90 {sorted(times)[int(len(times) * 0.9)]:8.2f}"
        )


if __name__ == "__main__":
    main()
