"""A filter's ValueError as Ansible's filter error, named for the task that used it.

Controller-side code shared by filters: plugin_utils, not module_utils (which
must not import ansible.errors; ansible-test's pylint refuses it there).

The filter modules stay importable without Ansible (tools/gpu_facts.py runs
them on a bare GPU machine): ansible.errors is imported only on an error.
"""

from __future__ import annotations

import functools


def ansible_errors(func):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except ValueError as exc:
            from ansible.errors import AnsibleFilterError

            raise AnsibleFilterError(str(exc)) from exc

    return wrapper
