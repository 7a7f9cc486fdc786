"""A small deterministic DDP training job (gloo, CPU) using fleetctl.snapshot; run by the snapshot tests.

    RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT from the environment (or SLURM_PROCID/SLURM_NTASKS)
    python snapshot_train.py --dir SNAPDIR --steps 40 --out params.pt [--every 7] [--die-at 17]
                             [--die-rank 1] [--exit-after-snapshot 9] [--pace 0.05] [--width 64]

Rank 0 writes the final parameters to --out and its iteration to SNAPDIR/progress after each step.
Randomness from torch (init, dropout, noise), numpy and `random`, and a data-loader position, so that a
restored run is bit-identical only if all of them are restored.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from fleetctl.snapshot import Snapshotter


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--out")
    ap.add_argument("--every", type=int, default=0, help="force a snapshot every N steps")
    ap.add_argument("--die-at", type=int, default=-1)
    ap.add_argument("--die-rank", type=int, default=1)
    ap.add_argument("--exit-after-snapshot", type=int, default=-1,
                    help="rank 0 dies (SIGKILL) right after the snapshot of this step started")
    ap.add_argument("--pace", type=float, default=0.0)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--sync", action="store_true")
    args = ap.parse_args()

    rank = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")))
    world = int(os.environ.get("WORLD_SIZE", os.environ.get("SLURM_NTASKS", "1")))
    if world > 1:
        dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(1234)
    model = torch.nn.Sequential(torch.nn.Linear(16, args.width), torch.nn.ReLU(), torch.nn.Dropout(0.1),
                                torch.nn.Linear(args.width, 4))
    if world > 1:
        model = DistributedDataParallel(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    data_gen = torch.Generator().manual_seed(99)
    data = torch.randn(512, 16, generator=data_gen)
    target = torch.randn(512, 4, generator=data_gen)
    torch.manual_seed(1000 + rank)  # per-rank streams: dropout, noise
    random.seed(2000 + rank)
    np.random.seed(3000 + rank)
    loader = {"pos": 0}
    snap = Snapshotter(model, opt, extra_state={"loader": (lambda: dict(loader), loader.update)},
                       directory=args.dir, keep=3, periodic=False, use_async=not args.sync)
    start = snap.restore()
    first = 0 if start is None else start + 1
    if rank == 0:
        print(f"restored={start}", flush=True)
    for it in range(first, args.steps):
        if it == args.die_at and rank == args.die_rank:
            os.kill(os.getpid(), signal.SIGKILL)
        idx = (loader["pos"] * 8 + rank * 4 + torch.arange(4)) % 512
        loader["pos"] += 1
        x = data[idx] + 0.01 * torch.randn(4, 16)
        scale = 1.0 + 0.01 * random.random() + 0.01 * float(np.random.rand())
        loss = ((model(x) - target[idx]) ** 2).mean() * scale
        opt.zero_grad()
        loss.backward()
        opt.step()
        started = snap.step(it, force=bool(args.every) and it % args.every == args.every - 1)
        if started is not None and it == args.exit_after_snapshot and rank == 0:
            os.kill(os.getpid(), signal.SIGKILL)
        if rank == 0:
            with open(os.path.join(args.dir, ".progress.tmp"), "w") as fh:
                fh.write(str(it))
            os.replace(os.path.join(args.dir, ".progress.tmp"), os.path.join(args.dir, "progress"))
        if args.pace:
            time.sleep(args.pace)
    snap.close()
    if rank == 0 and args.out:
        module = model.module if world > 1 else model
        torch.save({k: v.detach().clone() for k, v in module.state_dict().items()}, args.out)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
