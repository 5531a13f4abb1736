"""The callback gpulab.slurm_cluster.template_cache: each template string compiled once per run.

Real ansible-playbook runs on a throwaway collection: a playbook with conditions,
templates, a looked-up file rendered per host and again with other delimiters,
backslashes, an undefined variable and a template that does not compile gives the
same registered results and output with the cache as without; the run's folder
holds the workers' compiled code. Unit tests: code written by one process is
read, not compiled, by another; a folder anyone else could write is not used.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
from pathlib import Path

import pytest
import throwaway
from ansible_collections.gpulab.slurm_cluster.plugins.callback import template_cache

# The files in this run's shared folder, as a worker sees them.
FILTER = """\
import os

from ansible import constants as C


def cache_files(_value):
    folder = os.path.join(C.DEFAULT_LOCAL_TMP, "template-cache")
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else ["no folder"]


def twice(value):
    return f"{value}{value}"


class FilterModule:
    def filters(self):
        return {"cache_files": cache_files, "twice": twice}
"""

TEMPLATE = "{{ inventory_hostname | upper }} [% inventory_hostname %] {{ '\\\\d+' }}\n"

EVERY_KIND = """\
- name: Templates and conditions
  hosts: all
  gather_facts: false
  vars:
    word: "{{ inventory_hostname ~ '-' ~ (inventory_hostname | length) }}"
  tasks:
    - name: A condition that differs per host
      ansible.builtin.set_fact:
        r_cond: "{{ word }}"
      when: inventory_hostname != 'b'
    - name: The same file, rendered per host, then with other delimiters
      ansible.builtin.set_fact:
        r_file: "{{ lookup('ansible.builtin.template', 'page.j2') }}"
        r_other: >-
          {{ lookup('ansible.builtin.template', 'page.j2',
                    variable_start_string='[%', variable_end_string='%]') }}
    - name: Backslashes in an expression and in a condition
      ansible.builtin.set_fact:
        r_slash: "{{ 'a\\\\nb' ~ ('x1' | regex_replace('\\\\d', 'D')) }}"
      when: "'\\\\d' | length == 2"
    - name: One string as an argument (backslashes kept) and as a file (Jinja's escapes)
      ansible.builtin.set_fact:
        r_esc_arg: '{{ ''a\\nb'' }}'
        r_esc_file: "{{ lookup('ansible.builtin.template', 'slash.j2') }}"
    - name: The same strings again (kept code)
      ansible.builtin.set_fact:
        r_again: "{{ word }} {{ lookup('ansible.builtin.template', 'page.j2') }}"
      when: inventory_hostname != 'b'
    - name: A collection's filter and Jinja's own, on every host (each name resolved once)
      ansible.builtin.set_fact:
        r_filters: "{{ [inventory_hostname, 'x'] | first | t.c.twice | upper }}"
    - name: A filter nobody has
      ansible.builtin.debug:
        msg: "{{ 1 | t.c.no_such_filter }}"
      register: r_no_filter
      ignore_errors: true
    - name: A filter nobody has, again
      ansible.builtin.debug:
        msg: "{{ 1 | t.c.no_such_filter }}"
      register: r_no_filter_again
      ignore_errors: true
    - name: Undefined
      ansible.builtin.debug:
        msg: "{{ no_such_variable }}"
      register: r_undefined
      ignore_errors: true
    - name: Does not compile
      ansible.builtin.debug:
        msg: "{{ 1 + }}"
      register: r_broken
      ignore_errors: true
    - name: Does not compile, again
      ansible.builtin.debug:
        msg: "{{ 1 + }}"
      register: r_broken_again
      ignore_errors: true
    - name: The run's shared folder
      ansible.builtin.set_fact:
        r_files: "{{ 0 | t.c.cache_files }}"
      run_once: true
    - name: Keep what each host holds
      ansible.builtin.copy:
        dest: "{{ out }}/{{ inventory_hostname }}.json"
        content: >-
          {{ dict(['r_cond', 'r_file', 'r_other', 'r_slash', 'r_esc_arg', 'r_esc_file',
                   'r_again', 'r_filters', 'r_no_filter', 'r_no_filter_again',
                   'r_undefined', 'r_broken', 'r_broken_again']
                  | zip([r_cond | default('none'), r_file, r_other, r_slash, r_esc_arg, r_esc_file,
                         r_again | default('none'), r_filters, r_no_filter, r_no_filter_again,
                         r_undefined, r_broken, r_broken_again])) | to_nice_json }}
        mode: "0644"
      delegate_to: localhost
"""

SAVED = re.compile(
    r"template_cache: (\d+) template strings compiled in Ansible's own process, "
    r"(\d+) compilations saved \((\d+) read from the run's workers\); "
    r"(\d+) filter and test names resolved, (\d+) resolutions saved"
)


def run(tmp_path: Path, enabled: bool) -> tuple[str, dict, list[str]]:
    """The playbook on three local hosts: its output, what each host kept, and the
    files in the run's shared folder."""
    # With controller_skip, as the project runs: the conditions are compiled here.
    skip = (throwaway.PLUGINS / "callback" / "controller_skip.py").read_text()
    collections = throwaway.collection(
        tmp_path / "coll",
        {"filter/files.py": FILTER, "callback/controller_skip.py": skip},
        "template_cache",
    )
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "page.j2").write_text(TEMPLATE)
    (tmp_path / "templates" / "slash.j2").write_text("{{ 'a\\nb' }}")
    out = tmp_path / "out"
    out.mkdir()
    env = {
        "GPULAB_TEMPLATE_CACHE": "1" if enabled else "0",
        "ANSIBLE_LOCALHOST_WARNING": "0",
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "local-tmp"),
        "ANSIBLE_VERBOSITY": "2",
    }
    text = throwaway.play(
        tmp_path,
        EVERY_KIND,
        "abc",
        collections,
        "t.c.controller_skip,t.c.template_cache",
        env,
        {"out": str(out)},
    )
    kept = {p.stem: json.loads(p.read_text()) for p in sorted(out.glob("*.json"))}
    files = re.search(r'"r_files": \[([^]]*)\]', text)
    return text, kept, re.findall(r'"([^"]+)"', files.group(1)) if files else []


