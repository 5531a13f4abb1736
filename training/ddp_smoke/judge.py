"""Pure-Python verdicts: what passes, decided from what the ranks gathered.

Standard library only, so the controller's ``report`` and the ranks share one
definition of every verdict:

- each check's pass or fail from the values a rank gathered (world size, unique
  ranks, loss, sampler shards), the floors on the measurements;
- the figures those rest on: nccl-tests bandwidths, stragglers, scaling efficiency;
- the job's verdict from the ``rank-<N>.json`` files and, for the ranks that wrote
  none, what the launch printed about them (``evaluate``, ``crashes.Crash``).

Every check returns a result instead of asserting, and names the rank and host
that disagreed.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field

from ddp_smoke.crashes import Crash, waited, without_result
from ddp_smoke.launch import MeasureOptions

Record = dict[str, object]
Row = dict[str, object]

PEERS_PASSED = "peers_passed"
# Messages about many ranks or hosts name this many, then a count, to stay readable.
MAX_NAMED = 8


# --- Results and who they are about ---------------------------------------------------


@dataclass(frozen=True)
class CheckResult:
    """One named check; ``detail`` says what was seen, and on failure what disagreed."""

    name: str
    ok: bool
    detail: str

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class Peers:
    """The host of every rank, indexed by rank, so messages can name both."""

    hosts: tuple[str, ...]

    @property
    def world_size(self) -> int:
        return len(self.hosts)

    def name(self, rank: int) -> str:
        return f"rank {rank} on {self.hosts[rank]}"

    def nodes(self) -> list[str]:
        """Distinct hosts in rank order."""
        return list(dict.fromkeys(self.hosts))


@dataclass(frozen=True)
class Identity:
    """Who a rank says it is: its launcher's rank, its host and local rank, its GPU."""

    rank: int
    host: str
    local_rank: int
    gpu: str | None = None


def listing(items: list[str], separator: str) -> str:
    """Join ``items``, naming at most ``MAX_NAMED`` and counting the rest."""
    text = separator.join(items[:MAX_NAMED])
    if len(items) > MAX_NAMED:
        text += f"{separator}and {len(items) - MAX_NAMED} more"
    return text


# --- Checks on the values a rank gathered ---------------------------------------------


def check_world_size(actual: int, expected: int | None) -> CheckResult:
    if expected is None:
        return CheckResult("world_size", True, f"world size {actual} (no expectation given)")
    if actual != expected:
        return CheckResult("world_size", False, f"world size {actual} expected {expected}")
    return CheckResult("world_size", True, f"world size {actual}")


def check_unique_ranks(identities: list[Identity]) -> CheckResult:
    """Each process group rank is its launcher's rank; no host has a local rank or GPU twice."""
    problems = [
        f"process group rank {index} on {ident.host} was launched as rank {ident.rank}"
        for index, ident in enumerate(identities)
        if ident.rank != index
    ]
    problems += _shared(identities, "local rank", lambda ident: ident.local_rank)
    problems += _shared(identities, "GPU", lambda ident: ident.gpu)
    if problems:
        return CheckResult("unique_ranks", False, listing(problems, "; "))
    hosts = len({ident.host for ident in identities})
    return CheckResult("unique_ranks", True, f"{len(identities)} distinct ranks on {hosts} hosts")


def _shared(identities: list[Identity], what: str, key: Callable[[Identity], object]) -> list[str]:
    """``ranks 0, 2 on gpu01 share local rank 0`` for every (host, key) held twice."""
    owners: dict[tuple[str, object], list[int]] = {}
    for index, ident in enumerate(identities):
        value = key(ident)
        if value is not None:
            owners.setdefault((ident.host, value), []).append(index)
    return [
        f"ranks {', '.join(map(str, ranks))} on {host} share {what} {value}"
        for (host, value), ranks in owners.items()
        if len(ranks) > 1
    ]


def check_loss_decreased(losses: list[float]) -> CheckResult:
    """The global mean loss of the last epoch must be finite and below the first's."""
    if len(losses) < 2:
        return CheckResult("loss_decreased", False, f"needs 2 or more epochs, got {len(losses)}")
    if not all(math.isfinite(loss) for loss in losses):
        return CheckResult("loss_decreased", False, f"non-finite loss in {losses}")
    first, last = losses[0], losses[-1]
    detail = f"mean loss first epoch {first:.6g} last epoch {last:.6g}"
    if last >= first:
        return CheckResult("loss_decreased", False, f"loss did not decrease: {detail}")
    return CheckResult("loss_decreased", True, detail)


