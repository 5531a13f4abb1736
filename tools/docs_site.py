"""The collection's documentation site (`make docs`) and its completeness check (`make lint`).

check: every plugin the collection defines has documentation that ansible-doc
reads (each filter name that a FilterModule returns, each lookup, module and
strategy file), every role has meta/argument_specs.yml that ansible-doc lists,
and every playbook (the checkout's *.yml entry points and playbooks/*.yml)
opens with a comment that says what it does. Each gap is named with its file.

build: check, then antsibull-docs (the tool Ansible collections build their
docs with) writes the collection's pages (roles with their argument specs,
modules, filters, lookups, the strategy) from the collection itself, a page of
the playbooks is made from their opening comments, and sphinx-build -W turns
them into HTML in build/docs/html, offline: no intersphinx, no download.

    python tools/docs_site.py check
    python tools/docs_site.py build [--out build/docs]
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
COLLECTION = "gpulab.slurm_cluster"
BIN = Path(sys.executable).parent
KINDS = {"lookup": "lookup", "modules": "module", "strategy": "strategy"}


def env(root: Path = ROOT) -> dict[str, str]:
    return dict(
        os.environ,
        ANSIBLE_COLLECTIONS_PATH=str(root / "collections"),
        PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        ANSIBLE_NOCOLOR="1",
    )


def documented(kind: str, root: Path = ROOT) -> set[str]:
    """Short names of the collection's plugins of this kind that ansible-doc lists."""
    out = subprocess.run(
        [str(BIN / "ansible-doc"), "-t", kind, "-l", COLLECTION, "--json"],
        env=env(root),
        capture_output=True,
        text=True,
        check=True,
    )
    listed = json.loads(out.stdout or "{}")
    # ansible-doc lists a plugin without documentation too, as "UNDOCUMENTED".
    return {name.rsplit(".", 1)[-1] for name, short in listed.items() if short != "UNDOCUMENTED"}


def filter_names(path: Path) -> list[str]:
    """The names a filter file's FilterModule.filters() returns: the string keys of
    the dict literals in it (returned, or wrapped by a comprehension)."""
    tree = ast.parse(path.read_text())
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "filters":
            for literal in ast.walk(node):
                if isinstance(literal, ast.Dict):
                    names += [k.value for k in literal.keys if isinstance(k, ast.Constant)]
    return names


def playbooks(root: Path = ROOT) -> list[Path]:
    top = [p for p in sorted(root.glob("*.yml")) if "import_playbook" in p.read_text()]
    return top + sorted((root / "playbooks").glob("*.yml"))


def opening_comment(path: Path) -> str:
    """The comment lines a playbook opens with (after ---), joined."""
    lines = []
    for line in path.read_text().splitlines():
        if line.strip() == "---" and not lines:
            continue
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    return " ".join(lines).strip()


def gaps(root: Path = ROOT) -> list[str]:
    found = []
    names = documented("filter", root)
    for path in sorted((root / "plugins" / "filter").glob("*.py")):
        for name in filter_names(path):
            if name not in names:
                found.append(
                    f"{path.relative_to(root)}: filter {name} has no documentation "
                    f"(fix: plugins/filter/{name}.yml)"
                )
    for folder, kind in KINDS.items():
        names = documented(kind, root)
        for path in sorted((root / "plugins" / folder).glob("*.py")):
            if path.stem != "__init__" and path.stem not in names:
                found.append(
                    f"{path.relative_to(root)}: {kind} {path.stem} has no documentation "
                    "ansible-doc reads (fix: its DOCUMENTATION string)"
                )
    roles = documented("role", root)
    for role in sorted(p for p in (root / "roles").iterdir() if p.is_dir()):
        if role.name not in roles:
            found.append(
                f"roles/{role.name}: no documented entry point "
                "(fix: meta/argument_specs.yml with short_description and options)"
            )
    for spec_file in sorted((root / "roles").glob("*/meta/argument_specs.yml")):
        role = spec_file.parts[-3]
        specs = (yaml.safe_load(spec_file.read_text()) or {}).get("argument_specs") or {}
        for entry, spec in specs.items():
            if not spec.get("short_description"):
                found.append(f"roles/{role}: entry point {entry} has no short_description")
            for option, doc in (spec.get("options") or {}).items():
                if not doc.get("description"):
                    found.append(f"roles/{role}: {entry} option {option} has no description")
    for path in playbooks(root):
        if len(opening_comment(path)) < 20:
            found.append(
                f"{path.relative_to(root)}: no opening comment saying what the playbook does"
            )
    return found


