"""The callback gpulab.slurm_cluster.controller_skip: a false `when` decided without a worker.

Real ansible-playbook runs on a throwaway collection: a playbook with every kind
of condition (false, true, on the connection's magic variables, per loop item,
on a fact set just before, undefined, delegated, an include, no_log) gives the
same registered results, output and recap with the callback as without; and a
test plugin that records the process evaluating a condition shows a false one
decided in Ansible's own process, a true one in the workers.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import throwaway

ROOT = Path(__file__).resolve().parents[1]

# A test plugin that appends the evaluating process's pid to a file.
TEST_PLUGIN = """\
import os


def seen(value, path):
    with open(path, "a") as out:
        out.write(f"{os.getpid()} {value}\\n")
    return False


class TestModule:
    def tests(self):
        return {"seen": seen}
"""

# A playbook's own action plugin named set_fact: records the process running it.
OWN_SET_FACT = """\
import os

from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    def run(self, tmp=None, task_vars=None):
        with open(self._task.args["log"], "a") as out:
            out.write(f"{os.getpid()} own\\n")
        return {"changed": False}
"""

EVERY_KIND = """\
- name: Every kind of condition
  hosts: all
  gather_facts: false
  tasks:
    - name: False everywhere
      ansible.builtin.command: "false"
      when: false
      register: r_false
    - name: True on a only
      ansible.builtin.debug:
        msg: "{{ inventory_hostname }}"
      when: inventory_hostname == 'a'
      register: r_a
    - name: On the connection's magic variable
      ansible.builtin.debug:
        msg: "{{ ansible_host }}"
      when: ansible_host == 'b'
      register: r_magic
    - name: Per item
      ansible.builtin.debug:
        msg: "{{ item }}"
      loop: [1, 2, 3]
      when: item != 2
      register: r_loop
    - name: A fact
      ansible.builtin.set_fact:
        flag: "{{ inventory_hostname == 'c' }}"
    - name: On the fact
      ansible.builtin.debug:
        msg: flagged
      when: flag | bool
      register: r_fact
    - name: Several conditions, the second false
      ansible.builtin.debug:
        msg: never
      when: [true, "inventory_hostname == 'z'"]
      register: r_list
    - name: Undefined
      ansible.builtin.debug:
        msg: never
      when: no_such_variable
      register: r_undefined
      ignore_errors: true
    - name: Delegated
      ansible.builtin.debug:
        msg: delegated
      delegate_to: a
      when: inventory_hostname == 'b'
      register: r_delegated
    - name: Secret
      ansible.builtin.debug:
        msg: secret
      no_log: true
      when: inventory_hostname == 'q'
      register: r_secret
    - name: An assert that fails on b
      ansible.builtin.assert:
        that: inventory_hostname != 'b'
        fail_msg: "{{ inventory_hostname }} fails"
      register: r_assert
      ignore_errors: true
    - name: Arguments checked against a spec
      ansible.builtin.validate_argument_spec:
        argument_spec:
          word: {type: int}
        provided_arguments:
          word: "{{ inventory_hostname }}"
      register: r_spec
      ignore_errors: true
    - name: Variables from a file, per host
      ansible.builtin.include_vars: "{{ 'vars_' ~ inventory_hostname ~ '.yml' }}"
      register: r_vars
    - name: A loop empty on a and b, its when false on c
      ansible.builtin.debug:
        msg: "{{ item }}"
      loop: "{{ [inventory_hostname] if inventory_hostname == 'c' else [] }}"
      when: item != 'c'
      register: r_empty
    - name: An empty literal loop (its when is never evaluated)
      ansible.builtin.debug:
        msg: never
      loop: []
      when: no_such_variable
      register: r_empty_literal
    - name: A loop from a lookup in the task's search path
      ansible.builtin.debug:
        msg: "{{ item | basename }}"
      loop: "{{ query('fileglob', '*.txt') }}"
      register: r_glob
    - name: An include
      ansible.builtin.include_tasks: never.yml
      when: false
    - name: An include on c only
      ansible.builtin.include_tasks: on_c.yml
      when: inventory_hostname == 'c'
    - name: Keep what each task registered
      ansible.builtin.copy:
        dest: "{{ out }}/{{ inventory_hostname }}.json"
        content: >-
          {{ dict(['r_false', 'r_a', 'r_magic', 'r_loop', 'r_fact', 'r_list',
                   'r_undefined', 'r_delegated', 'r_secret', 'r_included', 'r_assert', 'r_spec',
                   'r_vars', 'from_file', 'r_empty', 'r_empty_literal', 'r_glob']
                  | zip([r_false, r_a, r_magic, r_loop, r_fact, r_list,
                         r_undefined, r_delegated, r_secret,
                         r_included | default('not included'), r_assert, r_spec,
                         r_vars, from_file, r_empty, r_empty_literal, r_glob]))
             | to_nice_json }}
        mode: "0644"
      delegate_to: localhost