def shard_problems(shards: Sequence[Sequence[int]], size: int, hosts: Sequence[str]) -> list[str]:
    """Overlapping pairs of ranks, samples no rank holds, and indices out of range.

    The data set size is a multiple of the world size here, so DistributedSampler
    pads nothing and any sample held twice is a real overlap.
    """
    owners: dict[int, list[int]] = {}
    for rank, shard in enumerate(shards):
        for index in shard:
            owners.setdefault(index, []).append(rank)
    problems = _overlaps(owners, hosts)
    missing = [index for index in range(size) if index not in owners]
    if missing:
        problems.append(f"{len(missing)} samples are on no rank (first: {missing[0]})")
    outside = sorted(index for index in owners if not 0 <= index < size)
    if outside:
        problems.append(f"{len(outside)} indices outside 0-{size - 1} (first: {outside[0]})")
    return problems


def _overlaps(owners: dict[int, list[int]], hosts: Sequence[str]) -> list[str]:
    pairs: dict[tuple[int, int], list[int]] = {}
    for index, ranks in sorted(owners.items()):
        for position, first in enumerate(ranks):
            for second in ranks[position + 1 :]:
                pairs.setdefault((first, second), []).append(index)
    return [
        f"{_holders(first, second, hosts)} {len(shared)} samples (first: {shared[0]})"
        for (first, second), shared in sorted(pairs.items())
    ]


def _holders(first: int, second: int, hosts: Sequence[str]) -> str:
    if first == second:
        return f"rank {first} on {hosts[first]} holds twice"
    return f"rank {first} on {hosts[first]} and rank {second} on {hosts[second]} both hold"


# --- Floors on the measurements -------------------------------------------------------


def floor_checks(measured: Record, options: MeasureOptions, peers: Peers) -> list[CheckResult]:
    """``tcp_transfer`` when TCP ran; ``busbw_floor`` and ``straggler_floor`` when set."""
    results = []
    tcp = measured.get("tcp")
    if isinstance(tcp, dict) and "skipped" not in tcp:
        results.append(_tcp_check(tcp))
    if options.min_busbw_gbps is not None:
        results.append(_busbw_check(measured.get("sweep"), options.min_busbw_gbps, peers))
    if options.max_straggler_ratio is not None:
        results.append(_straggler_check(measured.get("throughput"), options.max_straggler_ratio))
    return results


def _tcp_check(tcp: Record) -> CheckResult:
    if tcp.get("error"):
        return CheckResult("tcp_transfer", False, f"TCP transfer {tcp['error']}")
    hosts = " and ".join(str(host) for host in tcp.get("hosts", []))  # type: ignore[union-attr]
    return CheckResult("tcp_transfer", True, f"{tcp.get('Gbps')} Gbit/s between {hosts}")


def _busbw_check(sweep: object, floor: float, peers: Peers) -> CheckResult:
    if not isinstance(sweep, dict) or "peak_busbw_Gbps" not in sweep:
        why = f"min busbw floor {floor} Gbit/s is set but the all_reduce sweep did not run"
        return CheckResult("busbw_floor", False, f"{why} (add sweep to --measure, 2+ ranks)")
    peak = float(sweep["peak_busbw_Gbps"])
    where = f"{peers.world_size} ranks on {', '.join(peers.nodes())}"
    detail = f"peak all_reduce busbw {peak:.3f} Gbit/s over {where}, floor {floor} Gbit/s"
    if peak < floor:
        return CheckResult("busbw_floor", False, f"{detail}: below the floor")
    return CheckResult("busbw_floor", True, detail)


def _straggler_check(throughput: object, limit: float) -> CheckResult:
    rows = throughput.get("ranks") if isinstance(throughput, dict) else None
    if not isinstance(rows, list):
        why = f"max straggler ratio {limit} is set but the throughput measurement did not run"
        return CheckResult("straggler_floor", False, f"{why} (add throughput to --measure)")
    step_s = [float(row["step_ms"]) / 1e3 for row in rows]
    hosts = [str(row["host"]) for row in rows]
    over = [
        f"rank {row['rank']} on {row['host']} takes {row['step_ms']} ms per step, "
        f"{row['ratio']}x the typical {typical(step_s) * 1e3:.4g} ms"
        for row in stragglers(step_s, hosts, limit)
    ]
    if over:
        return CheckResult("straggler_floor", False, f"{listing(over, '; ')} (limit {limit}x)")
    worst = worst_ratio(step_s)
    return CheckResult("straggler_floor", True, f"slowest rank {worst}x typical, limit {limit}x")


