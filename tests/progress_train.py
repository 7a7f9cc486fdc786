"""A small DDP training job (gloo, CPU) that reports each rank's progress with
fleetctl.recovery.Progress; run by tests/integration/test_recovery_lab.py.

    RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT from the environment (or SLURM_PROCID/SLURM_NTASKS),
    FLEETCTL_PROGRESS_DIR for the progress files
    python progress_train.py --steps 100000 [--work 2000] [--slow-file PATH --slow-rank 1 --slow-pct 30]

While --slow-file exists, rank --slow-rank makes its own compute --slow-pct % longer (it sleeps that
share of the time its forward pass took, before the collective): a straggler of a known size.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from fleetctl.recovery.progress import Progress


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100000)
    ap.add_argument("--work", type=int, default=256, help="rows per batch: the compute of one iteration")
    ap.add_argument("--slow-file", default="")
    ap.add_argument("--slow-rank", type=int, default=1)
    ap.add_argument("--slow-pct", type=float, default=30.0)
    args = ap.parse_args()
    rank = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")))
    world = int(os.environ.get("WORLD_SIZE", os.environ.get("SLURM_NTASKS", "1")))
    os.environ.setdefault("RANK", str(rank))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(1)
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                                        torch.nn.Linear(256, 8)))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    data, target = torch.randn(args.work, 64), torch.randn(args.work, 8)
    progress = Progress.from_env(interval_s=0.5)
    slowed = bool(args.slow_file) and rank == args.slow_rank
    for it in range(args.steps):
        began = time.monotonic()
        loss = torch.nn.functional.mse_loss(model(data), target)  # this rank's own work
        if slowed and os.path.exists(args.slow_file):
            time.sleep((time.monotonic() - began) * args.slow_pct / 100.0)
        if progress:
            progress.compute_done()
        opt.zero_grad()
        loss.backward()  # DDP's all-reduce of the gradients: every rank waits for the slowest
        opt.step()
        if progress:
            progress.step(it)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
