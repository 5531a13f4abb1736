"""DDP smoke test for a Slurm GPU cluster.

Run one process per rank with ``srun ... ddp-smoke run --result-dir DIR`` (or
``python -m ddp_smoke run``; one per node in the torchrun and spawn modes), judge the
per-rank results with ``ddp-smoke report DIR`` and draw them with ``ddp-smoke plot``.
"""

__all__ = ["__version__"]

# The one version: pyproject.toml reads it (setuptools dynamic), ``ddp-smoke --version``
# prints it.
__version__ = "0.1.0"