# --- Figures: bandwidth (nccl-tests), stragglers, scaling -----------------------------


GIGA = 1e9


BITS_PER_BYTE = 8


def bus_factor(world_size: int) -> float:
    """all_reduce's ``2(n-1)/n``: the share of the data each rank's link carries twice."""
    return 2 * (world_size - 1) / world_size


def bandwidth_row(size: int, count: int, iters: int, seconds: float, world_size: int) -> Row:
    """One sweep line; ``seconds`` is the time of one all_reduce on the slowest rank."""
    algbw = size / seconds / GIGA
    return {
        "bytes": size,
        "count": count,
        "iters": iters,
        "time_us": round(seconds * 1e6, 3),
        "algbw_GBps": round(algbw, 6),
        "busbw_GBps": round(algbw * bus_factor(world_size), 6),
    }


def peak_row(rows: Sequence[Row]) -> Row | None:
    """The sweep line with the highest bus bandwidth (the first one on a tie)."""
    return max(rows, key=lambda row: _number(row.get("busbw_GBps")), default=None)


def gbps(nbytes: int, seconds: float) -> float:
    """Gigabits per second for ``nbytes`` moved in ``seconds``."""
    return nbytes * BITS_PER_BYTE / seconds / GIGA


def busbw_fraction(peak_busbw_gbps: float | None, tcp_gbps: float | None) -> float | None:
    """Peak all_reduce busbw as a share of the raw TCP rate; ``None`` if either is missing."""
    if peak_busbw_gbps is None or not tcp_gbps:
        return None
    return round(peak_busbw_gbps / tcp_gbps, 4)


def lower_link(speeds_mbps: Iterable[object]) -> int | None:
    """The slower of the known link speeds at both ends (Mbit/s); ``None`` if neither is known."""
    known = [int(speed) for speed in speeds_mbps if isinstance(speed, int) and speed > 0]
    return min(known, default=None)


def link_fraction(tcp_gbps: float | None, link_mbps: int | None) -> float | None:
    """The raw TCP rate over the link speed; a veth reports 10000 Mbit/s and moves more."""
    if tcp_gbps is None or not link_mbps:
        return None
    return round(tcp_gbps / (link_mbps / 1000), 4)


def typical(values: Sequence[float]) -> float:
    """The lower median: with two ranks it is the faster one, so one slow rank stands out."""
    return statistics.median_low(values)


def stragglers(step_s: Sequence[float], hosts: Sequence[str], ratio: float) -> list[Row]:
    """Ranks whose step time exceeds ``ratio`` times the lower median, slowest first."""
    if not step_s:
        return []
    base = typical(step_s)
    slow = [
        {
            "rank": rank,
            "host": hosts[rank],
            "step_ms": round(value * 1e3, 3),
            "ratio": round(value / base, 3),
        }
        for rank, value in enumerate(step_s)
        if base > 0 and value > ratio * base
    ]
    return sorted(slow, key=lambda row: -_number(row["ratio"]))


def worst_ratio(step_s: Sequence[float]) -> float | None:
    """The slowest rank's step time over the lower median."""
    if not step_s or typical(step_s) <= 0:
        return None
    return round(max(step_s) / typical(step_s), 3)


def scaling_efficiency(all_nodes: float, scale: float, one_node: float) -> float | None:
    """``(throughput on all nodes / scale) / throughput on one node``; 1.0 is linear.

    ``scale`` is how many times the first node's ranks all nodes have: the node count
    when every node runs as many ranks, 1.5 for nodes of 2 and 1 ranks. So uneven
    nodes are judged per rank, not against a node count that assumes equal nodes.
    """
    if scale <= 0 or one_node <= 0:
        return None
    return round(all_nodes / scale / one_node, 4)


def _number(value: object) -> float:
    return float(value) if isinstance(value, int | float) else float("-inf")


# --- The job's verdict from the rank files --------------------------------------------


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


