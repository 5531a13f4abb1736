"""A minimal DistributedDataParallel script for the job templates next to it.

It takes its place in the job from torchrun's variables (RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR/PORT) or, under plain srun, from Slurm's
(SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, the first node of
SLURM_JOB_NODELIST). NCCL on GPUs, gloo otherwise. Replace the model and
the data with yours; the setup and teardown stay.
"""

from __future__ import annotations

import gc
import os
import socket
import subprocess

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def from_slurm() -> None:
    """torchrun's variables from Slurm's, when srun started this process directly."""
    if "RANK" in os.environ or "SLURM_PROCID" not in os.environ:
        return
    first = subprocess.run(
        ["scontrol", "show", "hostnames", os.environ["SLURM_JOB_NODELIST"]],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()[0]
    os.environ.update(
        RANK=os.environ["SLURM_PROCID"],
        WORLD_SIZE=os.environ["SLURM_NTASKS"],
        LOCAL_RANK=os.environ["SLURM_LOCALID"],
        MASTER_ADDR=first,
        MASTER_PORT=os.environ.get(
            "MASTER_PORT", str(29500 + int(os.environ["SLURM_JOB_ID"]) % 1000)
        ),
    )


def main() -> None:
    from_slurm()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    gpu = torch.cuda.is_available()
    if gpu:
        torch.cuda.set_device(local)
    dist.init_process_group("nccl" if gpu else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", local) if gpu else torch.device("cpu")
    torch.manual_seed(0)
    model = DistributedDataParallel(
        torch.nn.Linear(16, 1).to(device), device_ids=[local] if gpu else None
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(rank)
    for _step in range(20):
        x = torch.randn(64, 16, generator=gen).to(device)
        loss = ((model(x) - x.sum(dim=1, keepdim=True)) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    total = torch.tensor([1.0], device=device)
    dist.all_reduce(total)
    print(
        f"rank {rank}/{world} on {socket.gethostname()}: loss {loss.item():.4f}, "
        f"all_reduce {int(total.item())}",
        flush=True,
    )
    # Teardown, in this order: every rank reaches the barrier; the DDP model
    # and optimizer go (their reducer holds gloo work objects and tensors);
    # then the process group. A gloo work object still alive when the
    # interpreter exits aborts it ("terminate called without an active
    # exception", exit 134) after all the work is done: see pytorch#179291.
    dist.barrier()
    del model, opt
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
