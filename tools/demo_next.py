"""What `make demo` ends with: the verdict, the report, the way in as a lab user.

Read from what the run left and from the inventory, never assumed: the newest
smoke results file in results/<cluster_name>/ (its verdict, modes and nodes),
the cluster report beside it, the first login host (else the controller) and
the first lab user of cluster_users. Exit status 1 when there is no verdict
or it is not PASS, so `make demo` fails with it.

    python tools/demo_next.py [--inventory inventory/local]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def group_vars(inventory: Path) -> dict:
    """Every group_vars file's values, merged (the demo's inventory sets each name once)."""
    merged: dict = {}
    for folder, _, files in sorted(os.walk(inventory / "group_vars", followlinks=True)):
        for name in sorted(files):
            if name.endswith((".yml", ".yaml")):
                doc = yaml.safe_load((Path(folder) / name).read_text())
                if isinstance(doc, dict):
                    merged.update(doc)
    return merged


def group_hosts(inventory: Path, group: str) -> list[str]:
    """The hosts of a group in the inventory's hosts.yml, in order."""

    def walk(node: dict) -> list[str]:
        found = []
        for name, child in (node.get("children") or {}).items():
            child = child or {}
            if name == group:
                found += list((child.get("hosts") or {}).keys())
            found += walk(child)
        return found

    doc = yaml.safe_load((inventory / "hosts.yml").read_text()) or {}
    return walk(doc.get("all") or {})


def shown(path: Path) -> str:
    """A path as the reader in the checkout types it."""
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def newest_verdict(results: Path) -> tuple[Path, dict] | None:
    runs = [p for p in results.glob("*.json") if p.name[:8].isdigit() and "T" in p.name]
    for path in sorted(runs, key=lambda p: p.stat().st_mtime, reverse=True):
        doc = json.loads(path.read_text())
        if "verdict" in doc:
            return path, doc
    return None


def summary(inventory: Path, results_root: Path) -> tuple[int, str]:
    values = group_vars(inventory)
    results = results_root / str(values.get("cluster_name", "cluster"))
    found = newest_verdict(results)
    lines = []
    if found is None:
        return 1, f"No smoke verdict in {results}: run ansible-playbook smoke_train.yml"
    path, doc = found
    modes = ", ".join(sorted({m.get("mode", "?") for m in doc.get("modes", [])}))
    lines.append(f"Verdict: {doc['verdict']} ({modes}), kept in {shown(path)}")
    report = results / "cluster-report.html"
    if report.exists():
        lines.append(f"Report:  {shown(report)} (open it in a browser)")
    users = [u["name"] for u in values.get("cluster_users") or []]
    entry = (group_hosts(inventory, "slurm_login") or group_hosts(inventory, "slurm_controller"))[0]
    if users:
        lines.append(
            f"As a lab user: docker exec -it {entry} su - {users[0]}"
            "   # then: sinfo; sbatch --wrap hostname; squeue; sacct"
        )
    lines.append("Job templates to copy into your folder: /shared/.cluster/examples/")
    return (0 if doc["verdict"] == "PASS" else 1), "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inventory", type=Path, default=ROOT / "inventory" / "local")
    parser.add_argument("--results", type=Path, default=ROOT / "results")
    args = parser.parse_args(argv)
    rc, text = summary(args.inventory, args.results)
    print(text)
    return rc


if __name__ == "__main__":
    sys.exit(main())