def evaluate(
    files: list[RankFile], causes: list[str], expected: int | None, crashes: Sequence[Crash] = ()
) -> Verdict:
    """PASS only if ranks 0..N-1 each wrote exactly one passing record from the same job.

    ``crashes``, what the launch printed about its tasks (``crashes.LaunchLog``),
    explain the ranks that wrote no result. One that crashed on its own is a cause,
    quoting what it raised; the ranks that only waited for it (no result, a failed
    rendezvous) then go under ``waited``, not into the causes: ``accept`` blames the
    nodes a cause names. A task that only waited (a rendezvous timeout, ended by
    srun) is never a cause itself.
    """
    causes = list(causes)
    by_rank = _index(files, causes)
    world_size = expected if expected is not None else _agreed_world_size(files, causes)
    missing = [rank for rank in range(world_size or 0) if rank not in by_rank]
    complete = world_size is not None and not missing
    culprits, missing, excused, notes = _explain(crashes, files, missing, complete)
    if not files and not culprits:
        causes.append("no rank-*.json files: no rank finished (did the job start?)")
    causes.extend(_crash_causes(culprits))
    failed = {**_launch(files), **_crash_summary(culprits, notes)}
    if world_size is None:
        return Verdict(False, causes, failed)
    causes.extend(_missing_causes(missing) + _extra(by_rank, world_size))
    causes.extend(_wrong_world_size(by_rank.values(), world_size))
    causes.extend(_mixed_jobs(by_rank.values()))
    causes.extend(_failed(f for f in by_rank.values() if f not in excused))
    if causes:
        return Verdict(False, causes, failed)
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


def _missing_causes(missing: list[int]) -> list[str]:
    if len(missing) == 1:
        return [f"rank {missing[0]} wrote no result: it did not finish"]
    if missing:
        return [f"ranks {compact_ranks(missing)} wrote no result: they did not finish"]
    return []


def _extra(by_rank: dict[int, RankFile], world_size: int) -> list[str]:
    return [
        f"unexpected result from {rank_file.who}: the world size is {world_size}"
        for rank, rank_file in sorted(by_rank.items())
        if rank >= world_size
    ]


# --- Ranks that wrote no result: what the launch printed (crashes.LaunchLog) ----------


def _explain(
    crashes: Sequence[Crash], files: list[RankFile], missing: list[int], complete: bool
) -> tuple[list[Crash], list[int], list[RankFile], list[str]]:
    """The crashes that are causes, the ranks still missing as causes, the rank files
    excused (a failed rendezvous) and the notes on who waited. The launch's output only
    explains ranks that wrote no result: it never fails a complete set of rank files."""
    if complete:
        return [], missing, [], []
    crashed = without_result(crashes, [(rank_file.rank, rank_file.record) for rank_file in files])
    culprits = [crash for crash in crashed if not crash.waited]
    followers = [crash for crash in crashed if crash.waited]
    if not culprits:
        return [], missing, [], _waiting_notes([], [], followers)
    said = {crash.rank for crash in crashed}
    excused = [rank_file for rank_file in files if _waited(rank_file)]
    unsaid = [rank for rank in missing if rank not in said]
    return culprits, [], excused, _waiting_notes(unsaid, excused, followers)


def _crash_causes(crashes: list[Crash]) -> list[str]:
    """One cause per distinct failure, naming every rank (or task) and node that had it."""
    groups: dict[str, list[Crash]] = {}
    for crash in crashes:
        groups.setdefault(crash.what, []).append(crash)
    return [
        f"{_crash_who(members)} {what} before "
        + ("writing its result" if len(members) == 1 else "writing their results")
        for what, members in groups.items()
    ]


def _crash_who(members: list[Crash]) -> str:
    """``rank 1 on node2``, ``ranks 1, 3 on node2, node4``, ``task 1 on node2``, ``a task``."""
    ranks = sorted(crash.rank for crash in members if crash.rank is not None)
    tasks = sorted(crash.task for crash in members if crash.task is not None)
    hosts = list(dict.fromkeys(crash.host for crash in members if crash.host))
    if len(ranks) == len(members):
        name = f"rank{'s' if len(ranks) > 1 else ''} {compact_ranks(ranks)}"
    elif len(tasks) == len(members):
        name = f"task{'s' if len(tasks) > 1 else ''} {compact_ranks(tasks)}"
    else:
        name = "a task" if len(members) == 1 else f"{len(members)} tasks"
    return f"{name} on {listing(hosts, ', ')}" if hosts else name


def _waited(rank_file: RankFile) -> bool:
    return not _passed(rank_file.record) and waited(str(rank_file.record.get("error") or ""))