def comparable(text: str, tmp_path: Path) -> list[list[str]]:
    """The output's task blocks, each one's lines sorted (hosts end in any order),
    without what differs between two runs: paths, pids, times, the cache's line."""
    text = text.replace(str(tmp_path), "TMP")
    text = re.sub(r"ansible-local-\w+", "LOCAL", text)
    text = re.sub(r"ansible-tmp-[\d.-]+", "REMOTE-TMP", text)
    blocks = re.split(r"(?m)^(?=TASK \[)", text)
    keep = []
    for block in blocks[1:]:
        lines = [
            ln
            for ln in block.splitlines()
            if not re.search(r"template_cache:|r_files|\b[0-9a-f]{64}\b|^\s*\"|Using module", ln)
            and not ln.startswith("task path")
        ]
        keep.append(sorted(lines))
    return keep


def test_renders_every_kind_as_without_the_cache(tmp_path: Path) -> None:
    with_text, with_kept, with_files = run(tmp_path / "with", enabled=True)
    without_text, without_kept, without_files = run(tmp_path / "without", enabled=False)
    assert sorted(with_kept) == ["a", "b", "c"]
    assert with_kept == without_kept
    assert comparable(with_text, tmp_path / "with") == comparable(
        without_text, tmp_path / "without"
    )
    a = with_kept["a"]
    assert a["r_cond"] == "a-1"
    assert with_kept["b"]["r_cond"] == "none"
    # One file, two sets of delimiters: each rendering its own.
    assert a["r_file"] == "A [% inventory_hostname %] \\d+\n"
    assert a["r_other"] == "{{ inventory_hostname | upper }} a {{ '\\\\d+' }}\n"
    assert a["r_slash"] == "a\\nbxD"
    # The same source, compiled with and without Ansible's backslash escaping.
    assert (a["r_esc_arg"], a["r_esc_file"]) == ("a\\nb", "a\nb")
    assert a["r_again"] == "a-1 A [% inventory_hostname %] \\d+\n"
    assert "no_such_variable" in a["r_undefined"]["msg"]
    # A string that does not compile fails each time, with the same message.
    assert a["r_broken"]["failed"] and a["r_broken"]["msg"] == a["r_broken_again"]["msg"]
    assert "[WARNING]" not in with_text
    # The workers' code is shared through the run's folder, whole files only.
    assert with_files and all(re.fullmatch(r"[0-9a-f]{64}", f) for f in with_files), with_files
    assert without_files == ["no folder"]
    # A collection's filter and Jinja's own give what they gave; a filter nobody
    # has fails each time, with the same message.
    assert (a["r_filters"], with_kept["c"]["r_filters"]) == ("AA", "CC")
    assert a["r_no_filter"]["failed"] and "no_such_filter" in a["r_no_filter"]["msg"]
    assert a["r_no_filter"]["msg"] == a["r_no_filter_again"]["msg"]
    # The condition on three hosts, and the looked-up file: compiled once here;
    # the filters' names resolved once here, not in each template environment.
    compiled, saved, _read, resolved, reused = map(int, SAVED.search(with_text).groups())
    assert compiled > 0 and saved >= 2, (compiled, saved)
    assert resolved > 0 and reused >= 2, (resolved, reused)
    assert not SAVED.search(without_text)


