#!/usr/bin/env python3
"""How a survivor leaves an NCCL collective whose peer died, on this GPU machine. Prints JSON.

The in-process restart (fleetctl.recovery.resilient) needs a survivor stuck in a collective with a
dead rank to get out of it within a second. On the first GPU run (2026-12-04, H200, NCCL 2.28.9,
torch 2.11) the survivor of benchmarks/device/inprocess_nccl.py's kill test never did: the heartbeat
thread's `_abort_process_group()` ran, yet the training thread stayed blocked until the
collective's 60 s timeout. This probe runs two ranks on GPU 0 (each its own NCCL host:
NCCL_HOSTID; socket transport on loopback), rank 1 exits hard at iteration 30, and rank 0 leaves
the collective one way per variant:

- `thread-pg`: the training thread blocks (`all_reduce`, then `.item()`); another thread calls
  `dist.distributed_c10d._abort_process_group()` (what resilient.py does today);
- `thread-backend`: the same, the other thread calling the default group's NCCL backend `abort()`;
- `poll-main`: the training thread never blocks: `all_reduce(async_op=True)`, then it polls
  `work.is_completed()`; once the peer is known dead it aborts the group itself;
- `thread-pg-kept`: as `thread-pg`, the aborted groups kept referenced so that they are never
  shut down (resilient.py's `_ABORTED_GROUPS`).

Seen on 2026-12-04 (H200, torch 2.11, NCCL 2.28.9): every abort returned in 0.52-0.56 s and the
training thread left the collective at once ("NCCL communicator was aborted"); `poll-main` saw
NCCL's own "remote process exited" 0.8 s after the death. Then `thread-pg` hung releasing the
collective's exception (the last reference to the group: its destructor) and `thread-backend`
hung in `destroy_process_group()` (the group's shutdown). `thread-pg-kept` not yet run.

Each: when the abort call returned, whether and when the training thread got out, whether a new
one-rank group then works (the GPU is usable again), and Python stacks of every thread 12 s after
the death (faulthandler) where something stayed stuck. Also the replica capture's GPU-to-host copy
(`recovery.resilient._clone`: pageable memory) against pinned buffers filled with non-blocking
copies. Exit 0 measured, 2 no CUDA GPU.

    python3 benchmarks/device/nccl_abort_probe.py [--variants thread-pg,thread-backend,poll-main]
"""

from __future__ import annotations

import argparse
import datetime
import faulthandler
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from inprocess_nccl import free_port, one_gpu_env  # beside this file: two ranks on one GPU as two NCCL hosts

REPO = Path(__file__).resolve().parents[2]
VARIANTS = ("thread-pg-kept", "thread-pg", "thread-backend", "poll-main")
KEPT: list = []  # thread-pg-kept: the aborted groups, never shut down (as resilient.py does)
DIE_AT = 30
DEAD_AFTER_S = 0.5  # rank 0 is told of the death this long after it (the heartbeats' part)


# ---------------------------------------------------------------- one rank
def rank_main(args) -> None:
    import torch
    import torch.distributed as dist

    rank, variant, work_dir = args.rank, args.variant, Path(args.work)
    t0 = time.monotonic()

    def say(event: str, **kw) -> None:
        print(json.dumps({"rank": rank, "event": event, "t": round(time.monotonic() - t0, 3), **kw}), flush=True)

    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{args.port}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=30), device_id=dev)
    say("joined")
    death = work_dir / "rank1-died"
    x = torch.ones(1 << 20, device=dev)
    aborted = threading.Event()

    def abort(how: str) -> None:
        a = time.monotonic()
        try:
            if how == "backend":
                dist.distributed_c10d._get_default_group()._get_backend(dev).abort()
            else:
                if variant == "thread-pg-kept":
                    KEPT.extend(list(dist.distributed_c10d._world.pg_names))
                dist.distributed_c10d._abort_process_group()
            say("abort_returned", how=how, took_s=round(time.monotonic() - a, 3))
        except Exception as exc:  # noqa: BLE001  reported
            say("abort_raised", how=how, error=str(exc)[:300], took_s=round(time.monotonic() - a, 3))
        aborted.set()

    if rank == 0 and variant.startswith("thread"):
        def watcher() -> None:
            while not death.exists():
                time.sleep(0.01)
            time.sleep(DEAD_AFTER_S)
            say("abort_calling", thread="watcher")
            faulthandler.dump_traceback_later(12, exit=False, file=open(work_dir / f"stacks-{variant}.txt", "w"))
            abort("backend" if variant == "thread-backend" else "pg")
        threading.Thread(target=watcher, daemon=True).start()

    it = 0
    try:
        while True:
            if rank == 1 and it == DIE_AT:
                death.write_text(str(time.time()))
                os._exit(9)  # a hard death: no goodbye to NCCL
            if variant == "poll-main":
                work = dist.all_reduce(x, async_op=True)
                while not work.is_completed():
                    if rank == 0 and death.exists() and \
                            time.time() - float(death.read_text() or 0) > DEAD_AFTER_S:
                        say("abort_calling", thread="main")
                        faulthandler.dump_traceback_later(12, exit=False,
                                                          file=open(work_dir / f"stacks-{variant}.txt", "w"))
                        abort("pg")
                        raise RuntimeError("peer lost: left the collective by polling")
                    time.sleep(0.0005)
                work.wait()
            else:
                dist.all_reduce(x)
            x.sum().item()  # a host sync, as a loss's .item() is
            x.fill_(1.0)
            it += 1
    except Exception as exc:  # noqa: BLE001  how the training thread got out
        say("left_collective", iteration=it, error=f"{type(exc).__name__}: {str(exc)[:300]}")
    say("exception_released")  # its traceback's frames and tensors: a destructor once hung here
    faulthandler.cancel_dump_traceback_later()
    aborted.wait(30)
    # what resilient.py's _drop_group does next (a new default group needs the old one gone)
    faulthandler.dump_traceback_later(10, exit=False, file=open(work_dir / f"stacks-{variant}-destroy.txt", "w"))
    try:
        a = time.monotonic()
        if dist.is_initialized():  # _abort_process_group() unregistered every group already
            dist.destroy_process_group()
        say("destroyed", took_s=round(time.monotonic() - a, 3), was_registered=dist.is_initialized())
    except Exception as exc:  # noqa: BLE001  reported
        say("destroy_raised", error=f"{type(exc).__name__}: {str(exc)[:300]}")
    faulthandler.cancel_dump_traceback_later()
    # the GPU usable again: a fresh one-rank group (a new generation's, as a restart makes)
    try:
        a = time.monotonic()
        store = dist.TCPStore("127.0.0.1", free_port(), 1, True, datetime.timedelta(seconds=20))
        dist.init_process_group("nccl", store=dist.PrefixStore("gen2", store), rank=0, world_size=1,
                                timeout=datetime.timedelta(seconds=20), device_id=dev)
        y = torch.ones(1024, device=dev)
        dist.all_reduce(y)
        say("new_group_ok", value=float(y[0].item()), took_s=round(time.monotonic() - a, 3))
        dist.destroy_process_group()
    except Exception as exc:  # noqa: BLE001  reported
        say("new_group_failed", error=f"{type(exc).__name__}: {str(exc)[:300]}")
    os._exit(0)


