#!/usr/bin/env python3
"""The host preparation of `make demo` (make host) and of `make test`, its
independent steps side by side.

    packages    docker.io and mmdebstrap in one apt-get transaction (hostprep.py)
    docker      dockerd answering                      after packages
    image       the Debian 12 base image               after docker (docker import,
                                                       and its recipe check asks docker)
    venv        .venv with requirements-demo.txt       (make venv-demo)
    wheelhouse  the CPU torch wheel for the nodes      after venv (its pip)

`--for test` (make test) runs the same with the whole venv (make venv) and
adds what the tests need beyond the demo:

    test-packages  qemu and its tools, promtool and chromium, in one apt-get
                   transaction (hostprep.py)           after packages (one dpkg
                                                       lock at a time)
    tools          amtool in the venv (make test-tools) after venv, test-packages
    collection     the collection's tarball (make collection)  after venv

Run one after the other, as make test did before, these steps took 175 s
in a fresh clone (2026-12-06: no venv, no pip cache, no images, the test
packages removed; docker.io installed); side by side 92 s, the downloads of
apt, pip and debootstrap overlapping (mmdebstrap since 2026-12-07).

Each step's output goes to results/<demo|test>-prep/<step>.log and is read only when
the step fails: then the others are interrupted, and the step's name, exit
status and the tail of its log end the run (exit status 1). A step's wall
time is printed when it ends; with --times, one line per step and one for
the whole preparation are added to that file, in the style of
results/make-test-times.txt.

Standard library only: it runs before the venv exists (Makefile: python3).

    python3 tools/demo_prep.py [--for test] [--times results/demo-times.txt]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HOSTPREP = ROOT / "molecule" / "shared" / "hostprep.py"
LOG_DIR = ROOT / "results" / "demo-prep"  # make test's: test-prep beside it
TAIL_LINES = 20
# A fresh machine's slowest step (the image, built with debootstrap at the time)
# took about two minutes; a step past this limit is stuck, not slow.
STEP_LIMIT_S = 900.0
# After an interrupt (SIGINT, as Ctrl-C: mmdebstrap unmounts, Python removes
# its temporary tree), the seconds a step has to end before it is killed.
GRACE_S = 10.0


@dataclass(frozen=True)
class Step:
    name: str
    argv: tuple[str, ...]
    needs: tuple[str, ...] = ()
    limit_s: float = STEP_LIMIT_S


@dataclass(frozen=True)
class Done:
    """A step that ended with status 0: its start and end, seconds from the run's start."""

    name: str
    needs: tuple[str, ...]
    start: float
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


class StepFailed(Exception):
    def __init__(self, name: str, why: str, log: Path, tail: str, done: list[Done]) -> None:
        super().__init__(f"{name} {why}")
        self.name, self.why, self.log, self.tail, self.done = name, why, log, tail, done

    def message(self, target: str = "demo") -> str:
        return (
            f"make {target}: preparation step {self.name} {self.why}; "
            f"the end of {self.log}:\n{self.tail}"
        )


def demo_steps(python: str = sys.executable) -> list[Step]:
    hostprep = (python, str(HOSTPREP))
    venv_python = str(ROOT / ".venv" / "bin" / "python")
    return [
        Step("packages", (*hostprep, "packages")),
        Step("docker", (*hostprep, "docker"), needs=("packages",)),
        Step("image", (*hostprep, "image"), needs=("docker",)),
        Step("venv", ("make", "--no-print-directory", "-C", str(ROOT), "venv-demo")),
        # The venv's pip: Debian's python3 has none without python3-pip.
        Step("wheelhouse", (venv_python, str(HOSTPREP), "wheelhouse"), needs=("venv",)),
    ]


def make_test_steps(python: str = sys.executable) -> list[Step]:
    """make test's: the demo's steps with the whole venv, and what the tests add."""
    make = ("make", "--no-print-directory", "-C", str(ROOT))
    steps = [Step("venv", (*make, "venv")) if s.name == "venv" else s for s in demo_steps(python)]
    return [
        *steps,
        Step("test-packages", (python, str(HOSTPREP), "test-packages"), needs=("packages",)),
        Step("tools", (*make, "test-tools"), needs=("venv", "test-packages")),
        Step("collection", (*make, "collection"), needs=("venv",)),
    ]


def check_order(steps: Sequence[Step]) -> None:
    """Refuse unknown or duplicate names and cycles before anything starts."""
    names = [s.name for s in steps]
    if len(set(names)) != len(names):
        raise ValueError(f"step names repeat: {names}")
    for step in steps:
        unknown = set(step.needs) - set(names)
        if unknown:
            raise ValueError(f"step {step.name} needs unknown steps {sorted(unknown)}")
    ready: set[str] = set()
    left = list(steps)
    while left:
        now = [s for s in left if set(s.needs) <= ready]
        if not now:
            raise ValueError(f"steps wait for each other: {sorted(s.name for s in left)}")
        ready.update(s.name for s in now)
        left = [s for s in left if s not in now]