def _store_in_child(folder: str, source: str) -> None:
    cache = template_cache.Cache(folder=folder)
    cache.get(("k", source), lambda: compile(source, "<t>", "eval"))
    assert cache.compiled == 1


def test_code_one_process_compiled_is_read_by_another(tmp_path: Path) -> None:
    folder = template_cache.private_folder(str(tmp_path))
    assert folder
    child = multiprocessing.get_context("fork").Process(
        target=_store_in_child, args=(folder, "6 * 7")
    )
    child.start()
    child.join(30)
    assert child.exitcode == 0
    assert [f for f in os.listdir(folder) if f.endswith(".part")] == []

    cache = template_cache.Cache(folder=folder)
    code = cache.get(("k", "6 * 7"), lambda: pytest.fail("compiled again"))
    assert eval(code) == 42
    assert (cache.compiled, cache.read, cache.reused) == (0, 1, 0)
    cache.get(("k", "6 * 7"), lambda: pytest.fail("compiled again"))
    assert (cache.compiled, cache.read, cache.reused) == (0, 1, 1)
    # Another key: compiled here, and written for the others.
    cache.get(("k", "1 + 1"), lambda: compile("1 + 1", "<t>", "eval"))
    assert cache.compiled == 1 and len(os.listdir(folder)) == 2


def test_a_damaged_copy_is_compiled_again(tmp_path: Path) -> None:
    folder = template_cache.private_folder(str(tmp_path))
    key = ("k", "2 + 2")
    Path(folder, template_cache.digest(key)).write_bytes(b"\x00not code")
    cache = template_cache.Cache(folder=folder)
    assert eval(cache.get(key, lambda: compile("2 + 2", "<t>", "eval"))) == 4
    assert cache.compiled == 1


def test_the_key_names_classes_and_functions_the_same_in_every_process() -> None:
    key = (dict, template_cache.stable, "{{ x }}", ("{{", "}}"), None, True)
    assert template_cache.digest(key) == template_cache.digest(tuple(key))
    assert "0x" not in template_cache.stable(template_cache.stable)
    assert template_cache.digest(key) != template_cache.digest((*key[:2], "{{ y }}", *key[3:]))


@pytest.mark.parametrize("mode", [0o755, 0o770, 0o707])
def test_a_folder_others_can_write_or_read_is_not_used(tmp_path: Path, mode: int) -> None:
    folder = tmp_path / "template-cache"
    folder.mkdir()
    folder.chmod(mode)
    assert template_cache.private_folder(str(tmp_path)) is None


