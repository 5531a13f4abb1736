from __future__ import annotations

import pytest
import torch

from ddp_smoke.rank import select_device


def fake_gpus(monkeypatch: pytest.MonkeyPatch, count: int) -> list[torch.device]:
    """Pretend ``count`` GPUs are visible; return the list ``set_device`` was called with."""
    chosen: list[torch.device] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    return chosen


def test_cpu_when_no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    chosen = fake_gpus(monkeypatch, 0)
    assert select_device(3) == torch.device("cpu")
    assert chosen == []


def test_local_rank_picks_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    chosen = fake_gpus(monkeypatch, 4)
    assert select_device(2) == torch.device("cuda", 2)
    assert chosen == [torch.device("cuda", 2)]


def test_single_bound_gpu_is_cuda0(monkeypatch: pytest.MonkeyPatch) -> None:
    chosen = fake_gpus(monkeypatch, 1)
    assert select_device(3) == torch.device("cuda", 0)
    assert chosen == [torch.device("cuda", 0)]


def test_local_rank_without_gpu_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    chosen = fake_gpus(monkeypatch, 2)
    with pytest.raises(RuntimeError, match="local rank 3 has no GPU: this task sees 2 GPUs"):
        select_device(3)
    assert chosen == []