# ---------------------------------------------------------------- the parent
def run_variant(variant: str, timeout_s: float) -> dict:
    work = Path(f"/tmp/nccl-abort-probe/{variant}")
    work.mkdir(parents=True, exist_ok=True)
    for f in work.iterdir():
        f.unlink()
    port = free_port()
    procs = []
    for r in (0, 1):
        env = {**os.environ, **one_gpu_env(r), "TORCH_NCCL_ASYNC_ERROR_HANDLING": "2", "PYTHONPATH": str(REPO)}
        procs.append(subprocess.Popen([sys.executable, __file__, "--rank", str(r), "--variant", variant,
                                       "--port", str(port), "--work", str(work)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=timeout_s))
        except subprocess.TimeoutExpired:
            p.kill()
            so, se = p.communicate()
            outs.append((so + '\n{"event": "killed_by_probe_timeout"}', se))
    events = [json.loads(line) for so, _ in outs for line in so.splitlines() if line.startswith("{")]
    stacks = work / f"stacks-{variant}.txt"
    result = {"variant": variant, "events": [e for e in events if e.get("rank", 0) == 0],
              "exit_codes": [p.returncode for p in procs]}
    if stacks.exists() and stacks.stat().st_size:
        result["stacks_12s_after_abort"] = stacks.read_text(errors="replace")[-3000:]
    stacks = work / f"stacks-{variant}-destroy.txt"
    if stacks.exists() and stacks.stat().st_size:
        result["stacks_10s_into_destroy"] = stacks.read_text(errors="replace")[-3000:]
    if not any(e["event"] == "left_collective" for e in events):
        result["stderr_rank0_tail"] = outs[0][1][-2500:]
    return result


def capture(size_mb: int) -> dict:
    import torch

    from fleetctl.recovery.resilient import _clone

    n = size_mb * (1 << 20) // 4
    tensors = [torch.randn(n // 8, device="cuda") for _ in range(8)]
    nbytes = sum(t.numel() * 4 for t in tensors)
    torch.cuda.synchronize()
    out = {"bytes": nbytes}
    a = time.perf_counter()
    _clone(tensors)
    out["pageable_clone_gb_s"] = round(nbytes / (time.perf_counter() - a) / 1e9, 2)
    pinned = [torch.empty(t.shape, dtype=t.dtype, pin_memory=True) for t in tensors]
    stream = torch.cuda.Stream()
    for trial in range(3):
        torch.cuda.synchronize()
        a = time.perf_counter()
        with torch.cuda.stream(stream):
            for d, s in zip(pinned, tensors):
                d.copy_(s, non_blocking=True)
        stream.synchronize()
        out[f"pinned_copy_gb_s_{trial}"] = round(nbytes / (time.perf_counter() - a) / 1e9, 2)
    a = time.perf_counter()
    _ = [torch.empty(t.shape, dtype=t.dtype, pin_memory=True) for t in tensors]
    out["pin_alloc_s"] = round(time.perf_counter() - a, 3)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--timeout", type=float, default=45.0, help="seconds per variant")
    ap.add_argument("--capture-mb", type=int, default=2048)
    ap.add_argument("--rank", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--variant", default="", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--work", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rank is not None:
        rank_main(args)
        return 0
    sys.path.insert(0, str(REPO))
    import torch
    if not torch.cuda.is_available():
        print(json.dumps({"benchmark": "nccl_abort_probe", "error": "no CUDA GPU"}))
        return 2
    out = {"benchmark": "nccl_abort_probe", "torch": torch.__version__,
           "nccl": ".".join(map(str, torch.cuda.nccl.version())), "variants": []}
    for v in args.variants.split(","):
        out["variants"].append(run_variant(v, args.timeout))
        print(json.dumps(out["variants"][-1]), file=sys.stderr, flush=True)
    out["capture"] = capture(args.capture_mb)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
