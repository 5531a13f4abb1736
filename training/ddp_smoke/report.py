"""The ``report`` subcommand: judge a job from the ``rank-<N>.json`` files its ranks wrote."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

RANK_FILE = re.compile(r"rank-(\d+)\.json")

Record = dict[str, object]

# A failure shared by many ranks names this many hosts, then a count.
MAX_HOSTS_SHOWN = 8


@dataclass(frozen=True)
class RankFile:
    name: str
    rank: int
    record: Record

    @property
    def who(self) -> str:
        return f"rank {self.rank} on {self.record.get('host', '?')}"


@dataclass(frozen=True)
class Verdict:
    passed: bool
    causes: list[str] = field(default_factory=list)
    summary: Record = field(default_factory=dict)

    def to_dict(self) -> Record:
        if self.passed:
            return {"verdict": "PASS", **self.summary}
        body: Record = {"verdict": "FAIL", "cause": "; ".join(self.causes), "causes": self.causes}
        return {**body, **self.summary}


def load(result_dir: Path) -> tuple[list[RankFile], list[str]]:
    """Read every ``rank-<N>.json``; unreadable or malformed files become causes."""
    if not result_dir.is_dir():
        return [], [f"result directory {result_dir} does not exist"]
    files: list[RankFile] = []
    causes: list[str] = []
    paths = [path for path in result_dir.iterdir() if RANK_FILE.fullmatch(path.name)]
    for path in sorted(paths, key=lambda item: (len(item.name), item.name)):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            causes.append(f"{path.name} is unreadable: {exc}")
            continue
        if isinstance(record, dict) and isinstance(record.get("rank"), int):
            files.append(RankFile(path.name, record["rank"], record))
        else:
            causes.append(f"{path.name} holds no integer 'rank'")
    return files, causes


def evaluate(files: list[RankFile], causes: list[str], expected: int | None) -> Verdict:
    """PASS only if ranks 0..N-1 each wrote exactly one passing record from the same job."""
    causes = list(causes)
    by_rank = _index(files, causes)
    if not files:
        causes.append("no rank-*.json files: no rank finished (did the job start?)")
    world_size = expected if expected is not None else _agreed_world_size(files, causes)
    if world_size is None:
        return Verdict(False, causes, _launch(files))
    causes.extend(_missing_and_extra(by_rank, world_size))
    causes.extend(_wrong_world_size(by_rank.values(), world_size))
    causes.extend(_mixed_jobs(by_rank.values()))
    causes.extend(_failed(by_rank.values()))
    if causes:
        return Verdict(False, causes, _launch(files))
    return Verdict(True, summary=_summary([by_rank[rank] for rank in range(world_size)]))


def _index(files: list[RankFile], causes: list[str]) -> dict[int, RankFile]:
    """Rank -> file; duplicated ranks and files named for another rank become causes."""
    by_rank: dict[int, RankFile] = {}
    for rank_file in files:
        if rank_file.name != f"rank-{rank_file.rank}.json":
            causes.append(f"{rank_file.name} holds the result of rank {rank_file.rank}")
        if rank_file.rank in by_rank:
            first = by_rank[rank_file.rank].name
            causes.append(f"rank {rank_file.rank} reported twice: {first} and {rank_file.name}")
        else:
            by_rank[rank_file.rank] = rank_file
    return by_rank


def _agreed_world_size(files: list[RankFile], causes: list[str]) -> int | None:
    sizes = {rank_file.record.get("world_size") for rank_file in files}
    if not sizes:
        return None
    if len(sizes) > 1 or not all(isinstance(size, int) and size > 0 for size in sizes):
        causes.append(f"ranks report no single valid world size: {sorted(map(str, sizes))}")
    return max((size for size in sizes if isinstance(size, int)), default=None)


def _missing_and_extra(by_rank: dict[int, RankFile], world_size: int) -> list[str]:
    missing = [rank for rank in range(world_size) if rank not in by_rank]
    causes = []
    if len(missing) == 1:
        causes.append(f"rank {missing[0]} wrote no result: it did not finish")
    elif missing:
        causes.append(f"ranks {compact_ranks(missing)} wrote no result: they did not finish")
    causes += [
        f"unexpected result from {rank_file.who}: the world size is {world_size}"
        for rank, rank_file in sorted(by_rank.items())
        if rank >= world_size
    ]
    return causes


def _wrong_world_size(files: Iterable[RankFile], world_size: int) -> list[str]:
    groups: dict[str, list[RankFile]] = {}
    for rank_file in sorted(files, key=lambda item: item.rank):
        actual = rank_file.record.get("world_size")
        if actual != world_size:
            groups.setdefault(str(actual), []).append(rank_file)
    return [
        f"{_who(members)} ran with world size {actual}, expected {world_size}"
        for actual, members in groups.items()
    ]


def _mixed_jobs(files: Iterable[RankFile]) -> list[str]:
    jobs: dict[str, list[int]] = {}
    for rank_file in files:
        jobs.setdefault(str(rank_file.record.get("job_id")), []).append(rank_file.rank)
    if len(jobs) <= 1:
        return []
    parts = [f"job {job} (ranks {sorted(ranks)})" for job, ranks in sorted(jobs.items())]
    return [f"rank files come from different jobs: {', '.join(parts)}"]


def _failed(files: Iterable[RankFile]) -> list[str]:
    """One cause per distinct error, naming every rank that reported it."""
    groups: dict[str, list[RankFile]] = {}
    for rank_file in sorted(files, key=lambda item: item.rank):
        if not _passed(rank_file.record):
            error = rank_file.record.get("error") or "a check failed without an error message"
            groups.setdefault(str(error), []).append(rank_file)
    return [f"{_who(members)} failed: {error}" for error, members in groups.items()]


def _passed(record: Record) -> bool:
    checks = record.get("checks")
    return (
        record.get("status") == "pass"
        and isinstance(checks, list)
        and all(isinstance(check, dict) and check.get("ok") is True for check in checks)
    )


def _who(members: list[RankFile]) -> str:
    """``rank 1 on nodeB`` or ``ranks 0-7 on nodeA, nodeB``; ``members`` sorted by rank."""
    if len(members) == 1:
        return members[0].who
    hosts = list(dict.fromkeys(str(member.record.get("host")) for member in members))
    shown = ", ".join(hosts[:MAX_HOSTS_SHOWN])
    if len(hosts) > MAX_HOSTS_SHOWN:
        shown += f" and {len(hosts) - MAX_HOSTS_SHOWN} more"
    return f"ranks {compact_ranks([member.rank for member in members])} on {shown}"


def compact_ranks(ranks: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2, 5"``; ``ranks`` must be sorted."""
    spans: list[list[int]] = []
    for rank in ranks:
        if spans and rank == spans[-1][1] + 1:
            spans[-1][1] = rank
        else:
            spans.append([rank, rank])
    return ", ".join(str(low) if low == high else f"{low}-{high}" for low, high in spans)