def playbooks_page() -> str:
    title = "Playbooks"
    out = [title, "=" * len(title), ""]
    out.append(
        "The checkout's entry points import the collection's playbooks; once the "
        f"collection is installed, each ``playbooks/NAME.yml`` is ``{COLLECTION}.NAME``."
    )
    out.append("")
    for path in playbooks():
        name = str(path.relative_to(ROOT))
        out += [f"``{name}``", "-" * (len(name) + 4), "", opening_comment(path), ""]
    return "\n".join(out) + "\n"


INDEX = """gpulab.slurm_cluster
====================

A verified Slurm training cluster from an Ansible inventory: munge or
auth/slurm, configless Slurm with accounting, a login host, NFS, the CUDA
driver and PyTorch matched to it, and a real PyTorch DDP job that proves it.
These pages are built from the collection itself (``make docs``): its roles
with their argument specs, its modules, filters, lookups and strategy, and
its playbooks. The guide is the repository's README.md.

.. toctree::
   :maxdepth: 2

   collections/gpulab/slurm_cluster/index
   playbooks
   elsewhere
"""

# What antsibull-docs' pages point to in Ansible's own documentation. Built
# offline there is no intersphinx: each target gets a label here, with the
# address of the page it stands for. A target not listed fails the build.
ELSEWHERE = {
    "common_return_values": (
        "Return values common to all modules",
        "https://docs.ansible.com/ansible/latest/reference_appendices/common_return_values.html",
    ),
    "list_of_collections": (
        "Collections in Ansible's documentation",
        "https://docs.ansible.com/ansible/latest/collections/index.html",
    ),
    "ansible_collections.ansible.builtin.stat_module": (
        "ansible.builtin.stat",
        "https://docs.ansible.com/ansible/latest/collections/ansible/builtin/stat_module.html",
    ),
}
ELSEWHERE_ENV = {
    "ANSIBLE_STRATEGY": "https://docs.ansible.com/ansible/latest/reference_appendices/config.html"
}


def elsewhere_page() -> str:
    title = "In Ansible's documentation"
    out = [title, "=" * len(title), ""]
    out.append("Pages of Ansible's own documentation these pages refer to (not built here).")
    out.append("")
    for label, (name, url) in ELSEWHERE.items():
        out += [f".. _{label}:", "", name, "-" * len(name), "", url, ""]
    for var, url in ELSEWHERE_ENV.items():
        out += [f".. envvar:: {var}", "", f"   {url}", ""]
    return "\n".join(out) + "\n"


CONF = """project = "gpulab.slurm_cluster"
copyright = "slurm-cluster-in-a-box contributors"
extensions = ["sphinx_antsibull_ext"]
html_theme = "sphinx_ansible_theme"
html_theme_options = {"collapse_navigation": False}
html_show_sphinx = False
exclude_patterns = ["collections/index*.rst", "collections/environment_variables.rst",
                    "collections/deprecations.rst", "collections/callback_index_*.rst"]
suppress_warnings = ["toc.not_included"]
"""


def build(out: Path) -> int:
    problems = gaps()
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        return 1
    rst, html = out / "rst", out / "html"
    shutil.rmtree(out, ignore_errors=True)
    rst.mkdir(parents=True)
    subprocess.run(
        [str(BIN / "antsibull-docs"), "collection", "--use-current", "--fail-on-error",
         "--no-indexes", "--dest-dir", str(rst), COLLECTION],
        env=env(),
        check=True,
    )  # fmt: skip
    (rst / "index.rst").write_text(INDEX)
    (rst / "conf.py").write_text(CONF)
    (rst / "playbooks.rst").write_text(playbooks_page())
    (rst / "elsewhere.rst").write_text(elsewhere_page())
    subprocess.run(
        [str(BIN / "sphinx-build"), "-W", "--keep-going", "-q", "-b", "html", str(rst), str(html)],
        env=env(),
        check=True,
    )
    pages = sorted(html.rglob("*.html"))
    print(f"docs: {len(pages)} pages in {html} (open {html / 'index.html'})")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["check", "build"])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "docs")
    args = parser.parse_args(argv)
    if args.action == "build":
        return build(args.out)
    problems = gaps()
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
