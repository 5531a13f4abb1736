"""A rank other than 0 waits for rank 0's store to listen before it joins (network.wait_for_store).

torch's store client backs off about 1 s, then 2 s, after a refused connection:
a rank that came a moment early kept the job waiting for seconds. The wait
polls the port instead; where there is nothing to wait for it connects nowhere.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from ddp_launch import Launcher

from ddp_smoke import network
from ddp_smoke.launch import SlurmContext


def context(rank: int, init_method: str = "", addr: str = "node1") -> SlurmContext:
    return SlurmContext(
        rank=rank,
        world_size=2,
        local_rank=0,
        job_id="7",
        host="node2",
        master_addr=addr,
        master_port=29533,
        init_method=init_method,
    )


class FakePort:
    """A port that refuses ``refusals`` connections, then accepts; a clock that the
    waits move on."""

    def __init__(self, refusals: int) -> None:
        self.refusals = refusals
        self.calls: list[tuple[tuple[str, int], float]] = []
        self.now = 0.0
        self.slept: list[float] = []

    def connect(self, address: tuple[str, int], timeout: float) -> socket.socket:
        self.calls.append((address, timeout))
        if len(self.calls) <= self.refusals:
            raise ConnectionRefusedError(111, "Connection refused")
        return socket.socket()

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def wait(ctx: SlurmContext, port: FakePort, limit_s: float = 60) -> str | None:
    return network.wait_for_store(
        ctx, limit_s, connect=port.connect, clock=port.clock, sleep=port.sleep
    )


def test_a_later_rank_polls_rank_0s_port_until_it_listens() -> None:
    port = FakePort(refusals=3)
    assert wait(context(1), port) is None
    assert [address for address, _ in port.calls] == [("node1", 29533)] * 4
    assert port.slept == [network.RENDEZVOUS_POLL_S] * 3


@pytest.mark.parametrize(
    "ctx",
    [
        context(0),  # rank 0 opens the store
        context(1, init_method="env://"),  # torchrun: the agent's store is up first
        context(1, init_method="file:///shared/rdzv"),  # spawn: no port
        context(1, addr=""),
    ],
    ids=["rank-0", "env", "file", "no-address"],
)
def test_nothing_to_wait_for_connects_nowhere(ctx: SlurmContext) -> None:
    port = FakePort(refusals=0)
    assert wait(ctx, port) is None
    assert port.calls == []


def test_a_store_that_never_listens_is_named_after_the_limit() -> None:
    port = FakePort(refusals=10**6)
    why = wait(context(1), port, limit_s=3)
    assert why is not None
    assert why.startswith("rank 0's store at node1:29533 accepted no connection within 3 s")
    assert "Connection refused" in why
    assert 3 <= port.now < 3 + 2 * network.RENDEZVOUS_POLL_S


def test_an_ipv6_address_is_connected_without_its_brackets() -> None:
    port = FakePort(refusals=0)
    assert wait(context(1, addr="[fd00::1]"), port) is None
    assert port.calls[0][0] == ("fd00::1", 29533)


def test_a_real_port_opened_later_is_joined() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    number = server.getsockname()[1]
    opened = threading.Timer(0.3, server.listen)
    opened.start()
    try:
        ctx = replace(context(1, addr="127.0.0.1"), master_port=number)
        assert network.wait_for_store(ctx, 30) is None
    finally:
        opened.cancel()
        server.close()


def test_a_rank_whose_master_never_comes_fails_naming_the_store(
    tmp_path: Path, launch_ranks: Launcher
) -> None:
    started = time.monotonic()
    (rank1,) = launch_ranks(tmp_path, ranks=(1,), extra_args=("--timeout", "3"))
    assert time.monotonic() - started < 30
    assert rank1.returncode == 1
    record = json.loads((tmp_path / "rank-1.json").read_text())
    assert record["status"] == "fail"
    assert record["error"].startswith("RuntimeError: rendezvous at tcp://127.0.0.1:"), record
    assert "accepted no connection within 3 s" in record["error"], record
    assert record["checks"] == []
