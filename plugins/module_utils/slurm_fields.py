"""What slurmd -C reports and the names this collection gives it.

Shared by the slurm_node_info module (which parses ``slurmd -C``) and the
slurm_conf filters (which write the NodeName lines from that fact).
"""

from __future__ import annotations

# slurm.conf field -> key in the slurm_node fact.
SLURMD_FIELDS = {
    "CPUs": "cpus",
    "Boards": "boards",
    "SocketsPerBoard": "sockets_per_board",
    "CoresPerSocket": "cores_per_socket",
    "ThreadsPerCore": "threads_per_core",
    "RealMemory": "real_memory",
}
