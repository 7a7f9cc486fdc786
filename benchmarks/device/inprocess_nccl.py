#!/usr/bin/env python3
"""`fleetctl run`'s in-process restart on NCCL (issue 25), for a GPU machine. Prints JSON.

    .venv/bin/python benchmarks/device/inprocess_nccl.py [--size-mb 1024] [--cycles 5] [--steps 300]

What one GPU can measure (always run):
- replica capture: the clone of a model's and its optimizer's state from GPU to host memory that the
  training loop waits for at each replica (`recovery.resilient._clone`), against a forward/backward of
  the same model: GB/s and the share of an iteration;
- communicator restart: a one-rank NCCL group created, aborted (`_abort_process_group`, what a
  survivor's heartbeat thread does when a rank is lost) and created again: seconds per cycle.
What needs one GPU per rank (run when the machine has 3 or more; NCCL refuses two ranks on one GPU):
- the lab's kill test on NCCL: N - 1 training ranks + 1 standby under `fleetctl run` launchers on this
  machine (tests/integration/runutil.py), rank 1 SIGKILLed at iteration 40; the standby takes it, the
  survivors' stuck collective is aborted through `trouble/<gen>`; the run must finish, its parameters
  compared with an uninterrupted NCCL run (the ring's order can change with the GPUs: equal within
  rounding, reported as the largest difference, not required bit-identical).

Exit status: 0 measured (and the kill test passed where it ran), 1 a check failed, 2 no CUDA GPU or
no CUDA torch.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "integration"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def replica_capture(torch, size_mb: int, repeats: int = 5) -> dict:
    from fleetctl.recovery.resilient import _clone

    width = 4096
    layers = max(1, int(size_mb * 2 ** 20 / 4 / (width * width)))
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False) for _ in range(layers)]).cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    x = torch.randn(64, width, device="cuda")

    def iteration():
        model(x).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    iteration()  # Adam's state exists from here on
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(repeats):
        iteration()
    torch.cuda.synchronize()
    per_iteration = (time.perf_counter() - t0) / repeats
    state = {"model": model.state_dict(), "optim": optimizer.state_dict()}
    nbytes = sum(t.numel() * t.element_size() for t in _tensors(torch, state))
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        copy = _clone(state)
        times.append(time.perf_counter() - t0)
        del copy
    capture = sorted(times)[len(times) // 2]
    return {"state_bytes": nbytes, "layers": layers, "iteration_s": round(per_iteration, 5),
            "capture_s_p50": round(capture, 5), "capture_gb_s": round(nbytes / capture / 1e9, 2),
            "capture_share_of_iteration_at_every_1": round(capture / per_iteration, 3)}


def _tensors(torch, value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(torch, v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(torch, v)


def communicator_restart(torch, cycles: int) -> dict:
    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", free_port(), None, True, datetime.timedelta(seconds=30),
                          wait_for_workers=False)
    os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "2")
    device = torch.device("cuda", 0)
    out = []
    for gen in range(cycles):
        t0 = time.perf_counter()
        dist.init_process_group("nccl", store=dist.PrefixStore(f"pg/{gen}", store), rank=0, world_size=1,
                                timeout=datetime.timedelta(seconds=30), device_id=device)
        t = torch.ones(1 << 20, device=device)
        dist.all_reduce(t)
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        dist.distributed_c10d._abort_process_group()
        t2 = time.perf_counter()
        out.append({"init_and_first_allreduce_s": round(t1 - t0, 4), "abort_s": round(t2 - t1, 4)})
    return {"cycles": out}


def kill_test(gpus: int, steps: int, work: Path) -> dict:
    from runutil import kill_when, launch, wait_all

    tasks = gpus
    ref = work / "reference"
    assert wait_all(launch(ref, tasks - 1, 0, steps, sleep=0.01, train_args=("--backend", "nccl")),
                    timeout=600) == [0] * (tasks - 1)
    out = work / "kill"
    procs = launch(out, tasks, 1, steps, sleep=0.01, train_args=("--backend", "nccl"))
    t_kill = time.time()
    kill_when(out, 1, 40)
    codes = wait_all(procs, timeout=600)
    final = json.loads((out / "final.json").read_text()) if (out / "final.json").exists() else {}
    expected = json.loads((ref / "final.json").read_text())
    log = (out / "launcher-0.log").read_text(errors="replace") if (out / "launcher-0.log").exists() else ""
    return {"tasks": tasks, "exit_codes": codes, "finished": final.get("end") == "done",
            "bit_identical": final.get("sha256") == expected.get("sha256"),
            "generations": [line.split("fleetctl run: ", 1)[1] for line in log.splitlines()
                            if "fleetctl run: generation" in line],
            "kill_at": t_kill, "ok": codes == [0] * tasks and final.get("end") == "done"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024, help="model parameters, MB (fp32)")
    parser.add_argument("--cycles", type=int, default=5)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--work", default="/tmp/fleetctl-inprocess-nccl")
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print(json.dumps({"error": "no torch"}))
        return 2
    if not torch.cuda.is_available():
        print(json.dumps({"error": "no CUDA GPU visible to torch", "torch": torch.__version__}))
        return 2
    out = {"benchmark": "inprocess_nccl", "when": time.strftime("%Y-%m-%d"), "torch": torch.__version__,
           "gpu": torch.cuda.get_device_name(0), "gpus": torch.cuda.device_count(),
           "nccl": ".".join(map(str, torch.cuda.nccl.version()))}
    out["replica_capture"] = replica_capture(torch, args.size_mb)
    torch.cuda.empty_cache()
    out["communicator_restart"] = communicator_restart(torch, args.cycles)
    ok = True
    if out["gpus"] >= 3:
        work = Path(args.work)
        work.mkdir(parents=True, exist_ok=True)
        out["kill_test"] = kill_test(out["gpus"], args.steps, work)
        ok = out["kill_test"]["ok"]
    else:
        out["kill_test"] = {"skipped": f"{out['gpus']} GPU(s): NCCL needs one GPU per rank, 3 at least "
                                       "(2 training ranks + 1 standby)"}
    print(json.dumps(out, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
