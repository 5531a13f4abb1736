"""DDP smoke test for a Slurm GPU cluster.

Run one process per rank with ``srun ... python -m ddp_smoke run --result-dir DIR``
and judge the per-rank results with ``python -m ddp_smoke report DIR``.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
