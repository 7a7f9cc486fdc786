"""Run the checks of a level inside a hard time budget and print one JSON document.

Entry points: `run_checks(args)` (in-process, `fleetctl audit --local` and tests) and `main()` (the
shipped script: `python3 - '<args json>'`). Checks run in a worker thread; when the budget runs out,
every check group that has not finished is reported as `error` "budget exceeded" and the document is
printed anyway: a hung NFS mount or a wedged driver never holds up a Slurm prolog.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import sys
import threading
import time

from fleetctl.checks.payload.common import (SCHEMA, Deadline, boot_id, json_argument,  # payload-local
                                            load_state, marked_simulated, result, save_state,  # payload-local
                                            strongest_action, worst_status)  # payload-local
from fleetctl.checks.payload.gpu_collect import GpuSourceError, collect_gpus  # payload-local
from fleetctl.checks.payload.gpu_judge import judge_gpus  # payload-local
from fleetctl.checks.payload.fabric import (check_imex, domain_of, fabric_manager_journal,  # payload-local
                                            fabric_manager_state, nvlink_rises)  # payload-local
from fleetctl.checks.payload.xid import check_xids  # payload-local
from fleetctl.checks.payload.nics import check_nics  # payload-local
from fleetctl.checks.payload.host import (check_clock, check_cpus_memory, check_mounts,  # payload-local
                                          check_versions)  # payload-local
from fleetctl.checks.payload.deep import check_dcgm, check_ib_write_bw, check_nccl  # payload-local

LEVELS = ("quick", "standard", "deep")
OUTPUT_RESERVE_S = 0.05  # kept back from the budget to write the document


def _gpu_group(ctx):
    args, facts = ctx["args"], ctx["facts"]
    expect = args.get("gpus") or {}
    try:
        record = collect_gpus(args, ctx["deadline"])
    except GpuSourceError as exc:
        if expect.get("count"):
            return marked_simulated([result("gpu.source", "fail", "cannot read GPUs: %s" % exc, "reboot")],
                                    bool(args.get("simulated_gpus")))
        return [result("gpu.source", "skipped", "no GPUs expected and none readable (%s)" % exc)]
    gpus = record.get("gpus") or []
    nvlink_rises(gpus, ctx.setdefault("state", {}), args.get("boot_id"), time.time())
    facts["gpu"] = {"source": record.get("source"), "count": len(gpus),
                    "models": sorted({g.get("name") for g in gpus if g.get("name")}),
                    "driver_version": record.get("driver_version"), "cuda_version": record.get("cuda_version"),
                    "vbios_versions": sorted({g.get("vbios_version") for g in gpus if g.get("vbios_version")}),
                    "nvlink_domain": domain_of(gpus)}
    ctx["gpu_count"] = len(gpus)
    ctx["gpu_by_bus"] = {short_bus_id(g.get("pci_bus_id")): g.get("index") for g in gpus if g.get("pci_bus_id")}
    results = judge_gpus(record, expect, args.get("thresholds") or {})
    for r in results:  # a fabric not ready: what the fabric manager's journal says of itself
        if r["code"] == "gpu.fabric" and r["status"] in ("warn", "fail") and not record.get("simulated"):
            journal = fabric_manager_journal(ctx["deadline"])
            if journal is not None:
                r["evidence"]["fabric_manager"] = fabric_manager_state(journal)
    return marked_simulated(results, record.get("simulated"))


def _nic_group(ctx):
    results, facts = check_nics(ctx["args"], ctx["deadline"], ctx["state"])
    ctx["facts"]["nics"] = facts
    return results


def _host_group(ctx):
    args, facts = ctx["args"], ctx["facts"].setdefault("host", {})
    out = check_cpus_memory(args.get("host") or {}, facts)
    out += check_versions(args.get("host") or {}, facts)
    out += check_mounts(args.get("mounts") or [], args.get("thresholds") or {})
    return out


def _nccl_group(ctx):
    out = check_nccl(ctx["args"], ctx["deadline"], ctx.get("gpu_count", 0))
    ctx["facts"].setdefault("deep", {})["nccl_busbw_gbs"] = out[0]["evidence"].get("avg_busbw_gbs")
    return out


def _ib_write_bw_group(ctx):
    out = check_ib_write_bw(ctx["args"], ctx["deadline"])
    measured = {r["subject"]: r["evidence"].get("gbps") for r in out if r["subject"]}
    ctx["facts"].setdefault("deep", {})["ib_write_bw_gbps"] = measured
    return out


# (group name, first level that runs it, function). Cheap, decisive groups first.
GROUPS = (
    ("gpu", "quick", _gpu_group),
    ("xid", "quick", lambda ctx: marked_simulated(check_xids(ctx["args"], ctx["deadline"], ctx["state"]),
                                                  bool(ctx["args"].get("simulated_gpus")))),
    ("host", "quick", _host_group),
    ("imex", "quick", lambda ctx: check_imex(ctx["args"], ctx["deadline"])),
    ("nic", "quick", _nic_group),
    ("clock", "standard", lambda ctx: check_clock(ctx["args"].get("thresholds") or {}, ctx["deadline"])),
    ("deep.dcgm", "deep", lambda ctx: check_dcgm(ctx["args"], ctx["deadline"])),
    ("deep.nccl", "deep", _nccl_group),
    ("deep.ib_write_bw", "deep", _ib_write_bw_group),
)


def run_checks(args, deadline=None):
    """Run the level's checks; return the result document (docs/checks.md)."""
    level = args.get("level") or "quick"
    if level not in LEVELS:
        raise ValueError("unknown level %r (quick, standard, deep)" % level)
    if deadline is None:
        deadline = Deadline(float(args.get("budget_s") or 0), count_process_age=False)
    started = time.time()
    args = dict(args, boot_id=boot_id(args.get("boot_id")))
    if level == "quick":
        args["counter_interval_s"] = 0  # one sample only: rates come from the previous run's snapshot
    elif args.get("counter_interval_s") is None:
        args["counter_interval_s"] = 1.0
    # The state file is keyed by node: a path without {node} on a shared filesystem (the lab) must not
    # mix one node's counter snapshot or Xid boots with another's.
    whole_state = load_state(args.get("state_file"))
    node_key = args.get("node") or socket.gethostname()
    nodes_state = whole_state.get("nodes") if isinstance(whole_state.get("nodes"), dict) else {}
    node_state = nodes_state.get(node_key) if isinstance(nodes_state.get(node_key), dict) else {}
    state_before = json.loads(json.dumps(node_state))  # a deep copy: save_state writes only what changed
    ctx = {"args": args, "deadline": deadline, "facts": {}, "state": node_state}
    groups = [(name, first, fn) for name, first, fn in GROUPS
              if LEVELS.index(first) <= LEVELS.index(level)]
    done = {}  # group name -> its results, filled by the worker threads
    # Node-level groups run side by side (a hung kernel-log read must not starve the NIC checks);
    # the deep tests run one after another once they are done (they load the same GPUs and NICs).
    threads = [threading.Thread(target=_work, args=([(n, fn)], ctx, done), daemon=True)
               for n, first, fn in groups if first != "deep"]
    deep = [(n, fn) for n, first, fn in groups if first == "deep"]
    if deep:
        threads.append(threading.Thread(target=_after, args=(list(threads), deep, ctx, done), daemon=True))
    for t in threads:
        t.start()
    for t in threads:
        t.join(None if deadline.at is None else max(0.0, deadline.left() - OUTPUT_RESERVE_S))
    complete = not any(t.is_alive() for t in threads)
    results = []
    for name, _, _ in groups:
        if name in done:
            results.extend(done[name])
        else:
            results.append(result(name + ".budget", "error", "budget exceeded (%.1f s) before the %s checks finished"
                                  % (deadline.budget_s, name), evidence={"budget_s": deadline.budget_s}))
    _name_xid_gpus(results, ctx.get("gpu_by_bus") or {})
    if complete:
        err = save_state(args.get("state_file"), {"nodes": {node_key: state_before}},
                         {"nodes": {node_key: ctx["state"]}})
        if err:
            ctx["facts"]["state_file_error"] = err
    return _document(args, level, started, deadline, complete, results, ctx["facts"])


