"""Probe data the doctor's tests share (tests/test_doctor.py, tests/test_check_registry.py)."""

from __future__ import annotations


def slurm_keys(probes: dict, fingerprint: str = "a" * 16) -> None:
    """auth/slurm: every host holds slurm.jwks as site.yml leaves it."""
    for h in probes:
        probes[h]["local"]["auth_key"] = {
            "exists": True,
            "mode": "0600",
            "owner": "slurm",
            "group": "slurm",
            "fingerprint": fingerprint,
        }
