"""A small deterministic data-parallel job (gradients averaged over gloo) under `fleetctl run`, for the tests and
benchmarks/recovery_inprocess.py. Same seed, same data: two runs end with bit-identical parameters,
whatever rank was lost and replaced on the way.

Writes into --out: `pid-<slot>` (this process, at start), `restored` (the disk snapshot's iteration,
when a fresh start restored one), `progress` (the newest iteration rank 0 finished, every 5 iterations), and at the
end `final.json` from whichever process is rank 0 (the parameters' SHA-256, its history) and
`rank-<R>.json` from every rank (what the replicas cost it). TRACE=1 in the environment adds
`trace-<R>.txt`: per iteration the parameters' and momentum's digests, the RNG's and the batch's sums.
"""

import argparse
import hashlib
import json
import os
import sys
import time

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from fleetctl.errors import RecoveryError  # noqa: E402
from fleetctl.recovery.resilient import Resilient  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=200)
parser.add_argument("--sleep", type=float, default=0.0, help="seconds added to each iteration")
parser.add_argument("--every", type=lambda v: v if v == "auto" else int(v), default=1, help="K, or auto")
parser.add_argument("--replica-budget", type=float, default=0.05, help="with --every auto: the loop's share for replicas")
parser.add_argument("--state-mb", type=float, default=0.0,
                    help="carry this much more state (a buffer in the model): what a replica copies")
parser.add_argument("--width", type=int, default=64)
parser.add_argument("--reduce", choices=("flat", "ddp"), default="flat",
                    help="flat: job.average_gradients (bit-identical across restarts); ddp: DDP")
parser.add_argument("--snap", help="also take disk snapshots here (the swap + requeue fallback)")
parser.add_argument("--snap-interval", type=float, default=1.0, help="seconds between disk snapshots")
parser.add_argument("--hang", metavar="RANK:IT", help="rank RANK hangs in its own work at iteration IT (first "
                    "generation only): its process and heartbeat live on, its loop never moves again")
parser.add_argument("--backend", choices=("gloo", "nccl"), default="gloo",
                    help="nccl: one GPU per task (LOCAL_RANK); benchmarks/device/inprocess_nccl.py")
parser.add_argument("--out", required=True)
args = parser.parse_args()
torch.set_num_threads(1)
torch.manual_seed(1234)
device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if args.backend == "nccl" else torch.device("cpu")
model = torch.nn.Sequential(torch.nn.Linear(32, args.width), torch.nn.ReLU(), torch.nn.Linear(args.width, 1)).to(device)
if args.state_mb:  # replicated with the parameters, never trained
    model.register_buffer("ballast", torch.zeros(int(args.state_mb * (1 << 20) / 4), device=device))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
position = {"samples": 0}  # a data position, restored like a loader's
with open(os.path.join(args.out, f"pid-{os.environ.get('FLEETCTL_RUN_SLOT', 'x')}"), "w") as f:
    f.write(str(os.getpid()))  # for the tests: the process to kill
job = Resilient(model, optimizer, every=args.every, backend=args.backend, replica_budget=args.replica_budget,
                extra_state={"data": (lambda: dict(position), lambda v: position.update(v))},
                snapshot={"directory": args.snap, "interval_s": args.snap_interval} if args.snap else None)
iteration_times = []


def write(name, text):
    tmp = os.path.join(args.out, f".{name}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, os.path.join(args.out, name))


def train(job):
    if job.start == 0:
        torch.manual_seed(1000 + job.rank)  # each rank's own noise, restored with its state
    elif job.gen == 0 and job.rank == 0:  # a fresh start that restored a disk snapshot (after a requeue)
        write("restored", str(job.start - 1))
    net = DDP(model) if args.reduce == "ddp" else model
    for it in range(job.start, args.steps):
        t0 = time.perf_counter()
        g = torch.Generator().manual_seed(job.rank * 100_003 + it)
        x = torch.randn(16, 32, generator=g)
        x = (x + 0.01 * torch.randn_like(x)).to(device)
        y = x.sum(1, keepdim=True) * 0.1
        loss = torch.nn.functional.mse_loss(net(x), y)
        loss.backward()
        if args.hang and job.gen == 0 and args.hang == f"{job.rank}:{it}":
            while True:  # a deadlock in the rank's own code: only its progress shows it
                time.sleep(1)
        if args.reduce == "flat":
            job.average_gradients(model)
        optimizer.step()
        optimizer.zero_grad()
        position["samples"] += 16
        if args.sleep:
            time.sleep(args.sleep)
        iteration_times.append(time.perf_counter() - t0)
        if os.environ.get("TRACE"):
            with open(os.path.join(args.out, f"trace-{job.rank}.txt"), "a") as f:
                h = hashlib.sha256(b"".join(p.detach().cpu().numpy().tobytes() for p in model.parameters()))
                m = hashlib.sha256(b"".join(v["momentum_buffer"].cpu().numpy().tobytes()
                                            for v in optimizer.state.values()))
                f.write(f"{it} {h.hexdigest()[:10]} {m.hexdigest()[:10]} {torch.get_rng_state().sum().item()} "
                        f"{x.sum().item():.6f}\n")
        job.step(it)
        if job.rank == 0 and it % 5 == 0:
            write("progress", str(it))


try:
    end = job.run(train)
except RecoveryError as exc:  # the run ended unfinished (requeue, abort): one line, no traceback
    sys.exit(f"resilient_train: {exc.message}")
digest = hashlib.sha256(b"".join(p.detach().cpu().numpy().tobytes() for p in model.parameters())).hexdigest()
mean_iteration = sum(iteration_times) / max(1, len(iteration_times))
if job.rank >= 0:  # a standby never needed has no rank
    write(f"rank-{job.rank}.json", json.dumps({
        "rank": job.rank, "slot": job.slot, "sha256": digest, "samples": position["samples"],
        "restarts": job.restarts, "replicas": job.replicas, "push_failures": job.push_failures,
        "blocked_s": job.blocked_s, "waited_s": job.waited_s, "iterations": len(iteration_times),
        "mean_iteration_s": mean_iteration, "cadence": job.cadence.to_dict(), "history": job.history}))
if job.rank == 0:
    write("final.json", json.dumps({"end": end, "sha256": digest, "history": job.history}))
