"""Every file, path, variable, make target and link named in the READMEs exists.

A README that names a file that moved (``filter_plugins/cuda.py`` after the
plugins went to ``plugins/filter/``) sends a newcomer nowhere. What is checked,
outside code blocks:

- links ``[text](target)`` that are not URLs or anchors: relative to the README;
- backticked repository paths: a token whose first folder is one of the
  repository's top-level folders, or a relative path ending in a file
  extension; found from the repository's root, the README's folder, a role's
  folder (``meta/argument_specs.yml``) or ``plugins/`` (``module_utils/x.py``);
- backticked ``make <target>``: a target of the Makefile;
- backticked snake_case names (variables, groups, modules, tags): the name
  occurs in the project's code (YAML, Python, templates), so a renamed
  variable is caught. Names of other projects are listed in EXTERNAL.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
THIS = "tests/test_readme_names.py"  # its own made-up names do not count
READMES = [
    ROOT / "README.md",
    *sorted(ROOT.glob("roles/*/README.md")),
    *sorted(ROOT.glob("docs/*.md")),
]
EXTENSIONS = (".py", ".yml", ".yaml", ".j2", ".md", ".json", ".sh", ".cfg", ".toml", ".txt", ".png")
# Named for what they are elsewhere, not in this project.
EXTERNAL = {
    "openhpc_login_only_nodes",  # stackhpc's openhpc role
}


def tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    return out.stdout.split()


def code_words() -> set[str]:
    words: set[str] = set()
    for name in tracked():
        if name.endswith(".md") or name.startswith("changelogs/") or name == THIS:
            continue
        path = ROOT / name
        if path.is_file() and path.stat().st_size < 2_000_000:
            words.update(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", path.read_text(errors="ignore")))
    return words


def make_targets() -> set[str]:
    return set(re.findall(r"^([A-Za-z][\w-]*):", (ROOT / "Makefile").read_text(), re.M))


def prose(text: str) -> str:
    """The text without fenced code blocks (examples, console output)."""
    return re.sub(r"```.*?```", "", text, flags=re.S)


def path_exists(token: str, readme: Path) -> bool:
    bases = [ROOT, readme.parent, ROOT / "plugins", *ROOT.glob("roles/*")]
    return any((base / token).exists() for base in bases)


def is_repo_path(token: str, top: set[str]) -> bool:
    if token.startswith(("/", "~", ".")) or not re.fullmatch(r"[\w.-]+(/[\w.-]+)+/?", token):
        return False
    return token.split("/")[0] in top or token.endswith(EXTENSIONS)


def problems(readme: Path, words: set[str], targets: set[str], top: set[str]) -> list[str]:
    found = []
    text = prose(readme.read_text())
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        target = target.split("#")[0]
        external = target.startswith(("http:", "https:", "mailto:"))
        if target and not external and not (readme.parent / target).exists():
            found.append(f"link {target}")
    for token in (t.strip() for t in re.findall(r"`([^`\n]+)`", text)):
        for target in re.findall(r"\bmake ([a-z][\w-]*)", token):
            if target not in targets:
                found.append(f"make target {target}")
        if is_repo_path(token, top) and not path_exists(token.rstrip("/"), readme):
            found.append(f"path {token}")
        elif (
            re.fullmatch(r"[a-z][a-z0-9]*(_[a-z0-9]+)+", token)
            and token not in words
            and token not in EXTERNAL
        ):
            found.append(f"name {token}")
    return found


@pytest.fixture(scope="module")
def context() -> tuple[set[str], set[str], set[str]]:
    top = {name.split("/")[0] for name in tracked() if "/" in name}
    return code_words(), make_targets(), top


@pytest.mark.parametrize("readme", READMES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_name_in_the_readme_exists(readme: Path, context) -> None:
    words, targets, top = context
    assert problems(readme, words, targets, top) == []


def test_the_check_finds_what_moved(tmp_path: Path, context) -> None:
    words, targets, top = context
    readme = tmp_path / "README.md"
    readme.write_text(
        "See `filter_plugins/cuda.py`, `roles/cuda/README.md`, [x](nowhere.md),\n"
        "[y](https://example.org/a.md), `make demo`, `make docs-site`,\n"
        "`cluster_ssh_adopt`, `cluster_ssh_adopted`, `auth/slurm`.\n"
        "```\nroles/nothing/here.yml\n```\n"
    )
    assert problems(readme, words, targets, top) == [
        "link nowhere.md",
        "path filter_plugins/cuda.py",
        "make target docs-site",
        "name cluster_ssh_adopted",
    ]
