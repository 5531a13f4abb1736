"""The lookup gpulab.slurm_cluster.rendered: the text of ansible.builtin.template, without
its deep copy of every variable.

A real ansible-playbook run on three local hosts renders the same files with both
lookups: per-host values, nested data, template_vars, other delimiters, several
terms, an undefined variable and a missing file give the same text or the same
error; a template that calls a mutating method on a variable leaves the host's
variable as it was, with either lookup.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PAGE = """\
{{ inventory_hostname }} {{ cfg.nodes | join(',') }} {{ cfg.inner.depth }}
{% for k, v in cfg.inner | dictsort %}{{ k }}={{ v }}
{% endfor %}{{ extra | default('no extra') }} [% inventory_hostname %]
"""

MUTATE = """\
{% set _ = cfg.update({'added': 1}) %}{% set _ = cfg.nodes.append('zz') %}\
{{ cfg | dictsort | map('first') | join(',') }}
"""

PLAY = """\
- name: Both lookups
  hosts: all
  gather_facts: false
  vars:
    cfg:
      nodes: ["{{ inventory_hostname }}1", "{{ inventory_hostname }}2"]
      inner:
        depth: "{{ inventory_hostname | length + 1 }}"
        name: "{{ inventory_hostname | upper }}"
  tasks:
    - name: Render with each
      ansible.builtin.set_fact:
        r: >-
          {{ {'builtin': query('ansible.builtin.template', 'page.j2', 'page.j2'),
              'rendered': query('gpulab.slurm_cluster.rendered', 'page.j2', 'page.j2'),
              'builtin_vars': lookup('ansible.builtin.template', 'page.j2',
                                     template_vars={'extra': 'E'}),
              'rendered_vars': lookup('gpulab.slurm_cluster.rendered', 'page.j2',
                                      template_vars={'extra': 'E'}),
              'builtin_other': lookup('ansible.builtin.template', 'page.j2',
                                      variable_start_string='[%', variable_end_string='%]'),
              'rendered_other': lookup('gpulab.slurm_cluster.rendered', 'page.j2',
                                       variable_start_string='[%', variable_end_string='%]'),
              'builtin_mutate': lookup('ansible.builtin.template', 'mutate.j2'),
              'after_builtin': cfg,
              'rendered_mutate': lookup('gpulab.slurm_cluster.rendered', 'mutate.j2'),
              'after_rendered': cfg} }}
    - name: An undefined variable (builtin)
      ansible.builtin.debug:
        msg: "{{ lookup('ansible.builtin.template', 'undefined.j2') }}"
      register: u_builtin
      ignore_errors: true
    - name: An undefined variable (rendered)
      ansible.builtin.debug:
        msg: "{{ lookup('gpulab.slurm_cluster.rendered', 'undefined.j2') }}"
      register: u_rendered
      ignore_errors: true
    - name: A missing file (builtin)
      ansible.builtin.debug:
        msg: "{{ lookup('ansible.builtin.template', 'missing.j2') }}"
      register: m_builtin
      ignore_errors: true
    - name: A missing file (rendered)
      ansible.builtin.debug:
        msg: "{{ lookup('gpulab.slurm_cluster.rendered', 'missing.j2') }}"
      register: m_rendered
      ignore_errors: true
    - name: Keep what each host holds
      ansible.builtin.copy:
        dest: "{{ out }}/{{ inventory_hostname }}.json"
        content: >-
          {{ r | combine({'u': [u_builtin.msg, u_rendered.msg],
                          'm': [m_builtin.msg, m_rendered.msg]}) | to_nice_json }}
        mode: "0644"
      delegate_to: localhost
"""


def test_renders_the_same_text_and_errors_as_the_builtin_lookup(tmp_path: Path) -> None:
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "page.j2").write_text(PAGE)
    (tmp_path / "templates" / "mutate.j2").write_text(MUTATE)
    (tmp_path / "templates" / "undefined.j2").write_text("{{ no_such_variable }}\n")
    (tmp_path / "play.yml").write_text(PLAY)
    hosts = [
        f"{h} ansible_connection=local ansible_python_interpreter={sys.executable}" for h in "abc"
    ]
    (tmp_path / "hosts.ini").write_text("[all]\n" + "\n".join(hosts) + "\n")
    (tmp_path / "ansible.cfg").write_text("[defaults]\n")
    out = tmp_path / "out"
    out.mkdir()
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(tmp_path / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=str(ROOT / "collections"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORKS="3",
        ANSIBLE_LOCALHOST_WARNING="0",
    )
    binary = Path(sys.executable).parent / "ansible-playbook"
    argv = [str(binary), "-i", "hosts.ini", "play.yml", "-e", f"out={out}"]
    run = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stdout + run.stderr
    kept = {p.stem: json.loads(p.read_text()) for p in sorted(out.glob("*.json"))}
    assert sorted(kept) == ["a", "b", "c"]
    for host, got in kept.items():
        page = (
            f"{host} {host}1,{host}2 2\ndepth=2\nname={host.upper()}\n"
            "no extra [% inventory_hostname %]\n"
        )
        assert got["builtin"] == got["rendered"] == [page, page], host
        assert got["builtin_vars"] == got["rendered_vars"] == page.replace("no extra", "E")
        assert got["builtin_other"] == got["rendered_other"]
        assert f" {host}\n" in got["rendered_other"]
        assert got["builtin_mutate"] == got["rendered_mutate"]
        # The template changed its own view of cfg, never the host's variable.
        want = {"nodes": [f"{host}1", f"{host}2"], "inner": {"depth": 2, "name": host.upper()}}
        assert got["after_builtin"] == got["after_rendered"] == want, host
        # The same errors, but for the plugin's name.
        for builtin, rendered in (got["u"], got["m"]):
            assert builtin == rendered.replace(
                "gpulab.slurm_cluster.rendered", "ansible.builtin.template"
            )
        assert "no_such_variable" in got["u"][0] and "missing.j2 could not be found" in got["m"][0]
