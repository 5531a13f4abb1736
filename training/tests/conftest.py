"""Put ``training/`` on ``sys.path``, register the marker, offer the rank launcher fixture."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent
for directory in (TESTS_DIR.parent, TESTS_DIR):  # ddp_smoke itself, then ddp_launch
    if str(directory) not in sys.path:
        sys.path.insert(0, str(directory))

from ddp_launch import Launcher, launch_ranks_impl  # noqa: E402 - needs sys.path set above


def pytest_configure(config: pytest.Config) -> None:
    # Registered here, not in pyproject.toml, so it also holds when the repository's
    # Makefile runs pytest from the repository root.
    config.addinivalue_line(
        "markers", "integration: starts real ranks as subprocesses (about 10 s each)"
    )


@pytest.fixture
def launch_ranks() -> Launcher:
    """Start ranks of a local gloo job as processes and wait for all of them."""
    return launch_ranks_impl
