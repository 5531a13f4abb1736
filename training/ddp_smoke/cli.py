"""The command line: ``run`` on every rank, ``report DIR`` once after, ``plot`` on the controller.

``modes`` runs a partition's launch modes one after another and judges each
(``ddp_smoke.modes``, the plan as JSON on stdin: the smoke_train role's one
command per partition).

``sbatch SCRIPT`` submits a batch script and waits for it, like ``sbatch --wait``
but polling every second. ``accept REPORT...`` judges a partition's run per node
against the lab's history (``ddp_smoke.accept``) and appends the run to it.
Everything but ``run`` imports only the standard library (``plot`` adds
matplotlib when it is installed): the controller that runs them has
no torch. ``run`` imports torch (``ddp_smoke.rank``) only once the environment fits
its mode. ``main`` is the entry point (``python -m ddp_smoke``, the ``ddp-smoke`` script).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

from ddp_smoke import __version__, accept, batch, launch, modes
from ddp_smoke.launch import (
    CHECK_GROUPS,
    DEFAULT_MEASURE,
    MEASURE_GROUPS,
    MODES,
    MeasureOptions,
    RunOptions,
    parse_groups,
)
from ddp_smoke.report import render, report, write_json_atomic

DEFAULT_TIMEOUT_S = 120.0
DEFAULT_SWEEP = "4K:64M"
NPROC_HELP = (
    "workers on this node (spawn, torchrun): N, or auto (the default): SLURM_GPUS_ON_NODE, "
    "else the entries of CUDA_VISIBLE_DEVICES, else 1"
)
# --sweep-sizes: binary units, so 4K is 4096 bytes.
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
_SIZE = re.compile(r"(\d+)\s*([KMG]?)(?:i?B)?", re.IGNORECASE)


def parse_size(text: str) -> int:
    """``"4K"``, ``"64MiB"``, ``"1G"`` or ``"4096"`` as a byte count (binary units)."""
    match = _SIZE.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a size like 4096, 4K, 64M or 1G")
    value = int(match.group(1)) * _UNITS[match.group(2).upper()]
    if value < 1:
        raise ValueError(f"size {text!r} is zero")
    return value


def sweep_sizes(low: int, high: int, factor: int) -> list[int]:
    """``low, low*factor, ...`` up to and including ``high`` when it is on the grid."""
    if low < 1 or high < low or factor < 2:
        raise ValueError(f"bad sweep {low}:{high} factor {factor}: need 1 <= MIN <= MAX, factor 2+")
    sizes = [low]
    while sizes[-1] * factor <= high:
        sizes.append(sizes[-1] * factor)
    return sizes


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer")
    return value


def _nproc(text: str) -> int | None:
    """``--nproc-per-node``: a positive integer, or ``auto`` (``None``: ``launch.gpus_on_node``)."""
    if text.strip().lower() == "auto":
        return None
    try:
        return _positive_int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer or auto") from None


def _epochs(text: str) -> int:
    value = int(text)
    if value < 2:
        raise argparse.ArgumentTypeError("need 2 or more epochs to see the loss decrease")
    return value


def _port(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a TCP port")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    return value


def _ratio(text: str) -> float:
    value = float(text)
    if not value >= 1:
        raise argparse.ArgumentTypeError(f"{text} is not a ratio of 1 or more")
    return value


def _factor(text: str) -> int:
    value = int(text)
    if value < 2:
        raise argparse.ArgumentTypeError(f"{value} is not a growth factor of 2 or more")
    return value


def _groups(known: tuple[str, ...], what: str) -> Callable[[str], frozenset[str]]:
    def parse(text: str) -> frozenset[str]:
        try:
            return parse_groups(text, known, what)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def _sweep(text: str) -> tuple[int, int]:
    low, sep, high = text.partition(":")
    try:
        if not sep:
            raise ValueError("expected MIN:MAX, e.g. 4K:64M")
        return parse_size(low), parse_size(high)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_run(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    run_cmd = commands.add_parser("run", help="run this rank's checks (launch with srun)")
    run_cmd.add_argument("--result-dir", type=Path, required=True, help="shared output directory")
    run_cmd.add_argument("--expected-world-size", type=_positive_int, default=None)
    run_cmd.add_argument("--epochs", type=_epochs, default=3)
    run_cmd.add_argument(
        "--timeout",
        type=_positive_float,
        default=DEFAULT_TIMEOUT_S,
        help="seconds for rendezvous and each collective",
    )
    run_cmd.add_argument("--master-port", type=_port, default=None)
    run_cmd.add_argument("--seed", type=int, default=1234)
    run_cmd.add_argument("--mode", choices=MODES, default="srun")
    run_cmd.add_argument("--label", default="", help="name in reports and plots (default: mode)")
    run_cmd.add_argument(
        "--checks",
        type=_groups(CHECK_GROUPS, "check group"),
        default=frozenset(CHECK_GROUPS),
        help=f"all, none or some of {','.join(CHECK_GROUPS)} (default all)",
    )
    run_cmd.add_argument(
        "--measure",
        type=_groups(MEASURE_GROUPS, "measurement"),
        default=None,
        help=f"all, none or some of {','.join(MEASURE_GROUPS)} (default: all in srun mode)",
    )
    run_cmd.add_argument("--iface", default=None, help="sets GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME")
    run_cmd.add_argument("--nproc-per-node", type=_nproc, default=None, help=NPROC_HELP)
    run_cmd.add_argument("--rdzv-dir", type=Path, default=None, help="spawn mode, shared")
    _add_measure_options(run_cmd)


def _add_measure_options(run_cmd: argparse.ArgumentParser) -> None:
    run_cmd.add_argument("--sweep-sizes", type=_sweep, default=_sweep(DEFAULT_SWEEP))
    run_cmd.add_argument("--sweep-factor", type=_factor, default=4)
    run_cmd.add_argument("--sweep-iters", type=_positive_int, default=None)
    run_cmd.add_argument("--tcp-mib", type=_positive_int, default=64)
    run_cmd.add_argument("--bench-steps", type=_positive_int, default=20)
    run_cmd.add_argument("--straggler-ratio", type=_ratio, default=1.5)
    run_cmd.add_argument("--min-busbw-gbps", type=_positive_float, default=None)
    run_cmd.add_argument("--max-straggler-ratio", type=_ratio, default=None)


def _add_torchrun(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    for name, text in (
        ("torchrun-args", "print torchrun's options for this node (inside srun)"),
        ("torchrun", "exec torchrun for this node: ... torchrun [OPTIONS] -- RUN_OPTIONS"),
    ):
        cmd = commands.add_parser(name, help=text)
        cmd.add_argument("--nproc-per-node", type=_nproc, default=None, help=NPROC_HELP)
        cmd.add_argument("--rdzv-port", type=_port, default=None)
        if name == "torchrun-args":
            cmd.add_argument("--timeout", type=_positive_float, default=DEFAULT_TIMEOUT_S)
            cmd.add_argument("--json", action="store_true", help="print a JSON list")
        else:
            cmd.add_argument("--dry-run", action="store_true", help="print, do not exec")
            cmd.add_argument("run_args", nargs="*", help="options for run --mode torchrun")


def _node_list(text: str) -> tuple[str, ...]:
    """``a,b,c`` or a Slurm host list (``node[1-3]``); empty text is no nodes."""
    if not text.strip():
        return ()
    try:
        return tuple(launch.expand_hostlist(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a number of 0 or more")
    return value


def _add_accept(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    limits = accept.Limits()
    cmd = commands.add_parser(
        "accept", help="judge a partition's run per node against the history, then append it"
    )
    cmd.add_argument("reports", type=Path, nargs="+", help="report --out files, one per mode")
    cmd.add_argument("--nodes", type=_node_list, required=True, help="the job's nodes: a,b,c")
    cmd.add_argument("--pending", type=_node_list, default=(), help="nodes awaiting acceptance")
    cmd.add_argument("--history", type=Path, required=True, help="JSON-lines file, appended")
    cmd.add_argument("--run-id", default=None, help="stored in the history line")
    cmd.add_argument("--partition", default=None, help="stored in the history line")
    cmd.add_argument(
        "--max-slowdown",
        type=_non_negative_float,
        default=limits.max_slowdown,
        help=f"fail a node this much slower than its baseline (default {limits.max_slowdown})",
    )
    cmd.add_argument(
        "--min-history",
        type=_positive_int,
        default=limits.min_history,
        help=f"passing past values needed to compare (default {limits.min_history})",
    )
    cmd.add_argument(
        "--window",
        type=_positive_int,
        default=limits.window,
        help=f"baseline = median of the last K passing values (default {limits.window})",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ddp_smoke", description=__doc__, allow_abbrev=False)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    _add_run(commands)
    report_cmd = commands.add_parser("report", help="judge the rank files of a finished job")
    report_cmd.add_argument("result_dir", type=Path)
    report_cmd.add_argument("--expected-world-size", type=_positive_int, default=None)
    report_cmd.add_argument(
        "--format",
        choices=("json", "text", "text+json"),
        default="json",
        help="text+json: the text, then one line with the JSON (one call gives both)",
    )
    report_cmd.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    _add_torchrun(commands)
    plot_cmd = commands.add_parser("plot", help="PNG of one or more reports (needs matplotlib)")
    plot_cmd.add_argument("reports", type=Path, nargs="+")
    plot_cmd.add_argument("--out", type=Path, required=True)
    _add_accept(commands)
    commands.add_parser(
        "modes",
        help="run launch modes one after another and judge each (plan as JSON on stdin)",
    )
    sbatch_cmd = commands.add_parser(
        "sbatch", help="submit a batch script, wait for its end, exit with its exit code"
    )
    sbatch_cmd.add_argument("script")
    sbatch_cmd.add_argument("--poll", type=_positive_float, default=1.0, help="seconds")
    sbatch_cmd.add_argument(
        "--start-timeout",
        type=float,
        default=0,
        help="cancel the job when still PENDING after this many seconds (0: wait)",
    )
    return parser


def _report(args: argparse.Namespace) -> int:
    verdict = report(args.result_dir, args.expected_world_size)
    body = verdict.to_dict()
    if args.out is not None:
        write_json_atomic(args.out, body)
    if args.format in ("text", "text+json"):
        print(render(body))
    if args.format in ("json", "text+json"):
        print(json.dumps(body, sort_keys=True))
    if verdict.passed:
        return 0
    lines = "\n".join(f"  - {cause}" for cause in verdict.causes)
    print(f"ddp_smoke report: FAIL for {args.result_dir}\n{lines}", file=sys.stderr)
    return 1


def _accept(args: argparse.Namespace) -> int:
    """0 if every node passed, 1 if one failed, 2 on bad input (nothing appended)."""
    job = accept.Job(nodes=args.nodes, pending=args.pending)
    problems = job.problems()
    if problems:
        print(f"ddp_smoke accept: bad input: {'; '.join(problems)}", file=sys.stderr)
        return 2
    history, warnings = accept.read_history(args.history)
    for warning in warnings:
        print(f"ddp_smoke accept: warning: {warning}", file=sys.stderr)
    limits = accept.Limits(args.max_slowdown, args.min_history, args.window)
    reports = [accept.read_report(path) for path in args.reports]
    result = accept.accept(reports, job, history, limits)
    accept.append_history(args.history, accept.history_entry(result, args.run_id, args.partition))
    print(json.dumps(result.to_dict(), sort_keys=True))
    if result.passed:
        return 0
    failed = [node for node in job.nodes if result.blamed(node)]
    lines = "\n".join(f"  - {finding.line}" for finding in result.findings)
    print(f"ddp_smoke accept: FAIL for {', '.join(failed)}\n{lines}", file=sys.stderr)
    return 1


def _torchrun_args(args: argparse.Namespace) -> int:
    try:
        options = launch.torchrun_options(
            dict(os.environ), args.nproc_per_node, args.rdzv_port, args.timeout
        )
    except ValueError as exc:
        print(f"ddp_smoke: cannot start: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(options) if args.json else launch.shell_line(options))
    return 0


def _torchrun(args: argparse.Namespace) -> int:
    run_args = build_parser().parse_args(["run", *args.run_args])
    try:
        options = launch.torchrun_options(
            dict(os.environ), args.nproc_per_node, args.rdzv_port, run_args.timeout
        )
    except ValueError as exc:
        print(f"ddp_smoke: cannot start: {exc}", file=sys.stderr)
        return 1
    argv = launch.torchrun_argv(options, list(args.run_args))
    if args.dry_run:
        print(launch.shell_line(argv))
        return 0
    os.execv(argv[0], argv)  # the srun task becomes the torchrun agent


def _plot(args: argparse.Namespace) -> int:
    from ddp_smoke.report import plot_reports  # matplotlib only inside, and only if installed

    outcome = plot_reports(args.reports, args.out)
    print(json.dumps(outcome, sort_keys=True))
    return 0 if outcome.get("error") is None else 1


def run_options(args: argparse.Namespace) -> RunOptions:
    measure = args.measure if args.measure is not None else frozenset(DEFAULT_MEASURE[args.mode])
    low, high = args.sweep_sizes
    return RunOptions(
        result_dir=args.result_dir,
        expected_world_size=args.expected_world_size,
        epochs=args.epochs,
        timeout_s=args.timeout,
        master_port=args.master_port,
        seed=args.seed,
        mode=args.mode,
        label=args.label,
        checks=args.checks,
        iface=args.iface,
        nproc_per_node=args.nproc_per_node,
        rdzv_dir=args.rdzv_dir,
        measure=MeasureOptions(
            groups=measure,
            sweep_sizes=tuple(sweep_sizes(low, high, args.sweep_factor)),
            sweep_iters=args.sweep_iters,
            tcp_bytes=args.tcp_mib << 20,
            bench_steps=args.bench_steps,
            straggler_ratio=args.straggler_ratio,
            min_busbw_gbps=args.min_busbw_gbps,
            max_straggler_ratio=args.max_straggler_ratio,
        ),
    )


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    commands = {
        "report": _report,
        "torchrun-args": _torchrun_args,
        "torchrun": _torchrun,
        "plot": _plot,
        "accept": _accept,
        "sbatch": lambda a: batch.main(a.script, a.poll, a.start_timeout),
        "modes": lambda _: modes.main(),
    }
    if args.command in commands:
        return commands[args.command](args)
    try:
        options = run_options(args)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        env = launch.select_interface(options.iface, dict(os.environ))
        target = launch.resolve(options, env)
    except ValueError as exc:
        print(f"ddp_smoke: cannot start: {exc}", file=sys.stderr)
        return 1
    # torch is imported only now, for a run that can start: `report` runs with
    # the system Python on the controller, which has no torch.
    from ddp_smoke.rank import start

    return start(target, options, env)
