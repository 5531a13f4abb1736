"""Mitogen's linear strategy, taken from the installed ``mitogen`` package.

Ansible finds strategy plugins by folder; ``strategy_plugins = plugins/strategy``
in ansible.cfg points here, so no path into a virtual environment is written
down. Mitogen keeps one Python interpreter per host for the whole run instead
of starting one per task: a no-change ``site.yml`` rerun takes a fraction of
the time. Run with ``ANSIBLE_STRATEGY=linear`` to go without it.
"""

import ansible_mitogen.loaders
import ansible_mitogen.strategy

_Linear = ansible_mitogen.loaders.strategy_loader.get("linear", class_only=True)


class StrategyModule(ansible_mitogen.strategy.StrategyMixin, _Linear):
    """Ansible's linear strategy with Mitogen's connection handling."""