def _launch(files: list[RankFile]) -> Record:
    """How the job was launched, for a FAIL verdict; empty if no rank file says."""
    for rank_file in sorted(files, key=lambda item: item.rank):
        if "mode" in rank_file.record:
            return {key: rank_file.record.get(key) for key in ("mode", "label", "job_id")}
    return {}


def _summary(files: list[RankFile]) -> Record:
    """The PASS summary; ``files`` are ranks 0..N-1 in order, all already validated."""
    rank0 = files[0].record
    losses = rank0.get("losses")
    if not isinstance(losses, list) or not losses:
        losses = [None]
    elapsed = [rank_file.record.get("elapsed_s") for rank_file in files]
    checks = rank0.get("checks")
    measurements = rank0.get("measurements")
    return {
        "job_id": rank0.get("job_id"),
        "mode": rank0.get("mode", "srun"),
        "label": rank0.get("label") or rank0.get("mode", "srun"),
        "nodes": list(dict.fromkeys(str(rank_file.record.get("host")) for rank_file in files)),
        "world_size": len(files),
        "backend": rank0.get("backend"),
        "torch": rank0.get("torch"),
        "iface": rank0.get("iface"),
        "checks_passed": len(checks) if isinstance(checks, list) else 0,
        "first_loss": losses[0],
        "last_loss": losses[-1],
        "elapsed_s": max((v for v in elapsed if isinstance(v, int | float)), default=None),
        **headline(measurements if isinstance(measurements, dict) else {}),
        "measurements": measurements if isinstance(measurements, dict) else {},
    }


def headline(measurements: Record) -> Record:
    """The figures a play shows, lifted out of the ``measurements`` block (``None`` if not run)."""
    sweep, tcp = _part(measurements, "sweep"), _part(measurements, "tcp")
    throughput, scaling = _part(measurements, "throughput"), _part(measurements, "scaling")
    return {
        "peak_busbw_GBps": sweep.get("peak_busbw_GBps"),
        "peak_busbw_Gbps": sweep.get("peak_busbw_Gbps"),
        "tcp_Gbps": tcp.get("Gbps"),
        "busbw_fraction": measurements.get("busbw_fraction"),
        "stragglers": throughput.get("stragglers"),
        "scaling_efficiency": scaling.get("efficiency"),
    }


def _part(measurements: Record, name: str) -> Record:
    value = measurements.get(name)
    return value if isinstance(value, dict) else {}


def report(result_dir: Path, expected: int | None) -> Verdict:
    files, causes = load(result_dir)
    return evaluate(files, causes, expected)
