"""DDP smoke test for a Slurm GPU cluster.

Run one process per rank with ``srun ... python -m ddp_smoke run --result-dir DIR``
(or one per node in the torchrun and spawn modes), judge the per-rank results with
``python -m ddp_smoke report DIR`` and draw them with ``python -m ddp_smoke plot``.
"""

__all__ = ["__version__"]

__version__ = "0.2.0"
