#!/usr/bin/env python3
"""No-change reruns taken in turn, on clusters that stay up: an A/B that holds
while the machine's speed drifts (by up to 1.6x within a quarter of an hour).

    .venv/bin/python bench/interleave.py --other ../old --peer ../peer --rounds 5

On the demo's containers (made afresh unless --no-fresh: molecule destroy and
create, then a cold site.yml), each round runs a plain `ansible-playbook
site.yml` of this checkout, then of --other (another checkout of the project,
e.g. a worktree of the last release; the same containers), then the peer's
playbook (--peer: a copy of ../shared/peer-bench with the peer's role in it;
its three containers are made and provisioned once, before the rounds, and
removed after): in that order in even rounds, in reverse in odd ones (the
first run of a round is slower; a fixed order would book that to one side).
The first --warmup rounds are left out of the figures (the other checkout
fills its own fact cache there). Every rerun must report
changed=0 (exit 1 otherwise).

Figures: each side's median, the other checkout's paired difference (its
rerun minus this one's, round by round), and this checkout's median over the
peer's. Results: bench/results/interleave-<UTC>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench

PEER_PLAYBOOK = "galaxy-slurm.yml"
PEER_INVENTORY = "inventory.ini"
PEER_PREFIX = "pb"

Runner = Callable[[str, str, Path, Sequence[str]], bench.RunResult]


def plain(name: str, playbook: str, root: Path, args: Sequence[str] = ()) -> bench.RunResult:
    return bench.run_plain(name, "rerun_plain", playbook, root=root, args=args)


def sides(other: Path | None, peer: Path | None) -> list[tuple[str, str, Path, list[str]]]:
    """(side, playbook, folder, arguments) in the order each round runs them."""
    found = [("this", "site.yml", bench.ROOT, [])]
    if other is not None:
        found.append(("other", "site.yml", other, []))
    if peer is not None:
        found.append(("peer", PEER_PLAYBOOK, peer, ["-i", PEER_INVENTORY]))
    return found


def rounds(
    order: list[tuple[str, str, Path, list[str]]],
    count: int,
    warmup: int,
    run: Runner = plain,
    *,
    stop: Callable[[bench.RunResult], bool] = lambda result: not result.ok,
    label: str = "interleave",
) -> list[dict[str, bench.RunResult]]:
    """warmup + count rounds, each side once per round; a run `stop` picks (a failed one) stops.

    Even rounds run the sides in order, odd rounds in reverse: the first run
    of a round was measured 0.36 s slower than the same code run second
    (2026-12-05, bench/README.md), which a fixed order books to one side.
    """
    done: list[dict[str, bench.RunResult]] = []
    for r in range(warmup + count):
        this_round: dict[str, bench.RunResult] = {}
        for side, playbook, root, args in order if r % 2 == 0 else order[::-1]:
            result = run(f"{side}-{r}", playbook, root, args)
            this_round[side] = result
            note = f", changed={result.changed}" if result.hosts else ""
            print(f"{label}: round {r} {side} {result.wall_s:.2f} s{note}", flush=True)
            if stop(result):
                done.append(this_round)
                return done
        done.append(this_round)
    return done


def summarise(done: list[dict[str, bench.RunResult]], warmup: int) -> dict[str, Any]:
    counted = done[warmup:]
    complete = [r for r in counted if all(res.ok for res in r.values())]
    names = list(done[0]) if done else []
    medians = {
        side: round(statistics.median(r[side].wall_s for r in complete), 3) if complete else None
        for side in names
    }
    out: dict[str, Any] = {"rounds": len(complete), "median_s": medians}
    if "other" in names and complete:
        diffs = [r["other"].wall_s - r["this"].wall_s for r in complete]
        out["other_minus_this_s"] = round(statistics.median(diffs), 3)
        out["this_faster_rounds"] = sum(d > 0 for d in diffs)
    if "peer" in names and medians.get("peer"):
        out["this_x_peer"] = round(medians["this"] / medians["peer"], 2)
    out["problems"] = [
        f"{res.name}: "
        + ("changed=" + str(res.changed) if res.ok else f"{res.status}, rc {res.rc}")
        for r in done
        for res in r.values()
        if not res.ok or res.changed
    ]
    return out


def table(done: list[dict[str, bench.RunResult]], summary: Mapping[str, Any], warmup: int) -> str:
    names = list(done[0]) if done else []
    lines = ["round  " + "".join(f"{n:>10}" for n in names)]
    for i, r in enumerate(done):
        cells = "".join(f"{r[n].wall_s:>9.2f}s" if n in r else f"{'':>10}" for n in names)
        lines.append(f"{i:>5}{'*' if i < warmup else ' '} {cells}")
    med = summary["median_s"]
    lines.append("median " + "".join(f"{med[n]:>9.2f}s" if med[n] else f"{'-':>10}" for n in names))
    lines.append(f"  (* warm-up, left out; {summary['rounds']} rounds counted)")
    if "other_minus_this_s" in summary:
        lines.append(
            f"  other - this, median of the paired rounds: {summary['other_minus_this_s']:+.2f} s "
            f"(this faster in {summary['this_faster_rounds']} of {summary['rounds']})"
        )
    if "this_x_peer" in summary:
        lines.append(f"  this / peer: {summary['this_x_peer']:.2f}x (target <= 1x)")
    lines += [f"  problem: {p}" for p in summary["problems"]]
    return "\n".join(lines)


def shell(argv: list[str], cwd: Path) -> None:
    """A preparation step; its failure stops the bench with its output."""
    env = dict(os.environ, **bench.tool_env())
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(f"interleave: {' '.join(argv)} failed in {cwd}:\n{proc.stdout}{proc.stderr}")


def prepare(fresh: bool, other: Path | None, peer: Path | None) -> None:
    if fresh:
        print("interleave: a fresh cluster and a cold site.yml ...", flush=True)
        shell(["molecule", "destroy"], bench.ROOT)
        bench.empty_dir(bench.SHARED_DIR)
        shell(["molecule", "create"], bench.ROOT)
        shutil.rmtree(bench.FACT_CACHE, ignore_errors=True)
        cold = plain("cold", "site.yml", bench.ROOT)
        if not cold.ok:
            sys.exit(f"interleave: the cold site.yml failed: {cold.errors}")
    if other is not None:
        # Its own cache may hold facts of containers made before these.
        shutil.rmtree(other / ".cache" / "facts", ignore_errors=True)
    if peer is not None:
        print("interleave: the peer's containers and its cold run ...", flush=True)
        shell(["./cluster.sh", "down", PEER_PREFIX], peer)
        shell(["./cluster.sh", "up", PEER_PREFIX], peer)
        cold = plain("peer-cold", PEER_PLAYBOOK, peer, ["-i", PEER_INVENTORY])
        if not cold.ok:
            sys.exit(f"interleave: the peer's cold run failed: {cold.errors}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--other", type=Path, help="another checkout of the project")
    parser.add_argument("--peer", type=Path, help="a prepared copy of ../shared/peer-bench")
    parser.add_argument("--no-fresh", action="store_true", help="keep the running containers")
    parser.add_argument("--out", type=Path, default=bench.DEFAULT_OUT)
    args = parser.parse_args(argv)
    other = args.other.resolve() if args.other else None
    peer = args.peer.resolve() if args.peer else None
    started = bench.now_utc()
    prepare(not args.no_fresh, other, peer)
    try:
        done = rounds(sides(other, peer), args.rounds, args.warmup)
    finally:
        if peer is not None:
            subprocess.run(["./cluster.sh", "down", PEER_PREFIX], cwd=peer, check=False)
    summary = summarise(done, args.warmup)
    print(table(done, summary, args.warmup))
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"interleave-{started.strftime('%Y%m%dT%H%M%SZ')}.json"
    doc = {
        "started": started.isoformat().replace("+00:00", "Z"),
        "machine": bench.machine_info(),
        "sides": {s: str(root) for s, _, root, _ in sides(other, peer)},
        "warmup": args.warmup,
        "runs": [[res.to_dict() for res in r.values()] for r in done],
        "summary": summary,
    }
    path.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"results: {path}")
    return 1 if summary["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
