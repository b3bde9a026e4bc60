"""Command line of ``bench/bench_load.py`` (see its docstring and bench/README.md)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.load import report, scenarios, servers

DESCRIPTION = """\
PicoBot under load: N real WebSocket clients, each streaming one dialog from a local
OpenAI-compatible server (CHUNKS chunks at RATE chunks/s), against PicoBot embedded
(manage.py serve) and/or scale-out (2 x daphne + 2 x runagent, PostgreSQL + Redis), with two
floors in the same run: the Channels floor (Daphne + Channels + in-memory layer, no PicoBot)
and the layer floor (InMemoryChannelLayer alone). Loopback only; every process it starts is
stopped at the end (also on Ctrl+C). Figures are medians of --repeat runs.

scenarios:
  load    the table: added latency, TTFT, CPU per 1000 chunks, peak RSS, lost turns, frames/turn
  slow    load plus one socket that sends 4 long messages and 300 history requests, never reads
  idle    --connections idle authenticated sockets: server RSS growth per connection
  churn   --cycles connect / ready / close: server RSS and Redis clients before vs after
"""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="bench_load.py", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--scenario", nargs="+", choices=["load", "slow", "lock", "idle", "churn"], default=["load"]
    )
    p.add_argument("--mode", choices=["embedded", "scaleout", "both"], default="embedded")
    p.add_argument("--dialogs", type=int, nargs="+", default=[10, 100], help="N values (default 10 100)")
    p.add_argument("--repeat", type=int, default=3, help="runs per (target, N); figures are medians")
    p.add_argument("--chunks", type=int, default=200, help="chunks per answer")
    p.add_argument("--rate", type=float, default=20.0, help="chunks per second per answer")
    p.add_argument("--spread", type=float, default=2.0, help="seconds over which the N sends are spread")
    p.add_argument("--timeout", type=float, default=120.0, help="per-client bound of a turn, seconds")
    p.add_argument("--lock-seconds", type=float, default=30.0, help="lock: how long the storage stays locked")
    p.add_argument(
        "--lock-after", type=float, default=3.0, help="lock: seconds after the first send it starts"
    )
    p.add_argument("--no-floors", dest="floors", action="store_false", help="skip the two floors")
    p.add_argument("--connections", type=int, default=5000, help="idle: sockets to open")
    p.add_argument("--cycles", type=int, default=10000, help="churn: connect/close cycles")
    p.add_argument("--churn-concurrency", type=int, default=32)
    p.add_argument(
        "--churn-time-limit", type=float, default=600.0, help="churn: stop after this many seconds"
    )
    p.add_argument(
        "--slow-hold",
        type=float,
        default=10.0,
        help="slow: seconds the non-reading socket stays open after the others finish",
    )
    p.add_argument(
        "--pg-url",
        default="postgres://postgres@127.0.0.1:5432/postgres",
        help="scaleout: a PostgreSQL database to CREATE/DROP the bench database from",
    )
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379", help="scaleout: Redis (no db index)")
    p.add_argument(
        "--redis-db", type=int, default=13, help="scaleout: Redis db index (flushed before and after)"
    )
    p.add_argument("--max-minutes", type=float, default=90.0, help="hard bound of the whole benchmark")
    p.add_argument(
        "--server-env",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="a PICOBOT_* setting for the PicoBot processes (repeatable), e.g. PICOBOT_SWITCH_INTERVAL_MS=0.5",
    )
    p.add_argument("--json", metavar="PATH", help="also write every figure as JSON")
    p.add_argument("--keep", action="store_true", help="keep the temp directory (server logs)")
    args = p.parse_args(argv)
    for item in args.server_env:
        key, sep, _ = item.partition("=")
        if not sep or not key.startswith("PICOBOT_"):
            p.error(f"--server-env takes PICOBOT_KEY=VALUE, not {item!r}")
    for url in (args.pg_url, args.redis_url):
        if "127.0.0.1" not in url and "localhost" not in url:
            p.error(f"loopback only: {url}")
    return args


def raise_nofile() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def say(text: str) -> None:
    print(text, flush=True)


class Bench:
    def __init__(self, args: argparse.Namespace, root: Path) -> None:
        self.args = args
        self.root = root
        self.llm: servers.LLMServer | None = None
        self.out: dict[str, Any] = {
            "config": {k: v for k, v in vars(args).items()},
            "load": [],
            "slow": [],
            "lock": [],
            "idle": [],
            "churn": [],
            "server_logs": [],
        }
        self.run_no = 0

    @property
    def modes(self) -> list[str]:
        return ["embedded", "scaleout"] if self.args.mode == "both" else [self.args.mode]

    def picobot(self, mode: str, users: int) -> servers.PicoBot:
        assert self.llm is not None
        a = self.args
        extra = dict(item.partition("=")[::2] for item in a.server_env)
        if mode == "embedded":
            return servers.EmbeddedPicoBot(self.llm.port, users, self.root, extra_env=extra)
        return servers.ScaleoutPicoBot(
            self.llm.port,
            users,
            self.root,
            pg_admin_url=a.pg_url,
            redis_base=a.redis_url,
            redis_db=a.redis_db,
            extra_env=extra,
        )

    def note_logs(self, label: str, target: Any) -> None:
        for name, (count, lines) in target.logs().items():
            if count:
                self.out["server_logs"].append(
                    {"run": label, "process": name, "notable_lines": count, "first": lines}
                )

    async def one_load(self, mode: str, n: int, slow: bool, lock: bool = False) -> dict[str, Any]:
        a = self.args
        self.run_no += 1
        run_id = f"r{self.run_no}"
        label = f"{mode} N={n} {run_id}"
        assert self.llm is not None
        if mode == "layer-floor":
            proc = await asyncio.create_subprocess_exec(
                servers.PYTHON,
                "-m",
                "bench.load.layer_floor",
                "--dialogs",
                str(n),
                "--chunks",
                str(a.chunks),
                "--rate",
                str(a.rate),
                "--spread",
                str(a.spread),
                cwd=servers.REPO,
                env=servers.clean_env({}),
                stdout=asyncio.subprocess.PIPE,
                start_new_session=True,
            )
            try:
                async with asyncio.timeout(a.spread + a.chunks / a.rate + 120):
                    stdout, _ = await proc.communicate()
            finally:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
            return json.loads(stdout.decode().strip().splitlines()[-1])
        if mode == "channels-floor":
            floor = servers.ChannelsFloor(a.chunks, a.rate, self.root)
            try:
                await floor.start()
                tokens = ["floor"] * n
                return await scenarios.run_load(
                    floor,
                    tokens,
                    floor.take_times,
                    dialogs=n,
                    chunks=a.chunks,
                    spread=a.spread,
                    timeout=a.timeout,
                    run_id=run_id,
                    llm_pids=[],
                )
            finally:
                floor.stop()
                self.note_logs(label, floor)
        target = self.picobot(mode, n + (1 if slow else 0))
        try:
            await target.start()
            await self.llm.take_times()  # forget earlier runs
            return await scenarios.run_load(
                target,
                target.tokens,
                self.llm.take_times,
                dialogs=n,
                chunks=a.chunks,
                spread=a.spread,
                timeout=a.timeout,
                run_id=run_id,
                llm_pids=self.llm.pids,
                slow_token=target.tokens[n] if slow else None,
                slow_port=target.http_ports[0] if target.http_ports else 0,
                slow_hold=a.slow_hold,
                lock_after=a.lock_after if lock else None,
                lock_seconds=a.lock_seconds,
            )
        finally:
            target.stop()
            self.note_logs(label, target)
            await asyncio.to_thread(target.cleanup, a.keep)

    async def load(self, key: str) -> None:
        a = self.args
        slow, lock = key == "slow", key == "lock"
        targets = list(self.modes)
        if a.floors and key == "load":
            targets += ["channels-floor", "layer-floor"]
        for n in a.dialogs:
            for target in targets:
                runs = []
                for r in range(a.repeat):
                    say(f"[{time.strftime('%H:%M:%S')}] {key}: {target} N={n} run {r + 1}/{a.repeat} …")
                    result = await self.one_load(target, n, slow, lock)
                    runs.append(result)
                    say("    " + brief(target, result))
                self.out[key].append(
                    {"target": target, "dialogs": n, "runs": runs, "median": report.median_merge(runs)}
                )

    async def idle_or_churn(self, kind: str) -> None:
        a = self.args
        for mode in self.modes:
            users = min(a.connections, 5000) if kind == "idle" else 100
            say(f"[{time.strftime('%H:%M:%S')}] {kind}: {mode} …")
            target = self.picobot(mode, users)
            try:
                await target.start()
                if kind == "idle":
                    result = await scenarios.run_idle(
                        target, target.tokens, connections=a.connections, timeout=a.timeout
                    )
                else:
                    result = await scenarios.run_churn(
                        target,
                        target.tokens,
                        cycles=a.cycles,
                        concurrency=a.churn_concurrency,
                        timeout=a.timeout,
                        time_limit=a.churn_time_limit,
                    )
            finally:
                target.stop()
                self.note_logs(f"{kind} {mode}", target)
                await asyncio.to_thread(target.cleanup, a.keep)
            say(f"    {result}")
            self.out[kind].append({"target": mode, "result": result})

    async def run(self) -> None:
        self.llm = servers.LLMServer(self.args.chunks, self.args.rate, self.root)
        await self.llm.start()
        for scenario in self.args.scenario:
            if scenario in ("load", "slow", "lock"):
                await self.load(scenario)
            else:
                await self.idle_or_churn(scenario)


def brief(target: str, r: dict[str, Any]) -> str:
    lat = r["latency_ms"]
    if target == "layer-floor":
        return (
            f"latency p50 {lat['p50']:.1f} p99 {lat['p99']:.1f} ms, lost {r['lost']}, cpu {r['cpu_s']:.2f} s"
        )
    lock = r.get("storage_lock")
    held = (
        (
            f", storage locked {lock['held_from_s']:.1f}–{lock['released_at_s']:.1f} s: committed "
            f"{lock['committed_before_release']} before the release, {lock['committed_after_release']} after "
            f"(last at {lock['last_committed_s']:.1f} s)"
        )
        if lock
        else ""
    )
    return (
        f"ok {r['ok']}/{r['turns']}, lost {r['lost_total']}, latency p50 {lat['p50']:.1f} p99 {lat['p99']:.1f} "
        f"max {lat['max']:.1f} ms, TTFT p50 {r['ttft_ms']['p50']:.0f} ms (send→LLM p50 "
        f"{r['send_to_llm_ms']['p50']:.0f} ms), server cpu {r['server_cpu_s']:.1f} s, harness cpu "
        f"{r['harness_cpu_s']:.1f} s, wall {r['wall_s']:.1f} s{held}"
    )


def _clean(value: Any) -> Any:
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def print_report(out: dict[str, Any]) -> None:
    if out["load"]:
        say("\n## Load (medians)\n" + report.load_table(out["load"]))
    if out["slow"]:
        say("\n## Slow (non-reading) client (medians)\n" + report.slow_table(out["slow"]))
    if out["lock"]:
        say("\n## Storage locked mid-turn (medians)\n" + report.load_table(out["lock"]))
    if out["idle"]:
        say("\n## Idle connections\n" + report.idle_table(out["idle"]))
    if out["churn"]:
        say("\n## Connect/disconnect churn\n" + report.churn_table(out["churn"]))
    lost_errors = [
        (row["target"], row["dialogs"], run.get("client_errors"))
        for row in out["load"] + out["slow"] + out["lock"]
        for run in row["runs"]
        if run.get("client_errors")
    ]
    if lost_errors:
        say("\n## Client-side errors (per run)")
        for target, n, errors in lost_errors:
            say(f"- {target} N={n}: {errors}")
    if out["server_logs"]:
        say("\n## Server log lines mentioning errors / warnings / interrupted")
        for entry in out["server_logs"]:
            say(f"- {entry['run']} {entry['process']}: {entry['notable_lines']} lines, e.g.")
            for line in entry["first"][:6]:
                say(f"    {line}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    nofile = raise_nofile()
    if "idle" in args.scenario and args.connections + 200 > nofile:
        say(f"RLIMIT_NOFILE is {nofile}: --connections lowered to {nofile - 200}")
        args.connections = nofile - 200
    root = Path(tempfile.mkdtemp(prefix="picobot-bench-load-"))
    bench = Bench(args, root)
    say(
        f"bench_load: scenarios {args.scenario}, mode {args.mode}, N {args.dialogs}, repeat {args.repeat}, "
        f"{args.chunks} chunks at {args.rate}/s; logs in {root}"
    )
    code = 0
    try:
        asyncio.run(asyncio.wait_for(bench.run(), args.max_minutes * 60))
    except KeyboardInterrupt:
        say("interrupted: stopping every process started")
        code = 130
    except TimeoutError:
        say(f"--max-minutes {args.max_minutes} reached: stopping")
        code = 1
    finally:
        servers.stop_all()
        if not args.keep:
            import shutil

            shutil.rmtree(root, ignore_errors=True)
    print_report(bench.out)
    if args.json:
        Path(args.json).write_text(json.dumps(_clean(bench.out), indent=1, ensure_ascii=False))
        say(f"\nJSON written to {args.json}")
    return code


if __name__ == "__main__":
    sys.exit(main())
