"""Mitogen's linear strategy, taken from the installed ``mitogen`` package.

Ansible finds strategy plugins by folder; ``strategy_plugins = plugins/strategy``
in ansible.cfg points here, so no path into a virtual environment is written
down. Mitogen keeps one Python interpreter per host for the whole run instead
of starting one per task (on ansible-core 2.19 and the demo's containers, a
no-change ``site.yml`` rerun is slower with it: 24 s against 14.6 s,
2026-12-05). Run with ``ANSIBLE_STRATEGY=linear`` to go without it.

Plays that only touch the control machine (``connection: local``, hosts whose
``ansible_connection`` is ``local`` in any of their variables, or the
implicit localhost) run under Ansible's own linear strategy: Mitogen gains
nothing there, and its async runner leaves ``async``/``poll: 0`` jobs on the
local connection unfinished for ever (molecule's docker create/destroy
playbooks wait on such jobs).
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: mitogen_linear
short_description: Mitogen's linear strategy, local-only plays under Ansible's own
description:
  - Ansible's C(linear) strategy with Mitogen's connection handling, taken from
    the installed C(mitogen) Python package. One Python interpreter per host
    for the whole run instead of one per task. It once made a no-change rerun
    about twice as fast; on ansible-core 2.19 with the demo's four containers
    it is slower (24 s against 14.6 s, 2026-12-05).
  - Plays that only touch the control machine (C(connection=local), hosts
    whose C(ansible_connection) is C(local), or the implicit localhost) run
    under Ansible's own C(linear) strategy, because Mitogen's async runner
    never finishes C(poll=0) jobs on the local connection.
  - An opt-in. Select it with E(ANSIBLE_STRATEGY=mitogen_linear) where the
    collection's C(plugins/strategy) folder is in C(strategy_plugins), or as
    C(gpulab.slurm_cluster.mitogen_linear). Without the C(mitogen) package
    the plugin loads but refuses to run, naming the package.
author:
  - slurm-cluster-in-a-box contributors (@gpulab)
requirements:
  - mitogen (Python package on the control machine; requirements.txt pins it)
notes:
  - ansible-core warns that strategy plugins outside ansible.builtin are deprecated.
"""

from ansible.errors import AnsibleError

try:
    import ansible_mitogen.loaders
    import ansible_mitogen.strategy
except ImportError as error:  # Mitogen is optional: the default strategy is linear.
    MITOGEN_IMPORT_ERROR: ImportError | None = error
else:
    MITOGEN_IMPORT_ERROR = None

_LOCAL_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def local_only(play_connection, hosts, connection_of):
    """True when a play runs on the control machine alone.

    ``play_connection`` is the play's ``connection`` keyword (or None);
    ``hosts`` are inventory Host objects (``name``, ``implicit``);
    ``connection_of(host)`` is the host's ``ansible_connection`` from all
    its variables (host and group vars, inventory files and group_vars/).
    """
    if play_connection == "local":
        return True
    if not hosts:
        return False
    return all(
        getattr(h, "implicit", False) or h.name in _LOCAL_NAMES or connection_of(h) == "local"
        for h in hosts
    )


def connection_var(variable_manager, play, host):
    """The host's ``ansible_connection`` as the play would see it (unrendered)."""
    return variable_manager.get_vars(play=play, host=host, include_hostvars=False).get(
        "ansible_connection"
    )


if MITOGEN_IMPORT_ERROR is None:
    _Linear = ansible_mitogen.loaders.strategy_loader.get("linear", class_only=True)

    class StrategyModule(ansible_mitogen.strategy.StrategyMixin, _Linear):
        """Ansible's linear strategy with Mitogen's connection handling."""

        def run(self, iterator, play_context, result=0):
            play = iterator._play
            hosts = self._inventory.get_hosts(play.hosts)

            def connection_of(host):
                return connection_var(self._variable_manager, play, host)

            if local_only(play.connection, hosts, connection_of):
                return _Linear.run(self, iterator, play_context)
            return super().run(iterator, play_context, result)

else:
    from ansible.plugins.strategy.linear import StrategyModule as _Linear

    class StrategyModule(_Linear):
        """Stands in where the mitogen package is missing: it refuses to run."""

        def __init__(self, *args, **kwargs):
            raise AnsibleError(
                "Strategy mitogen_linear needs the Python package mitogen on the control "
                f"machine ({MITOGEN_IMPORT_ERROR}). Fix: pip install mitogen (requirements.txt "
                "pins it), or run without it: ANSIBLE_STRATEGY=linear."
            ) from MITOGEN_IMPORT_ERROR