def tail(path: Path, lines: int = TAIL_LINES) -> str:
    text = path.read_text(errors="replace") if path.is_file() else ""
    return "\n".join(text.splitlines()[-lines:])


def stop(procs: dict[str, subprocess.Popen], grace_s: float = GRACE_S) -> None:
    """Interrupt each step's process group, then kill what is left after grace_s."""
    for proc in procs.values():
        if proc.poll() is None:
            signal_group(proc, signal.SIGINT)
    deadline = time.monotonic() + grace_s
    for proc in procs.values():
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            signal_group(proc, signal.SIGKILL)
            proc.wait()


def signal_group(proc: subprocess.Popen, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):  # the group ended meanwhile
        os.killpg(proc.pid, sig)


def start(step: Step, log_dir: Path, done: list[Done]) -> subprocess.Popen:
    log = log_dir / f"{step.name}.log"
    with log.open("wb") as out:
        try:
            return subprocess.Popen(
                step.argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=ROOT,
                start_new_session=True,  # its own group: stop() reaches its children
            )
        except OSError as exc:
            raise StepFailed(step.name, f"could not start ({exc})", log, "", done) from exc


def say(line: str) -> None:
    print(line, flush=True)  # progress, also when make's output goes to a pipe


def run_steps(
    steps: Sequence[Step],
    log_dir: Path,
    echo: Callable[[str], None] = say,
    poll_s: float = 0.2,
    grace_s: float = GRACE_S,
    label: str = "demo prep",
) -> list[Done]:
    """Run each step once its needs have ended well; the steps in the order they ended."""
    check_order(steps)
    log_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    started: dict[str, float] = {}
    procs: dict[str, subprocess.Popen] = {}
    done: list[Done] = []
    try:
        while len(done) < len(steps):
            ended = {d.name for d in done}
            for step in steps:
                if step.name not in started and set(step.needs) <= ended:
                    after = f" (after {', '.join(step.needs)})" if step.needs else ""
                    echo(f"{label}: {step.name} started{after}")
                    procs[step.name] = start(step, log_dir, done)
                    started[step.name] = time.monotonic() - t0
            time.sleep(poll_s)
            now = time.monotonic() - t0
            for step in steps:
                proc = procs.get(step.name)
                if proc is None or step.name in ended:
                    continue
                rc = proc.poll()
                if rc is None and now - started[step.name] <= step.limit_s:
                    continue
                log = log_dir / f"{step.name}.log"
                if rc is None:
                    stop({step.name: proc}, grace_s)
                    why = f"ran past its limit of {step.limit_s:g} s"
                    raise StepFailed(step.name, why, log, tail(log), done)
                if rc != 0:
                    raise StepFailed(step.name, f"failed (exit status {rc})", log, tail(log), done)
                del procs[step.name]
                done.append(Done(step.name, step.needs, started[step.name], now))
                echo(f"{label}: {step.name} done in {now - started[step.name]:.0f} s")
    finally:
        stop(procs, grace_s)
    return done


def time_lines(
    steps: Sequence[Step],
    done: Sequence[Done],
    total: float,
    failed: str | None = None,
    target: str = "demo",
) -> list[str]:
    """One line for the preparation, then one per step that ended, in the steps' order."""
    by_name = {d.name: d for d in done}
    if failed:
        head = f"make {target}: preparation stopped after {total:.0f} s: {failed} failed"
    else:
        names = ", ".join(s.name for s in steps)
        head = f"make {target}: preparation {total:.0f} s ({names}, side by side where they can)"
    lines = [head]
    for step in steps:
        d = by_name.get(step.name)
        if d is not None:
            after = f"after {', '.join(d.needs)}; " if d.needs else ""
            span = f"{after}{d.start:.0f}-{d.end:.0f} s"
            lines.append(f"make {target}: prep {d.name} {d.seconds:.0f} s ({span})")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--times", type=Path, help="append the wall times to this file")
    parser.add_argument(
        "--for", dest="target", choices=("demo", "test"), default="demo", help="whose preparation"
    )
    args = parser.parse_args(argv)
    # make's SIGTERM ends the steps too (run_steps' finally), as Ctrl-C does.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    steps = demo_steps() if args.target == "demo" else make_test_steps()
    t0 = time.monotonic()
    try:
        done, failure = (
            run_steps(steps, LOG_DIR.with_name(f"{args.target}-prep"), label=f"{args.target} prep"),
            None,
        )
    except StepFailed as exc:
        done, failure = exc.done, exc
    except KeyboardInterrupt:  # Ctrl-C: the steps were interrupted too (run_steps)
        print(f"make {args.target}: preparation interrupted", file=sys.stderr)
        return 130
    failed = failure.name if failure else None
    lines = time_lines(steps, done, time.monotonic() - t0, failed, args.target)
    if args.times:
        args.times.parent.mkdir(parents=True, exist_ok=True)
        with args.times.open("a") as out:
            out.writelines(f"{line}\n" for line in lines)
    print("\n".join(lines), flush=True)
    if failure:
        print(failure.message(args.target), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
