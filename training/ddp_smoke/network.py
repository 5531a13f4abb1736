"""The raw TCP transfer between two hosts, the yardstick for all_reduce bandwidth.

Standard library only, no torch. ``ddp_smoke.benchmarks`` (``run_tcp``) runs it
between rank 0 and one peer and turns the seconds into rates.

The server sends first-come bytes from one buffer, so the figure is the network and
kernel rate, not the speed of any serialisation.

Protocol, on one connection: the client sends ``nbytes`` and waits for a one-byte
acknowledgement (that time is the client -> server rate); then the server does the
same towards the client (the server -> client rate). Every socket operation and the
whole transfer are bounded by ``timeout_s``.

``wait_for_store``: before a rank other than 0 joins a ``tcp://`` rendezvous, it
waits for rank 0's store to accept a connection (``rank._run_rank``).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ddp_smoke.launch import SlurmContext

CHUNK = 1 << 20
ACK = b"\x06"


CONNECT_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Listener:
    sock: socket.socket
    port: int


def listen(bind_host: str, timeout_s: float) -> Listener:
    """Listen on an ephemeral port of ``bind_host`` ("" = all interfaces)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(timeout_s)
    sock.bind((bind_host, 0))
    sock.listen(1)
    return Listener(sock=sock, port=int(sock.getsockname()[1]))


def candidate_addresses(iface_addr: str | None, master_addr: str | None) -> list[str]:
    """Addresses a peer may reach this host by, most trustworthy first.

    The address of ``--iface``; the rendezvous host, which every rank has already
    reached; the address this host's name resolves to here (what gloo binds to),
    unless that is loopback; and the name itself.
    """
    name = socket.gethostname()
    try:
        resolved = socket.gethostbyname(name)
    except OSError:
        resolved = ""
    candidates = [iface_addr or "", master_addr or ""]
    candidates.append("" if resolved.startswith("127.") else resolved)
    candidates.append(name)
    return list(dict.fromkeys(address for address in candidates if address))


def connect_any(
    addresses: list[str], port: int, nbytes: int, timeout_s: float
) -> tuple[float, str, str]:
    """Run the protocol with the first address that accepts.

    Returns ``(seconds, address, local address)``: the client -> server time, the
    address of rank 0 that answered, and this end's address of the connection.
    """
    tried = []
    for address in addresses:
        try:
            conn = socket.create_connection(
                (address, port), timeout=min(CONNECT_TIMEOUT_S, timeout_s)
            )
        except OSError as exc:
            tried.append(f"{address}: {exc}")
            continue
        with conn:
            local = str(conn.getsockname()[0])
            return _client(conn, nbytes, timeout_s), address, local
    raise ConnectionError(f"no address of rank 0 answered on port {port}: {'; '.join(tried)}")


def serve(listener: Listener, nbytes: int, timeout_s: float) -> tuple[float, str]:
    """Accept one client, run the protocol.

    Returns ``(seconds, local address)``: the server -> client time and this end's
    address of the connection (the one the client reached).
    """
    deadline = time.monotonic() + timeout_s
    with listener.sock:
        conn, _ = listener.sock.accept()
    with conn:
        conn.settimeout(timeout_s)
        _receive(conn, nbytes, deadline)
        conn.sendall(ACK)
        return _send_timed(conn, nbytes, deadline), str(conn.getsockname()[0])


def _client(conn: socket.socket, nbytes: int, timeout_s: float) -> float:
    """The client's side of the protocol; return the client -> server seconds."""
    deadline = time.monotonic() + timeout_s
    conn.settimeout(timeout_s)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    seconds = _send_timed(conn, nbytes, deadline)
    _receive(conn, nbytes, deadline)
    conn.sendall(ACK)
    return seconds


def _send_timed(conn: socket.socket, nbytes: int, deadline: float) -> float:
    """Send ``nbytes`` and wait for the peer's acknowledgement; return the seconds taken."""
    chunk = memoryview(bytes(min(CHUNK, nbytes)))
    started = time.monotonic()
    left = nbytes
    while left > 0:
        _check_deadline(deadline, "sending")
        piece = chunk[: min(left, len(chunk))]
        conn.sendall(piece)
        left -= len(piece)
    _receive(conn, len(ACK), deadline)
    return time.monotonic() - started


def _receive(conn: socket.socket, nbytes: int, deadline: float) -> None:
    buffer = bytearray(min(CHUNK, nbytes))
    view = memoryview(buffer)
    left = nbytes
    while left > 0:
        _check_deadline(deadline, "receiving")
        got = conn.recv_into(view[: min(left, len(buffer))])
        if got == 0:
            raise ConnectionError(f"peer closed the connection with {left} of {nbytes} bytes due")
        left -= got


def _check_deadline(deadline: float, what: str) -> None:
    if time.monotonic() > deadline:
        raise TimeoutError(f"TCP transfer timed out while {what}")


# torch's store client retries a refused connection after a backoff of about
# 1 s, then 2 s (with jitter): a rank that reached the rendezvous a moment
# before rank 0 opened its store waited past it (two processes on one host,
# rank 0 0.3-1.0 s later: rank 0 then waited 0.11-1.47 s for the other to
# join, 0.02-0.04 s with this wait; 2026-12-07). Polling the port first joins
# within this interval of rank 0 listening.
RENDEZVOUS_POLL_S = 0.02


def wait_for_store(
    ctx: SlurmContext,
    limit_s: float,
    connect: Callable[..., Any] = socket.create_connection,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> str | None:
    """Wait at most ``limit_s`` for rank 0's store of a ``tcp://`` rendezvous to accept a
    connection. ``None`` once it does, or where there is nothing to wait for (rank 0
    opens it; ``env://`` and ``file://`` rendezvous); else why it never did."""
    if ctx.rank == 0 or ctx.init_method or not ctx.master_addr:
        return None
    deadline = clock() + limit_s
    while True:
        try:
            connect((ctx.master_addr.strip("[]"), ctx.master_port), timeout=1.0).close()
            return None
        except OSError as exc:
            if clock() >= deadline:
                return (
                    f"rank 0's store at {ctx.master} accepted no connection "
                    f"within {limit_s:g} s (last: {exc})"
                )
        sleep(RENDEZVOUS_POLL_S)
