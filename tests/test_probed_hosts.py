"""The probe's answers across a play's hosts (plugins/filter/probed_hosts.py).

roles/munge/vars (the key's checksums, the key proven everywhere) and
roles/shared_fs/vars (the check folder's tokens) ask these.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins/filter"))
from probed_hosts import (
    FilterModule,
    probed_checksums,
    probed_copies_same,
    probed_root_owned,
    probed_shared_reads,
)

KEY = "/etc/munge/munge.key"
CHECK = "/shared/.cluster/shared-fs-check"
HOSTS = ["ctl", "n1", "n2"]


def key(sha256: object = "aaa", owner: str = "munge", group: str = "munge", mode: str = "0400"):
    info = {"exists": True, "sha1": "s1", "sha256": sha256, "owner": owner, "group": group}
    return {"files": {KEY: {**info, "mode": mode}}}


def probed(**states: dict) -> dict:
    """hostvars with cluster_node_state per host (None: the host has no probe)."""
    return {h: ({} if s is None else {"cluster_node_state": s}) for h, s in states.items()}


def test_registered() -> None:
    assert set(FilterModule().filters()) == {
        "probed_checksums",
        "probed_copies_same",
        "probed_root_owned",
        "probed_shared_reads",
    }


# probed_checksums: __munge_key_checksums


def test_checksums_from_the_probe() -> None:
    hv = probed(ctl=key("aaa"), n1=key("aaa"), n2=key("bbb"))
    assert probed_checksums(HOSTS, hv, KEY, "__munge_key_stat") == {
        "ctl": "aaa",
        "n1": "aaa",
        "n2": "bbb",
    }


def test_this_runs_stat_wins_over_the_probe() -> None:
    hv = probed(ctl=key("old"), n1=key("old"), n2=None)
    hv["ctl"]["__munge_key_stat"] = {"stat": {"exists": True, "checksum": "new"}}
    # A file the stat found absent has no checksum: ''.
    hv["n2"]["__munge_key_stat"] = {"stat": {"exists": False}}
    assert probed_checksums(HOSTS, hv, KEY, "__munge_key_stat") == {
        "ctl": "new",
        "n1": "old",
        "n2": "",
    }


def test_a_skipped_stat_falls_back_to_the_probe() -> None:
    hv = probed(ctl=key("aaa"))
    hv["ctl"]["__munge_key_stat"] = {"changed": False, "skipped": True}
    assert probed_checksums(["ctl"], hv, KEY, "__munge_key_stat") == {"ctl": "aaa"}


def test_a_null_stat_counts_as_read_without_checksum() -> None:
    # `stat is defined` holds for stat: null, and null.checksum | default('') is ''.
    hv = probed(ctl=key("aaa"))
    hv["ctl"]["__munge_key_stat"] = {"stat": None}
    assert probed_checksums(["ctl"], hv, KEY, "__munge_key_stat") == {"ctl": ""}


def test_checksums_without_any_probe_or_stat_are_empty() -> None:
    hv = probed(ctl=None, n1={}, n2={"files": {KEY: {"exists": False}}})
    assert probed_checksums(HOSTS, hv, KEY, "__munge_key_stat") == {"ctl": "", "n1": "", "n2": ""}
    assert probed_checksums([], hv, KEY, "__munge_key_stat") == {}


def test_a_host_missing_from_hostvars_is_unknown() -> None:
    assert probed_checksums(["gone"], {}, KEY, "__munge_key_stat") == {"gone": ""}


def test_a_null_probe_counts_as_none() -> None:
    hv = {"ctl": {"cluster_node_state": None}}
    assert probed_checksums(["ctl"], hv, KEY, "__munge_key_stat") == {"ctl": ""}


# probed_copies_same: __munge_key_proven

SAME = ("munge", "munge", "0400")


def test_the_same_key_everywhere_is_proven() -> None:
    hv = probed(ctl=key(), n1=key(), n2=key())
    assert probed_copies_same(HOSTS, hv, "ctl", KEY, *SAME) is True


def test_one_host_with_another_key_or_mode_or_owner_is_not() -> None:
    for other in (key("bbb"), key(mode="0600"), key(owner="root"), key(group="root")):
        hv = probed(ctl=key(), n1=key(), n2=other)
        assert probed_copies_same(HOSTS, hv, "ctl", KEY, *SAME) is False


def test_a_host_without_probe_is_not_proven() -> None:
    hv = probed(ctl=key(), n1=key(), n2=None)
    assert probed_copies_same(HOSTS, hv, "ctl", KEY, *SAME) is False


def test_the_source_must_be_in_the_play() -> None:
    hv = probed(ctl=key(), n1=key(), n2=key())
    assert probed_copies_same(["n1", "n2"], hv, "ctl", KEY, *SAME) is False


def test_the_source_must_have_the_file() -> None:
    hv = probed(ctl={"files": {KEY: {"exists": False}}}, n1=key())
    assert probed_copies_same(["ctl", "n1"], hv, "ctl", KEY, *SAME) is False
    # Not probed for the path at all.
    hv = probed(ctl={"files": {}}, n1={"files": {}})
    assert probed_copies_same(["ctl", "n1"], hv, "ctl", KEY, *SAME) is False


def test_no_probe_anywhere_is_not_proven() -> None:
    hv = probed(ctl=None, n1=None, n2=None)
    assert probed_copies_same(HOSTS, hv, "ctl", KEY, *SAME) is False


def test_a_probe_without_sha256_matches_only_the_same_lack() -> None:
    # The source's missing sha256 is '-', a host's is '': never equal.
    hv = probed(
        ctl={"files": {KEY: {"exists": True, "owner": "munge", "group": "munge", "mode": "0400"}}}
    )
    assert probed_copies_same(["ctl"], hv, "ctl", KEY, *SAME) is False


def test_a_generator_of_hosts_is_read_once_for_all_checks() -> None:
    hv = probed(ctl=key(), n1=key())
    assert probed_copies_same(iter(["ctl", "n1"]), hv, "ctl", KEY, *SAME) is True


# probed_shared_reads: __shared_fs_probed_tokens


def test_each_hosts_files_in_the_hosts_order() -> None:
    hv = probed(
        ctl={"shared_reads": {CHECK: {"files": {"t1": "t1"}}}},
        n1={"shared_reads": {CHECK: {"files": {"t1": "t1", "t2": "t2"}}}},
        n2={"shared_reads": {CHECK: {"files": {}}}},
    )
    assert probed_shared_reads(HOSTS, hv, CHECK) == [{"t1": "t1"}, {"t1": "t1", "t2": "t2"}, {}]


def test_what_the_probe_did_not_read_is_empty() -> None:
    hv = probed(
        ctl=None,
        n1={"files": {}},
        n2={"shared_reads": {"/elsewhere": {"files": {"x": "x"}}}},
    )
    assert probed_shared_reads(HOSTS, hv, CHECK) == [{}, {}, {}]


def test_null_steps_fall_back_but_null_files_stay() -> None:
    # As `reads[dir] | default({})).files | default({})`: default only replaces what is missing.
    hv = probed(
        ctl={"shared_reads": None},
        n1={"shared_reads": {CHECK: None}},
        n2={"shared_reads": {CHECK: {"files": None}}},
    )
    assert probed_shared_reads(HOSTS, hv, CHECK) == [{}, {}, None]


def test_no_hosts_no_reads() -> None:
    assert probed_shared_reads([], {}, CHECK) == []


# probed_root_owned: slurm_auth's key folder (__slurm_auth_settled)
FOLDER = "/etc/slurm"


def test_a_folder_root_owned_on_every_host() -> None:
    ok = {"trusted": {FOLDER: ""}}
    assert probed_root_owned(HOSTS, probed(ctl=ok, n1=ok, n2=ok), FOLDER) is True


def test_one_host_says_why_not_or_was_not_asked_or_not_probed() -> None:
    ok = {"trusted": {FOLDER: ""}}
    why = {"trusted": {FOLDER: "/etc/slurm is writable by others than root (mode 0777)"}}
    assert probed_root_owned(HOSTS, probed(ctl=ok, n1=why, n2=ok), FOLDER) is False
    assert probed_root_owned(HOSTS, probed(ctl=ok, n1={"trusted": {}}, n2=ok), FOLDER) is False
    assert probed_root_owned(HOSTS, probed(ctl=ok, n1=None, n2=ok), FOLDER) is False
    assert probed_root_owned(HOSTS, probed(ctl=ok, n1={"trusted": None}, n2=ok), FOLDER) is False
    assert probed_root_owned(HOSTS, {"ctl": {"cluster_node_state": ok}}, FOLDER) is False


def test_no_hosts_prove_nothing() -> None:
    assert probed_root_owned([], {}, FOLDER) is False
