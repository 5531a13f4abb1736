#!/usr/bin/env python3
"""Write the cluster report: one self-contained HTML page from a cluster's results folder.

    python tools/cluster_report.py [--cluster NAME | --results DIR] [--out FILE]
                                   [--bench bench] [--prom FILE]

Each cluster keeps its results in results/<cluster_name>/ (cluster_results_dir);
--cluster NAME picks one, and with neither option the one cluster under
results/ is taken. The page (default <results folder>/cluster-report.html)
opens from a file with no server and no network. --prom also writes the
verdict metrics (the doctor's, the smoke job's, the acceptance gate's) in
Prometheus' text format. The playbooks write the same page through the
lookup gpulab.slurm_cluster.cluster_report.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "collections"))

from ansible_collections.gpulab.slurm_cluster.plugins.plugin_utils import (  # noqa: E402
    cluster_report,
)


def clusters(results: Path) -> list[str]:
    """The clusters with results under results/ (a folder with a doctor report or a history)."""
    found = []
    for folder in sorted(p for p in results.glob("*") if p.is_dir()):
        if any(folder.glob("doctor-*.json")) or (folder / "history.jsonl").is_file():
            found.append(folder.name)
    return found


def results_folder(cluster: str | None, results: str | None) -> Path:
    """The results folder the options name; SystemExit naming the choices where unclear."""
    if results:
        return Path(results)
    if cluster:
        return ROOT / "results" / cluster
    found = clusters(ROOT / "results")
    if len(found) == 1:
        return ROOT / "results" / found[0]
    raise SystemExit(
        f"{ROOT / 'results'}: "
        + (
            f"results of {len(found)} clusters ({', '.join(found)})"
            if found
            else "no cluster's results"
        )
        + "; name one with --cluster NAME (its cluster_name) or --results DIR"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cluster", default=None, help="the cluster's name: results/NAME")
    p.add_argument("--results", default=None, help="the results folder (instead of --cluster)")
    p.add_argument("--out", default=None, help="HTML file (default RESULTS/cluster-report.html)")
    p.add_argument("--bench", default=None, help="bench folder with PNG charts and results/*.json")
    p.add_argument("--prom", default=None, help="also write the verdict metrics here")
    args = p.parse_args(argv)
    path, metrics = cluster_report.write(
        results_folder(args.cluster, args.results), args.out, args.bench
    )
    if args.prom:
        Path(args.prom).write_text(metrics, encoding="utf-8")
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