def short_bus_id(bus_id):
    """'00000000:18:00.0' (NVML) and '0000:18:00' (Xid lines) -> '0000:18:00'."""
    if not bus_id:
        return None
    domain, _, rest = bus_id.lower().partition(":")
    return "%s:%s" % (domain[-4:], rest.split(".")[0])


def _name_xid_gpus(results, gpu_by_bus):
    """Tell which GPU index an Xid's PCI address is, so a report can say `gpu3` as the GPU checks do."""
    for r in results:
        if r["code"].startswith("xid.") and "pci" in r["evidence"]:
            index = gpu_by_bus.get(short_bus_id(r["evidence"]["pci"]))
            if index is not None:
                r["evidence"]["gpu"] = "gpu%s" % index


def _work(groups, ctx, done):
    for name, fn in groups:
        try:
            out = fn(ctx)
        except Exception as exc:  # one broken check must never sink the others
            out = [result(name + ".crash", "error", "%s check could not run: %s: %s" % (name, type(exc).__name__, exc))]
        done[name] = out


def _after(threads, groups, ctx, done):
    for t in threads:
        t.join()
    _work(groups, ctx, done)


def _document(args, level, started, deadline, complete, results, facts):
    failing = [r["action"] for r in results if r["status"] == "fail"]
    return {
        "schema": SCHEMA, "node": args.get("node") or socket.gethostname(),
        "hostname": socket.gethostname(), "level": level, "started": started,
        "elapsed_s": round(time.monotonic() - deadline.started, 4), "budget_s": deadline.budget_s,
        "complete": complete, "python": platform.python_version(),
        "simulated": any(r.get("simulated") for r in results),
        "status": worst_status(r["status"] for r in results if r["status"] != "skipped"),
        "action": strongest_action(failing), "results": results, "facts": facts,
    }


def main(argv=None):
    try:
        args = json_argument(argv, "expected a JSON object")
        deadline = Deadline(float(args.get("budget_s") or 0), count_process_age=True)
        doc = run_checks(args, deadline)
    except ValueError as exc:
        sys.stdout.write(json.dumps({"schema": SCHEMA, "error": "bad payload arguments: %s" % exc}) + "\n")
        sys.stdout.flush()
        os._exit(3)
    sys.stdout.write(json.dumps(doc, default=str) + "\n")
    sys.stdout.flush()
    os._exit(0)  # do not wait for a check thread stuck in the kernel


if __name__ == "__main__":
    main()
