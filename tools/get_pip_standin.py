"""Stand-in for the get-pip bootstrap script that `ansible-test --venv` downloads.

ansible-test bootstraps pip into each empty venv it makes by running a get-pip
script, which it fetches once from a host this project cannot reach and keeps
as ~/.ansible/test/cache/get_pip_<version>.py. tools/sanity.py puts this file
there instead (only where no such script is cached yet). It is called as
get-pip is: `python get_pip.py [pip options] pip==X.Y [--no-setuptools] [--no-wheel]`.

It installs the pip that Python itself ships (ensurepip, no network), then
lets that pip install the requested packages (pip==24.2) from the package
index that pip is configured with, the same index as every other install.
"""

from __future__ import annotations

import subprocess
import sys

# Marks the file as this stand-in, so that tools/sanity.py may replace an older copy.
STANDIN = "gpulab.slurm_cluster get-pip stand-in"
GET_PIP_ONLY = {"--no-setuptools", "--no-wheel"}


def main(argv: list[str]) -> int:
    args = [arg for arg in argv if arg not in GET_PIP_ONLY]
    subprocess.run([sys.executable, "-m", "ensurepip", "--default-pip"], check=True)
    return subprocess.run([sys.executable, "-m", "pip", "install", *args], check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
