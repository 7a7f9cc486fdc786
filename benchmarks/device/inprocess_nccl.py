#!/usr/bin/env python3
"""`fleetctl run`'s in-process restart on NCCL (issue 25), for a GPU machine. Prints JSON.

    .venv/bin/python benchmarks/device/inprocess_nccl.py [--size-mb 1024] [--cycles 5] [--steps 300]

What one GPU can measure (always run):
- replica capture: the copy of a model's and its optimizer's state from GPU to host memory that the
  training loop waits for at each replica, pageable (`recovery.resilient._clone`, what it was) and
  into reused pinned buffers (`recovery.hostcopy.HostCopier`, what it is), against a
  forward/backward of the same model: GB/s and the share of an iteration;
- communicator restart: a one-rank NCCL group created, aborted (`_abort_process_group`, what a
  survivor's heartbeat thread does when a rank is lost) and created again: seconds per cycle.
The lab's kill test on NCCL: N - 1 training ranks + 1 standby under `fleetctl run` launchers on this
machine (tests/integration/runutil.py), rank 1 SIGKILLed at iteration 40; the standby takes it, the
survivors' stuck collective is aborted through `trouble/<gen>`; the run must finish, its parameters
compared with an uninterrupted NCCL run of the same ranks (reported; bit-identical is not required:
the ring's order can change). With 3 GPUs or more: one GPU per task. With fewer: 3 tasks all on GPU
0, each its own NCCL host (NCCL_HOSTID; NCCL's socket transport on loopback; `one_gpu_env`).
`--harness-check` runs the kill test on gloo, to check this script on a machine without a GPU.

Exit status: 0 measured (and the kill test passed where it ran), 1 a check failed, 2 no CUDA GPU or
no CUDA torch.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "integration"))

from runutil import free_port  # noqa: E402  (tests/integration: the lab tests' launchers)


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
    # what Resilient does now: pinned buffers, reused from one replica to the next
    from fleetctl.recovery.hostcopy import HostCopier

    host, pinned_times = HostCopier(), []
    for _ in range(repeats + 1):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        copy = host.copy(state)
        pinned_times.append(time.perf_counter() - t0)
        host.give_back(copy)
        del copy
    reused = sorted(pinned_times[1:])[len(pinned_times[1:]) // 2]
    return {"state_bytes": nbytes, "layers": layers, "iteration_s": round(per_iteration, 5),
            "pageable_capture_s_p50": round(capture, 5), "pageable_capture_gb_s": round(nbytes / capture / 1e9, 2),
            "pinned_first_capture_s": round(pinned_times[0], 4), "pinned": host.pinned,
            "pinned_capture_s_p50": round(reused, 5), "pinned_capture_gb_s": round(nbytes / reused / 1e9, 2),
            "capture_share_of_iteration_at_every_1": round(reused / per_iteration, 3)}


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


def one_gpu_env(slot: int) -> dict:
    """Every task on GPU 0, each its own NCCL host: NCCL refuses two ranks of one communicator on
    one GPU of one host (its host hash and bus id), and NCCL_HOSTID changes the host hash; with
    shared memory and P2P off, the ranks talk over NCCL's socket transport on loopback, as separate
    nodes would over the network (benchmarks/device/nccl_failover_allreduce.py does the same)."""
    return {"SLURM_LOCALID": "0", "NCCL_HOSTID": f"fleet-inprocess-task{slot}", "NCCL_SOCKET_IFNAME": "lo",
            "NCCL_SHM_DISABLE": "1", "NCCL_P2P_DISABLE": "1", "NCCL_IB_DISABLE": "1"}


def wait_codes(procs, timeout_s: float) -> list:
    """The launchers' exit codes; those still running after `timeout_s` are killed (-9)."""
    from runutil import wait_all

    try:
        return wait_all(procs, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return [p.wait() for p in procs]  # wait_all killed the ones still running


def kill_test(gpus: int, steps: int, work: Path, backend: str = "nccl") -> dict:
    from runutil import kill_when, launch

    shared = backend == "nccl" and gpus < 3
    tasks = 3 if shared or backend != "nccl" else gpus
    slot_env = one_gpu_env if shared else None
    train = ("--backend", backend)
    ref = work / "reference"
    for d in (ref, work / "kill"):
        shutil.rmtree(d, ignore_errors=True)  # an earlier run's final.json must not count
    t0 = time.monotonic()
    ref_codes = wait_codes(launch(ref, tasks - 1, 0, steps, sleep=0.01, train_args=train, slot_env=slot_env), 300)
    ref_s = time.monotonic() - t0
    if ref_codes != [0] * (tasks - 1):
        log = (ref / "launcher-0.log").read_text(errors="replace") if (ref / "launcher-0.log").exists() else ""
        return {"tasks": tasks, "one_gpu": shared, "ok": False, "reference_exit_codes": ref_codes,
                "reference_log_tail": log[-3000:]}
    out = work / "kill"
    t0 = time.monotonic()
    procs = launch(out, tasks, 1, steps, sleep=0.01, train_args=train, slot_env=slot_env)
    kill_when(out, 1, 40)
    t_kill = time.monotonic()
    codes = wait_codes(procs, 120)  # a survivor stuck in its collective: 60 s timeout + 90 s hang
    kill_s = time.monotonic() - t0
    final = json.loads((out / "final.json").read_text()) if (out / "final.json").exists() else {}
    expected = json.loads((ref / "final.json").read_text())
    log = (out / "launcher-0.log").read_text(errors="replace") if (out / "launcher-0.log").exists() else ""
    result = {"backend": backend, "tasks": tasks, "one_gpu": shared, "exit_codes": codes,
              "finished": final.get("end") == "done", "bit_identical": final.get("sha256") == expected.get("sha256"),
              "generations": [line.split("fleetctl run: ", 1)[1] for line in log.splitlines()
                              if "fleetctl run: generation" in line],
              "reference_run_s": round(ref_s, 2), "kill_run_s": round(kill_s, 2),
              "after_kill_s": round(time.monotonic() - t_kill, 2),
              "ok": codes == [0] * tasks and final.get("end") == "done"}
    if not result["ok"]:
        result["launcher_log_tail"] = log[-3000:]
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024, help="model parameters, MB (fp32)")
    parser.add_argument("--cycles", type=int, default=5)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--work", default="/tmp/fleetctl-inprocess-nccl")
    parser.add_argument("--harness-check", action="store_true",
                        help="run the kill test on gloo (CPU) only: checks this script without a GPU")
    args = parser.parse_args()
    if args.harness_check:  # the kill test's harness on gloo, for a machine without a GPU
        out = kill_test(0, args.steps, Path(args.work), backend="gloo")
        print(json.dumps(out, indent=2))
        return 0 if out["ok"] else 1
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
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    out["kill_test"] = kill_test(out["gpus"], args.steps, work)
    ok = out["kill_test"]["ok"]
    print(json.dumps(out, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
