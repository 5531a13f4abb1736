"""Command line: ``python -m ddp_smoke run ...`` on every rank, ``report DIR`` once after."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from ddp_smoke.report import report


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer")
    return value


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


def _timeout(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number of seconds")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ddp_smoke", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    run_cmd = commands.add_parser("run", help="run this rank's checks (launch with srun)")
    run_cmd.add_argument("--result-dir", type=Path, required=True, help="shared output directory")
    run_cmd.add_argument("--expected-world-size", type=_positive_int, default=None)
    run_cmd.add_argument("--epochs", type=_epochs, default=3)
    run_cmd.add_argument(
        "--timeout", type=_timeout, default=120.0, help="seconds for rendezvous and each collective"
    )
    run_cmd.add_argument("--master-port", type=_port, default=None)
    run_cmd.add_argument("--seed", type=int, default=1234)
    report_cmd = commands.add_parser("report", help="judge the rank files of a finished job")
    report_cmd.add_argument("result_dir", type=Path)
    report_cmd.add_argument("--expected-world-size", type=_positive_int, default=None)
    return parser


def _report(result_dir: Path, expected: int | None) -> int:
    verdict = report(result_dir, expected)
    print(json.dumps(verdict.to_dict(), sort_keys=True))
    if verdict.passed:
        return 0
    lines = "\n".join(f"  - {cause}" for cause in verdict.causes)
    print(f"ddp_smoke report: FAIL for {result_dir}\n{lines}", file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "report":
        return _report(args.result_dir, args.expected_world_size)
    # torch is imported only for `run`: `report` runs with the system Python
    # on the controller, which has no torch.
    from ddp_smoke.runner import RunOptions, run

    options = RunOptions(
        result_dir=args.result_dir,
        expected_world_size=args.expected_world_size,
        epochs=args.epochs,
        timeout_s=args.timeout,
        master_port=args.master_port,
        seed=args.seed,
    )
    return run(options, dict(os.environ))


if __name__ == "__main__":
    sys.exit(main())
