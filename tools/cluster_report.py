#!/usr/bin/env python3
"""Write the cluster report: one self-contained HTML page from the results folder.

    python tools/cluster_report.py [--results results] [--out FILE] [--bench bench]
                                   [--prom FILE]

The page (default results/cluster-report.html) opens from a file with no
server and no network. --prom also writes the verdict metrics (the doctor's,
the smoke job's, the acceptance gate's) in Prometheus' text format. The
playbooks write the same page through the lookup gpulab.slurm_cluster.cluster_report.
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", default=str(ROOT / "results"), help="the results folder")
    p.add_argument("--out", default=None, help="HTML file (default RESULTS/cluster-report.html)")
    p.add_argument("--bench", default=None, help="bench folder with PNG charts and results/*.json")
    p.add_argument("--prom", default=None, help="also write the verdict metrics here")
    args = p.parse_args(argv)
    path, metrics = cluster_report.write(args.results, args.out, args.bench)
    if args.prom:
        Path(args.prom).write_text(metrics, encoding="utf-8")
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