def _waiting_notes(missing: list[int], excused: list[RankFile], crashes: list[Crash]) -> list[str]:
    """What the ranks that waited for a crashed one did: wrote nothing, gave up, were ended."""
    notes = [f"{_crash_who([crash])} {crash.what}" for crash in crashes]
    if missing:
        plural = "s" if len(missing) > 1 else ""
        notes.append(f"rank{plural} {compact_ranks(missing)} wrote no result")
    return notes + _failed(excused)


def _crash_summary(culprits: list[Crash], notes: list[str]) -> Record:
    """The FAIL body's ``crashed`` and ``waited`` (neither is read as a cause)."""
    summary: Record = {}
    if culprits:
        summary["crashed"] = [crash.to_dict() for crash in culprits]
    if notes:
        summary["waited"] = notes
    return summary


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
    shown = ", ".join(hosts[:MAX_NAMED])
    if len(hosts) > MAX_NAMED:
        shown += f" and {len(hosts) - MAX_NAMED} more"
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
        # The users the ranks ran as (the proof account's uid; none in old files).
        "uids": sorted(
            {uid for rank_file in files if isinstance(uid := rank_file.record.get("uid"), int)}
        ),
        "backend": rank0.get("backend"),
        "torch": rank0.get("torch"),
        "iface": rank0.get("iface"),
        "checks_passed": len(checks) if isinstance(checks, list) else 0,
        "first_loss": losses[0],
        "last_loss": losses[-1],
        "elapsed_s": max((v for v in elapsed if isinstance(v, int | float)), default=None),
        "phases_s": phases([rank_file.record for rank_file in files]),
        **headline(measurements if isinstance(measurements, dict) else {}),
        "gpu_topology": _topologies(files),
        "measurements": measurements if isinstance(measurements, dict) else {},
    }


# Where a rank's time goes, by phase (the rank's own step names).
PHASES = {
    "import": ("import",),
    "rendezvous": ("rendezvous", "identify"),
    "train": ("train",),
    "measure": ("sweep", "scaling", "tcp", "throughput"),
    "teardown": ("teardown",),
}


def phases(records: list[Record]) -> Record:
    """Seconds per phase, the slowest rank's: import, rendezvous, checks, train, measure, teardown.

    "import" is the rank process's age when its run began (python, ddp_smoke and
    torch starting); "checks" is every other step (the collectives' and the
    model's checks). The launcher's own time (srun or sbatch, a torchrun agent
    or spawn's node process) is in no rank's record: the caller subtracts
    elapsed_s and import from the launch's wall time.
    """
    out: dict[str, float] = {}
    for record in records:
        timings = record.get("timings_s")
        if not isinstance(timings, dict):
            continue
        mine: dict[str, float] = {}
        for step, seconds in timings.items():
            if not isinstance(seconds, int | float):
                continue
            phase = next((p for p, steps in PHASES.items() if step in steps), "checks")
            mine[phase] = mine.get(phase, 0.0) + float(seconds)
        for phase, seconds in mine.items():
            out[phase] = round(max(out.get(phase, 0.0), seconds), 3)
    return dict(sorted(out.items()))


def _topologies(files: list[RankFile]) -> Record | None:
    """``{host: {"GPU0|GPU1": "NV12", ...}}`` from the ranks that recorded one (reported only)."""
    found = {
        str(rank_file.record.get("host")): rank_file.record["gpu_topology"]
        for rank_file in files
        if isinstance(rank_file.record.get("gpu_topology"), dict)
        and rank_file.record["gpu_topology"]
    }
    return found or None


def headline(measurements: Record) -> Record:
    """The figures a play shows, lifted out of the ``measurements`` block (``None`` if not run)."""
    sweep, tcp = _part(measurements, "sweep"), _part(measurements, "tcp")
    throughput, scaling = _part(measurements, "throughput"), _part(measurements, "scaling")
    return {
        "peak_busbw_GBps": sweep.get("peak_busbw_GBps"),
        "peak_busbw_Gbps": sweep.get("peak_busbw_Gbps"),
        "tcp_Gbps": tcp.get("Gbps"),
        "link_fraction": tcp.get("link_fraction"),
        "busbw_fraction": measurements.get("busbw_fraction"),
        "stragglers": throughput.get("stragglers"),
        "scaling_efficiency": scaling.get("efficiency"),
    }


def _part(measurements: Record, name: str) -> Record:
    value = measurements.get(name)
    return value if isinstance(value, dict) else {}
