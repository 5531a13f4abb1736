"""How many task results this run has reported changed, in Ansible's own process.

The callback gpulab.slurm_cluster.run_changes counts them; the lookup of the
same name reads the count. Both import this module, so they share it in
Ansible's process, and a worker forked for a later task inherits the count
as it stood when the task began (the linear strategy hands out a task only
once every result of the one before has been counted).
"""

from __future__ import annotations

# None until the callback has seen the playbook start: without it enabled,
# nobody counts, and a reader must not take "no change" for granted.
COUNT: dict[str, int | None] = {"changed": None}


def start() -> None:
    COUNT["changed"] = 0


def add(changed: bool) -> None:
    if COUNT["changed"] is not None and changed:
        COUNT["changed"] += 1


def changed() -> int | None:
    """Results reported changed so far; None where nobody counts."""
    return COUNT["changed"]