"""

WHO_DECIDES = """\
- name: Who evaluates a condition
  hosts: all
  gather_facts: false
  tasks:
    - name: False
      ansible.builtin.debug:
        msg: never
      when: "'false' is t.c.seen(log)"
    - name: True
      ansible.builtin.ping:
      when: "not ('true' is t.c.seen(log))"
    - name: A task that needs no host
      ansible.builtin.set_fact:
        hostless: "{{ 'hostless' is t.c.seen(log) }}"
    - name: The same with retries (their delay would hold Ansible's own process)
      ansible.builtin.set_fact:
        retried: "{{ 'retried' is t.c.seen(log) }}"
      retries: 1
      delay: 0
    - name: A false include
      ansible.builtin.include_tasks: never.yml
      when: "'include' is t.c.seen(log)"
    - name: A loop empty on every host (templated here; no worker starts)
      ansible.builtin.debug:
        msg: "{{ item }}"
      loop: "{{ ['never'] if 'loop' is t.c.seen(log) else [] }}"
    - name: An empty loop that calls a lookup (left to the workers)
      ansible.builtin.debug:
        msg: "{{ item }}"
      loop: "{{ ['never'] if 'lookup' is t.c.seen(log) else query('ansible.builtin.items', []) }}"
    - name: Variables from a file (its name templated as the action runs)
      ansible.builtin.include_vars: "{{ 'vars' is t.c.seen(log) | ternary('', 'vars_a.yml') }}"
"""


def play(
    tmp_path: Path,
    playbook: str,
    callbacks: str,
    off: bool = False,
    env: dict[str, str] | None = None,
    **extra: str,
) -> str:
    """A real ansible-playbook run on three local hosts; its output."""
    collections = throwaway.collection(
        tmp_path / "coll", {"test/seen.py": TEST_PLUGIN}, "controller_skip"
    )
    (tmp_path / "never.yml").write_text("- ansible.builtin.fail:\n")
    (tmp_path / "files").mkdir(exist_ok=True)
    (tmp_path / "files" / "one.txt").write_text("found in the search path\n")
    for host in "abc":
        (tmp_path / f"vars_{host}.yml").write_text(f"from_file: {host} from its file\n")
    (tmp_path / "on_c.yml").write_text(
        "- ansible.builtin.set_fact:\n    r_included: '{{ inventory_hostname }}'\n"
    )
    env = {
        "GPULAB_CONTROLLER_SKIP": "0" if off else "1",
        "ANSIBLE_LOCALHOST_WARNING": "0",
        **(env or {}),
    }
    return throwaway.play(tmp_path, playbook, "abc", collections, callbacks, env, extra)


def by_task(text: str) -> list[list[str]]:
    """The output's blocks (one per task), each block's lines sorted: the hosts'
    results come in the order their workers end, with or without the callback."""
    return [sorted(block.splitlines()) for block in re.split(r"(?m)^(?=TASK \[)", text)]


def registered(folder: Path) -> dict:
    return {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}


def test_every_kind_of_condition_ends_as_without_the_callback(tmp_path: Path) -> None:
    runs = {}
    # Without: the same callbacks, turned off (so the output may be compared whole).
    for name in ("with", "without"):
        out = tmp_path / name / "out"
        out.mkdir(parents=True)
        text = play(
            tmp_path / name, EVERY_KIND, "t.c.controller_skip", name == "without", out=str(out)
        )
        # The undefined condition's error and include_vars name a file: the same one,
        # not the same path.
        kept = json.loads(json.dumps(registered(out)).replace(str(tmp_path / name), "TMP"))
        runs[name] = (text.replace(str(tmp_path / name), "TMP"), kept)
    (with_text, with_registered), (without_text, without_registered) = runs["with"], runs["without"]
    assert sorted(with_registered) == ["a", "b", "c"]
    assert with_registered == without_registered
    assert by_task(with_text) == by_task(without_text)
    assert "[WARNING]" not in with_text
    a = with_registered["a"]
    assert a["r_false"] == {
        "changed": False,
        "skipped": True,
        "skip_reason": "Conditional result was False",
        "false_condition": False,
    }
    assert a["r_magic"]["false_condition"] == "ansible_host == 'b'"
    assert "skipped" not in with_registered["b"]["r_magic"]  # the magic variable held on b
    assert a["r_undefined"]["failed"] is True
    assert with_registered["c"]["r_secret"]["skipped"] is True
    assert [with_registered[h]["r_included"] for h in "abc"] == ["not included"] * 2 + ["c"]
    assert [with_registered[h]["r_assert"].get("failed", False) for h in "abc"] == [
        False,
        True,
        False,
    ]
    assert with_registered["b"]["r_assert"]["msg"] == "b fails"
    assert with_registered["a"]["r_spec"]["failed"] is True  # 'a' is not an int
    # include_vars, run here: each host's own file, its variables set on that host.
    assert [with_registered[h]["from_file"] for h in "abc"] == [f"{h} from its file" for h in "abc"]
    assert with_registered["b"]["r_vars"]["ansible_facts"] == {"from_file": "b from its file"}
    # Empty loops: the worker's result (its when never evaluated), sent here.
    empty = {"changed": False, "skipped": True, "skipped_reason": "No items in the list"}
    for h in "ab":
        assert with_registered[h]["r_empty"] == empty | {"results": []}
    (item,) = with_registered["c"]["r_empty"]["results"]  # one item, in its worker
    assert (item["item"], item["skipped"], item["false_condition"]) == ("c", True, "item != 'c'")
    assert with_registered["a"]["r_empty_literal"] == empty | {"results": []}
    # A loop's lookup reads the task's search path, here as in the worker.
    assert [r["msg"] for r in with_registered["b"]["r_glob"]["results"]] == ["one.txt"]
    assert re.search(r"a +: ok=\d+ +changed=1 .*skipped=\d+ +rescued=0 +ignored=2", with_text)


@pytest.mark.parametrize("enabled", [True, False], ids=["controller_skip", "without"])
def test_a_false_condition_is_decided_in_ansibles_own_process(
    tmp_path: Path, enabled: bool
) -> None:
    log = tmp_path / "seen.log"
    callbacks = "t.c.controller_skip" if enabled else "ansible.builtin.timer"
    play(tmp_path, WHO_DECIDES, callbacks, log=str(log))
    seen = [line.split() for line in log.read_text().splitlines()]
    false_pids = {pid for pid, value in seen if value == "false"}
    true_pids = {pid for pid, value in seen if value == "true"}
    # The true condition: on three hosts, in three workers (its first evaluation here
    # says it holds; the worker evaluates it again).
    assert len([1 for _pid, value in seen if value == "false"]) == 3
    # A task that needs no host (set_fact): run here too, for every host.
    hostless_pids = [pid for pid, value in seen if value == "hostless"]
    assert len(hostless_pids) == 3, seen
    assert set(hostless_pids) == (false_pids if enabled else set(hostless_pids)), seen
    assert len(set(hostless_pids)) == (1 if enabled else 3), seen
    retried_pids = {pid for pid, value in seen if value == "retried"}
    assert len(retried_pids) == 3 and not retried_pids & false_pids, seen  # workers, always
    vars_pids = [pid for pid, value in seen if value == "vars"]
    assert len(vars_pids) == 3, seen
    assert set(vars_pids) == (false_pids if enabled else set(vars_pids)), seen
    assert len(set(vars_pids)) == (1 if enabled else 3), seen
    loop_pids = [pid for pid, value in seen if value == "loop"]
    assert len(loop_pids) == 3, seen
    # An empty loop: templated here for every host, or in a worker per host.
    assert set(loop_pids) == (false_pids if enabled else set(loop_pids)), seen
    assert len(set(loop_pids)) == (1 if enabled else 3), seen
    lookup_pids = [pid for pid, value in seen if value == "lookup"]
    assert len(set(lookup_pids)) == 3 and not set(lookup_pids) & false_pids, seen  # workers
    include_pids = [pid for pid, value in seen if value == "include"]
    assert len(include_pids) == 3, seen
    # A false include, like any false condition: here, or in a worker per host.
    assert len(set(include_pids)) == (1 if enabled else 3), seen
    if enabled:
        assert len(false_pids) == 1, seen  # Ansible's own process, for all three hosts
        assert false_pids <= {pid for pid, value in seen if value == "true"}, seen
        assert len(true_pids - false_pids) == 3, seen  # and each worker for the true one
    else:
        assert len(false_pids) == 3, seen  # one worker per host
        assert not false_pids & true_pids, seen


def test_hostless_tasks_go_to_workers_when_turned_off(tmp_path: Path) -> None:
    log = tmp_path / "seen.log"
    play(
        tmp_path,
        WHO_DECIDES,
        "t.c.controller_skip",
        env={"GPULAB_CONTROLLER_RUN": "0"},
        log=str(log),
    )
    seen = [line.split() for line in log.read_text().splitlines()]
    assert len({pid for pid, value in seen if value == "false"}) == 1, seen  # still skipped here
    assert len({pid for pid, value in seen if value == "hostless"}) == 3, seen  # one worker each


def test_a_playbooks_own_action_of_the_same_name_goes_to_a_worker(tmp_path: Path) -> None:
    """A short name may be the playbook's own action plugin: only ansible.builtin's
    hostless actions run in Ansible's process."""
    log = tmp_path / "seen.log"
    (tmp_path / "action_plugins").mkdir()
    (tmp_path / "action_plugins" / "set_fact.py").write_text(OWN_SET_FACT)
    collections = throwaway.collection(tmp_path / "coll", {}, "controller_skip")
    env = {"ANSIBLE_LOCALHOST_WARNING": "0"}
    playbook = (
        "- hosts: all\n  gather_facts: false\n  tasks:\n    - set_fact:\n        log: '{{ log }}'\n"
    )
    throwaway.play(
        tmp_path, playbook, "abc", collections, "t.c.controller_skip", env, {"log": str(log)}
    )
    pids = {line.split()[0] for line in log.read_text().splitlines()}
    assert len(pids) == 3, pids  # a worker per host


def test_turned_off_by_its_variable(tmp_path: Path) -> None:
    log = tmp_path / "seen.log"
    play(tmp_path, WHO_DECIDES, "t.c.controller_skip", off=True, log=str(log))
    false_pids = {ln.split()[0] for ln in log.read_text().splitlines() if ln.endswith(" false")}
    assert len(false_pids) == 3  # a worker per host, as without the callback


def test_the_projects_settings_enable_it() -> None:
    ansible_cfg, molecule = throwaway.project_callbacks()
    assert "gpulab.slurm_cluster.controller_skip" in ansible_cfg
    assert "gpulab.slurm_cluster.controller_skip" in molecule


@pytest.mark.parametrize(
    ("version", "switch"), [("2.20.0", None), ("2.18.3", None), ("2.19.14", "0")]
)
def test_nothing_is_wrapped_on_another_release_or_when_turned_off(
    version: str, switch: str | None, monkeypatch
) -> None:
    from ansible.plugins.strategy import StrategyBase
    from ansible_collections.gpulab.slurm_cluster.plugins.callback import controller_skip

    before = StrategyBase.__dict__["_queue_task"]
    monkeypatch.setattr(controller_skip, "ANSIBLE_VERSION", version)
    if switch is None:
        monkeypatch.delenv("GPULAB_CONTROLLER_SKIP", raising=False)
    else:
        monkeypatch.setenv("GPULAB_CONTROLLER_SKIP", switch)
    controller_skip.CallbackModule()
    assert StrategyBase.__dict__["_queue_task"] is before
    assert not getattr(before, "controller_skip", False)
