"""Callback gpulab.slurm_cluster.controller_skip: a false ``when`` decided without a worker."""

from __future__ import annotations

DOCUMENTATION = r"""
name: controller_skip
author: slurm-cluster-in-a-box contributors (@gpulab)
version_added: 0.1.0
type: aggregate
short_description: Skip the worker where Ansible's own process gives the same result
description:
  - Ansible forks a worker process for every task on every host, and the worker
    evaluates the task's C(when) first. On a no-change C(site.yml) rerun about half
    of the task and host pairs are skipped, so half the forks only found out that
    there was nothing to do.
  - With this callback enabled, Ansible's own process evaluates the C(when) of a
    task before it forks the worker, with the same variables the worker would get
    (the host's, the task's and the connection's). When it is false, the result the
    worker would have sent (skipped, C(Conditional result was False) and the false
    condition) is sent without a worker. Callbacks, C(register) and the recap get
    the same result; only the order in which the hosts' results arrive may differ,
    as it does between two runs with workers.
  - A task whose C(loop) is an empty list on a host is skipped here too, with the
    result its worker would send (C(No items in the list); its C(when) is evaluated
    per item, so not at all). The loop is templated with the variables and search
    path the worker would use; a loop with items goes to the worker, which templates
    it again. A loop that calls a lookup itself (C(lookup), C(query), C(q)) always
    goes to the worker.
  - These still go to a worker, which decides as it always did. A condition that
    holds, or that cannot be evaluated here. A loop with items, or a C(with_) loop
    (a lookup). A task with C(delegate_to). Every task under a strategy other
    than Ansible's C(linear). (Import and meta tasks never reach a worker.)
  - An C(include_tasks) or C(include_role) whose condition is false is skipped here
    too. Its worker would send the same skipped result, and Ansible expands no file
    from a skipped include.
  - A task that needs no host runs here too, as its worker would run it (Ansible's
    task executor, on a copy of the task). These are ansible-core's own C(set_fact),
    C(assert), C(debug), C(fail), C(validate_argument_spec) and C(include_vars) (not a
    playbook's own action of the same name), without a loop, C(delegate_to), C(async)
    or retries. Their worker only templates the arguments and returns a result
    (C(include_vars) reads a file on the control machine, as its worker would); about a
    third of a no-change C(site.yml) rerun's tasks are such. E(GPULAB_CONTROLLER_RUN=0) sends them
    to workers again.
  - It only acts on the ansible-core release it was written against (2.19); on
    another it does nothing. E(GPULAB_CONTROLLER_SKIP=0) turns all of it off for a run.
  - Enable it with C(callbacks_enabled = gpulab.slurm_cluster.controller_skip) in
    ansible.cfg (the project's ansible.cfg does).
requirements:
  - enable in configuration
"""

import os  # noqa: E402
import re  # noqa: E402
import typing as t  # noqa: E402

from ansible import constants as C  # noqa: E402
from ansible.executor.task_executor import TaskExecutor  # noqa: E402
from ansible.module_utils.ansible_release import __version__ as ANSIBLE_VERSION  # noqa: E402
from ansible.plugins import loader as plugin_loader  # noqa: E402
from ansible.plugins.callback import CallbackBase  # noqa: E402
from ansible.utils.display import Display  # noqa: E402

# The release whose worker this callback reproduces (executor/task_executor.py:
# _execute_internal evaluates the conditional on the task's variables plus the
# play context's; a false one returns the dict below).
SUPPORTED = ("2.19.",)
SKIP_RESULT = {"changed": False, "skipped": True, "skip_reason": "Conditional result was False"}
# What run() returns for a loop whose items are an empty list (its when is not evaluated).
EMPTY_LOOP_RESULT = {
    "changed": False,
    "skipped": True,
    "skipped_reason": "No items in the list",
    "results": [],
}
# A loop template that calls a lookup itself (lookup, query or q).
_CALLS_LOOKUP = re.compile(r"\b(?:lookup|query|q)\s*\(")
LINEAR = "ansible.plugins.strategy.linear"
# Import and meta actions: the strategy handles them itself, no worker runs them.
# (An include's false condition is decided here: the worker returns the same
# skipped result for it, and the strategy expands no file from a skipped one.)
# Read with defaults: the module loads on any release, and acts on 2.19 only.
_NOT_HERE = frozenset(
    action
    for name in ("_ACTION_IMPORT_TASKS", "_ACTION_IMPORT_ROLE", "_ACTION_META")
    for action in getattr(C, name, ())
)
# Actions that need no host: their worker only templates their arguments and
# returns a result (no connection is opened, nothing is written; include_vars
# reads a vars file on this machine, as its worker would). All of them are
# action plugins with _requires_connection = False in ansible-core 2.19.
HOSTLESS = frozenset(
    f"ansible.builtin.{name}"
    for name in ("set_fact", "assert", "debug", "fail", "validate_argument_spec", "include_vars")
)
try:  # ansible-core 2.19's template engine; another release has none here
    from ansible._internal._templating._engine import TemplateEngine
except ImportError:
    TemplateEngine = None


