from __future__ import annotations

import pytest

from ddp_smoke.checks import CheckResult, _listing, check_loss_decreased, check_world_size
from ddp_smoke.faults import Faults, parse_faults


def test_no_fault_by_default() -> None:
    faults = parse_faults("")
    assert faults == Faults()
    assert not faults.perturbs_params(0)
    assert faults.allreduce_offset(0) == 0


def test_parse_faults() -> None:
    faults = parse_faults("perturb_params:1, allreduce:0,allreduce:2")
    assert faults.perturb_params == frozenset({1})
    assert faults.allreduce == frozenset({0, 2})
    assert faults.perturbs_params(1)
    assert not faults.perturbs_params(0)
    assert [faults.allreduce_offset(rank) for rank in range(3)] == [1, 0, 1]


@pytest.mark.parametrize("spec", ["perturb_params", "explode:1", "allreduce:x", "allreduce:-1"])
def test_parse_faults_rejects(spec: str) -> None:
    with pytest.raises(ValueError, match="DDP_SMOKE_FAULT"):
        parse_faults(spec)


def test_world_size_checks() -> None:
    assert check_world_size(4, 4) == CheckResult("world_size", True, "world size 4")
    assert check_world_size(3, 4) == CheckResult("world_size", False, "world size 3 expected 4")
    assert check_world_size(3, None).ok


def test_loss_decreased() -> None:
    result = check_loss_decreased([0.5, 0.3, 0.25])
    assert result == CheckResult(
        "loss_decreased", True, "mean loss first epoch 0.5 last epoch 0.25"
    )


@pytest.mark.parametrize(
    ("losses", "message"),
    [
        ([0.5, 0.6], "loss did not decrease: mean loss first epoch 0.5 last epoch 0.6"),
        ([0.5, 0.5], "loss did not decrease"),
        ([0.5, float("nan")], "non-finite loss"),
        ([0.5], "needs 2 or more epochs, got 1"),
    ],
)
def test_loss_not_decreased(losses: list[float], message: str) -> None:
    result = check_loss_decreased(losses)
    assert not result.ok
    assert message in result.detail


def test_listing_caps_long_lists() -> None:
    names = [f"rank {rank}" for rank in range(10)]
    assert _listing(names[:2], ", ") == "rank 0, rank 1"
    assert _listing(names, ", ") == (
        "rank 0, rank 1, rank 2, rank 3, rank 4, rank 5, rank 6, rank 7, and 2 more"
    )