def test_a_link_in_place_of_the_folder_is_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    (tmp_path / "template-cache").symlink_to(target)
    assert template_cache.private_folder(str(tmp_path)) is None


def test_the_projects_settings_enable_it() -> None:
    ansible_cfg, molecule = throwaway.project_callbacks()
    assert "gpulab.slurm_cluster.template_cache" in ansible_cfg
    assert "gpulab.slurm_cluster.template_cache" in molecule


@pytest.mark.parametrize(
    ("version", "jinja", "switch"),
    [
        ("2.20.0", "3.1.6", None),
        ("2.18.3", "3.1.6", None),
        ("2.19.14", "3.2.0", None),
        ("2.19.14", "3.1.6", "0"),
    ],
)
def test_nothing_is_wrapped_on_another_release_or_when_turned_off(
    version: str, jinja: str, switch: str | None, monkeypatch
) -> None:
    import jinja2
    from ansible._internal._templating._jinja_bits import AnsibleEnvironment
    from ansible.plugins.loader import Jinja2Loader

    before = (AnsibleEnvironment.compile, AnsibleEnvironment.compile_expression)
    resolve = Jinja2Loader.get_with_context
    monkeypatch.setattr(template_cache, "ANSIBLE_VERSION", version)
    monkeypatch.setattr(jinja2, "__version__", jinja)
    if switch is None:
        monkeypatch.delenv("GPULAB_TEMPLATE_CACHE", raising=False)
    else:
        monkeypatch.setenv("GPULAB_TEMPLATE_CACHE", switch)
    assert not template_cache.CallbackModule().active
    assert (AnsibleEnvironment.compile, AnsibleEnvironment.compile_expression) == before
    assert not getattr(AnsibleEnvironment.compile, "template_cache", False)
    assert Jinja2Loader.get_with_context is resolve


class CountingLoader:
    """Stands in for Jinja2Loader: counts resolutions; 'bad' raises, 'none' finds nothing."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.cleared = 0

    def get_with_context(self, name, *args, **kwargs):
        self.calls.append((name, args, tuple(sorted(kwargs))))
        if name == "bad":
            raise KeyError(f"invalid plugin name: {name}")
        return ("result", None if name == "none" else f"plugin {name}", len(self.calls))

    def _clear_caches(self):
        self.cleared += 1


def test_each_name_is_resolved_once_until_the_loaders_caches_are_cleared() -> None:
    class Loader(CountingLoader):
        pass

    resolved = template_cache.Resolved()
    resolved.install(Loader)
    resolved.install(Loader)  # twice: wrapped once
    filters, tests = Loader(), Loader()
    first = filters.get_with_context("a.b.c")
    assert filters.get_with_context("a.b.c") is first
    # "No plugin" (Jinja's own filter is then used) is an answer too.
    nothing = filters.get_with_context("none")
    assert filters.get_with_context("none") is nothing and nothing[1] is None
    # Each loader its own answers.
    assert tests.get_with_context("a.b.c") is not first
    # An error is not kept: resolved, and raised, each time.
    for _ in range(2):
        with pytest.raises(KeyError):
            filters.get_with_context("bad")
    # Other arguments than the name: not kept (the loader pops these two itself).
    filters.get_with_context("a.b.c", "x")
    assert filters.get_with_context("a.b.c", class_only=True, collection_list=None) is first
    assert [c[0] for c in filters.calls] == ["a.b.c", "none", "bad", "bad", "a.b.c"]
    assert (resolved.resolved, resolved.reused) == (3, 3)
    # A plugin folder added (Ansible clears the loader's caches): resolved again,
    # for that loader only.
    filters._clear_caches()
    assert filters.cleared == 1
    assert filters.get_with_context("a.b.c") is not first
    assert tests.get_with_context("a.b.c") is tests.get_with_context("a.b.c")
    assert len(tests.calls) == 1