def skip_result(host: t.Any, task: t.Any, task_vars: dict, play_context: t.Any, loader: t.Any):
    """The result the worker would send when the task's condition is false on host, or None
    when the worker has to decide (a condition that holds, or anything not handled here)."""
    if task.loop_with or task.delegate_to or task.action in _NOT_HERE:
        return None
    if task.loop is not None:
        return empty_loop_result(task, task_vars, loader)
    if not task.when:
        return None
    try:
        templar = TemplateEngine(loader=loader, variables=task_vars)
        variables = task_vars.copy()
        # As the worker does before its conditional: the connection's magic variables.
        context = play_context.set_task_and_variable_override(
            task=task, variables=task_vars, templar=templar
        )
        context.post_validate(templar=templar)
        if not context.remote_addr:
            context.remote_addr = host.address
        context.update_vars(variables)
        false_condition: dict[str, t.Any] = {}
        if task._resolve_conditional(task.when, variables, result_context=false_condition):
            return None
        result = dict(SKIP_RESULT) | false_condition
        task.update_result_no_log(templar, result)
    except Exception:  # an error is the worker's to raise, with its context
        return None
    return result


def empty_loop_result(task: t.Any, task_vars: dict, loader: t.Any):
    """The worker's result for a ``loop:`` whose items are an empty list, or None (items,
    or anything else: the worker's to decide). Templated as the worker's
    _get_loop_items does, with the task's search path. A loop that calls a lookup
    itself is left to the worker: with items it would run here and there."""
    if isinstance(task.loop, list):
        return None if task.loop else EMPTY_LOOP_RESULT | {"results": []}
    if not isinstance(task.loop, str) or _CALLS_LOOKUP.search(task.loop):
        return None
    try:
        variables = dict(task_vars)
        search = task.get_search_path()
        if loader.get_basedir() not in search:
            search.append(loader.get_basedir())
        variables["ansible_search_path"] = search
        items = TemplateEngine(loader=loader, variables=variables).template(task.loop)
    except Exception:  # an undefined loop, say: the worker's to report, with its when
        return None
    if isinstance(items, list) and not items:
        return EMPTY_LOOP_RESULT | {"results": []}  # a list of its own for each host
    return None


_resolved: dict[tuple, str] = {}


def resolved(task: t.Any) -> str:
    """The action plugin a task runs, by its full name (a short name may be a
    playbook's own action_plugins/, which is not ansible.builtin's)."""
    key = (task.action, tuple(task.collections or ()))
    if key not in _resolved:
        context = plugin_loader.action_loader.find_plugin_with_context(
            task.action, collection_list=task.collections
        )
        _resolved[key] = context.resolved_fqcn if context.resolved else ""
    return _resolved[key]


def executor_here(strategy: t.Any, host: t.Any, task: t.Any, task_vars: dict, play_context: t.Any):
    """A task executor for a task that needs no host, to run in this process as its
    worker would run it (on a copy of the task: the worker's own is a copy too), with
    that copy; or None when the task has to go to a worker. No loop, delegation,
    async or retries: a retry's delay would stop every other host's work here."""
    if task.loop is not None or task.loop_with or task.delegate_to or task.async_val:
        return None
    if task.until or task.retries is not None:
        return None
    try:
        if resolved(task) not in HOSTLESS:
            return None
        copy = task.copy(exclude_parent=False, exclude_tasks=False)
        executor = TaskExecutor(
            host,
            copy,
            dict(task_vars),
            play_context,
            strategy._loader,
            plugin_loader.get_plugin_loader_namespace(),
            strategy._final_q,
            strategy._variable_manager,
        )
    except Exception:  # anything unexpected: the worker's to run, as before
        return None
    return executor, copy


def install(strategy_base: t.Any, raw_task_result: t.Any, hostless: bool = True) -> None:
    """Wrap StrategyBase._queue_task: a false condition, or (with hostless) a task that
    needs no host, sends the worker's result itself."""
    queue_task = strategy_base._queue_task
    if getattr(queue_task, "controller_skip", False):
        return

    def _queue_task(self, host, task, task_vars, play_context):
        result = here = None
        if type(self).__module__ == LINEAR:
            # A task run here evaluates its own condition, as in a worker: once.
            if hostless:
                here = executor_here(self, host, task, task_vars, play_context)
            if here is None:
                result = skip_result(host, task, task_vars, play_context, self._loader)
        if result is None and here is None:
            return queue_task(self, host, task, task_vars, play_context)
        # What the base method records and sends around a worker's start.
        self._queued_task_cache[(host.name, task._uuid)] = {
            "host": host,
            "task": task,
            "task_vars": task_vars,
            "play_context": play_context,
        }
        self._tqm.send_callback("v2_runner_on_start", host, task)
        fields = None
        if here is not None:  # run now, after the start as with a worker
            executor, copy = here
            # TaskExecutor.run turns every error into the task's failed result.
            result, fields = executor.run(), copy.dump_attrs()
        self._final_q.send_task_result(
            raw_task_result(
                host=host,
                task=task,
                return_data=result,
                task_fields=task.dump_attrs() if fields is None else fields,
            )
        )
        self._pending_results += 1
        return None

    _queue_task.controller_skip = True
    strategy_base._queue_task = _queue_task


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpulab.slurm_cluster.controller_skip"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, display: Display | None = None) -> None:
        super().__init__(display=display)
        if os.environ.get("GPULAB_CONTROLLER_SKIP", "1") == "0":
            return
        if not ANSIBLE_VERSION.startswith(SUPPORTED):
            self._display.vvv(
                f"gpulab.slurm_cluster.controller_skip: ansible-core {ANSIBLE_VERSION} is not "
                f"{' or '.join(v + 'x' for v in SUPPORTED)}; every task goes to a worker"
            )
            return
        from ansible.executor.task_result import _RawTaskResult
        from ansible.plugins.strategy import StrategyBase

        # Read once, not on every task and host.
        install(StrategyBase, _RawTaskResult, os.environ.get("GPULAB_CONTROLLER_RUN", "1") != "0")
