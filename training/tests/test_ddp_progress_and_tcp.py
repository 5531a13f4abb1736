"""Stuck-rank diagnosis, the raw TCP transfer, the spawn parent's wait and cleanup."""

from __future__ import annotations

import multiprocessing
import socket
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
import torch.distributed as dist

from ddp_smoke import launch
from ddp_smoke.faults import Progress, describe_laggards
from ddp_smoke.network import candidate_addresses, connect_any, listen, serve
from ddp_smoke.rank import _wait_workers, remove_rendezvous_when_last


class FakeStore:
    """A dict behind the three store calls progress uses."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.timeout: timedelta | None = None

    def set(self, key: str, value: str) -> None:
        self.data[key] = value.encode()

    def get(self, key: str) -> bytes:
        return self.data[key]

    def check(self, keys: list[str]) -> bool:
        return all(key in self.data for key in keys)

    def set_timeout(self, timeout: timedelta) -> None:
        self.timeout = timeout


class DeadStore(FakeStore):
    def check(self, keys: list[str]) -> bool:
        raise RuntimeError("Connection reset by peer")


def test_laggards_are_the_ranks_behind() -> None:
    store = FakeStore()
    ranks = [Progress(store, rank) for rank in range(4)]
    for progress in ranks:
        progress.enter("identify")
    for progress in (ranks[0], ranks[2]):
        progress.enter("all_reduce_int64_size_1024")
    assert ranks[0].laggards(("a", "b", "c"), 4) == (
        "rank 1 on b has not reached step all_reduce_int64_size_1024 (last entered: identify); "
        "rank 3 has not reached step all_reduce_int64_size_1024 (last entered: identify)"
    )
    assert store.timeout == timedelta(seconds=10)
    assert ranks[1].laggards(("a", "b", "c", "d"), 4) is None  # nobody is behind rank 1


def test_laggard_that_never_started() -> None:
    store = FakeStore()
    progress = Progress(store, 0)
    progress.enter("identify")
    assert progress.laggards(("a", "b"), 2) == (
        "rank 1 on b has not reached step identify (last entered: none)"
    )


def test_laggards_with_a_dead_store_or_none() -> None:
    progress = Progress(DeadStore(), 1)
    progress.enter("identify")
    assert progress.laggards(("a", "b"), 2) == (
        "progress of the other ranks unknown: Connection reset by peer"
    )
    assert Progress(None, 0).laggards(("a", "b"), 2) is None


def test_describe_laggards_caps_the_list() -> None:
    text = describe_laggards(["x"] * 10, [f"h{n}" for n in range(10)], "s")
    assert text is not None
    assert text.count("has not reached") == 8
    assert text.endswith("; and 2 more")


def test_progress_times_each_step() -> None:
    progress = Progress(None, 0, timings={"rendezvous": 1.5})
    progress.enter("sweep")
    time.sleep(0.05)
    progress.finish()
    assert progress.timings["rendezvous"] >= 1.5
    assert 0.04 <= progress.timings["sweep"] < 5


def test_tcp_transfer_both_ways_tries_addresses_in_order() -> None:
    listener = listen("127.0.0.1", 10.0)
    served: list[tuple[float, str]] = []

    def serve_one() -> None:
        served.append(serve(listener, 4 << 20, 10.0))

    server = threading.Thread(target=serve_one)
    server.start()
    # 127.0.0.2 is loopback too, but nothing listens there: the next address answers.
    sent, used, local = connect_any(["127.0.0.2", "127.0.0.1"], listener.port, 4 << 20, 10.0)
    server.join(timeout=20)
    assert (used, local) == ("127.0.0.1", "127.0.0.1")
    assert sent > 0
    assert len(served) == 1
    assert served[0][0] > 0
    assert served[0][1] == "127.0.0.1"  # the address of rank 0's end, whose link is read


def test_tcp_connect_failure_names_every_address() -> None:
    listener = listen("127.0.0.1", 1.0)
    port = listener.port
    listener.sock.close()
    with pytest.raises(ConnectionError) as caught:
        connect_any(["127.0.0.1", "127.0.0.2"], port, 1024, 2.0)
    message = str(caught.value)
    assert message.startswith(f"no address of rank 0 answered on port {port}: 127.0.0.1: ")
    assert "; 127.0.0.2: " in message
    assert "refused" in message


def test_candidate_addresses_put_iface_and_master_first() -> None:
    found = candidate_addresses("10.1.0.5", "gpu01")
    assert found[:2] == ["10.1.0.5", "gpu01"]
    assert found[-1] == socket.gethostname()
    assert not any(address.startswith("127.") for address in found)
    assert candidate_addresses(None, None) == found[2:]


def test_serve_times_out_without_a_client() -> None:
    listener = listen("127.0.0.1", 0.2)
    with pytest.raises(TimeoutError):
        serve(listener, 1024, 0.2)


def test_interface_address_of_loopback() -> None:
    assert launch.interface_address("lo") == "127.0.0.1"


def _exit_with(code: int, delay: float) -> None:
    time.sleep(delay)
    raise SystemExit(code)


def test_spawn_wait_collects_every_status() -> None:
    context = multiprocessing.get_context("fork")
    procs = [context.Process(target=_exit_with, args=(code, 0.1)) for code in (0, 3)]
    for proc in procs:
        proc.start()
    assert _wait_workers(procs, grace_s=30.0) == [0, 3]


def test_spawn_wait_kills_a_worker_that_outlives_the_grace() -> None:
    context = multiprocessing.get_context("fork")
    procs = [
        context.Process(target=_exit_with, args=(1, 0.0)),
        context.Process(target=_exit_with, args=(0, 60.0)),
    ]
    for proc in procs:
        proc.start()
    started = time.monotonic()
    assert _wait_workers(procs, grace_s=0.5) == [1, -9]
    assert time.monotonic() - started < 20


def test_last_node_to_finish_removes_the_rendezvous_file(tmp_path: Path) -> None:
    """Two node processes: the first to finish leaves the file, the second deletes it."""
    env = {"SLURM_JOB_ID": "77", "SLURM_PROCID": "0", "SLURM_NNODES": "2", "SLURM_NTASKS": "2"}
    plan = launch.spawn_plan(env, 1, tmp_path)
    plan.rdzv_file.write_text("left by a worker whose store was never destroyed")
    stores = [dist.FileStore(str(plan.counts_file), plan.nodes) for _ in range(plan.nodes)]
    assert remove_rendezvous_when_last(stores[0], plan) is False
    assert plan.rdzv_file.exists()
    assert remove_rendezvous_when_last(stores[1], plan) is True
    assert not plan.rdzv_file.exists()
    del stores
    assert sorted(tmp_path.iterdir()) == []
