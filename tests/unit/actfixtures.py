"""An in-memory Slurm for the act and spares unit tests: nodes with partitions and reasons (drain keeps
an operator's reason, resume only fleetctl's, as the CLI backend does), reservations that keep other
jobs off their nodes, and batch jobs that `requeue_excluding` starts again on free nodes.
The lab tests run the same code against real Slurm (tests/integration/test_act_lab.py)."""

from __future__ import annotations

import json
import threading
import time

from fleetctl.errors import SlurmError
from fleetctl.slurm.base import (DrainResult, Reservation, ResumeResult, SlurmBackend, SlurmJob,
                                 SlurmNode)
from fleetctl.slurm.reasons import is_ours, make_reason


class MemSlurm(SlurmBackend):
    def __init__(self, names, partition="batch", drain_file=None, write_delay=0.0):
        super().__init__(drain_prefix="fleetctl")
        self.node_map = {n: SlurmNode(n, "IDLE", partitions=[partition]) for n in names}
        self.res: dict[str, list[str]] = {}
        self.job_map: dict[str, dict] = {}
        self.drain_file = drain_file
        self.write_delay = write_delay
        self.lock = threading.Lock()
        self.calls: list[tuple] = []

    # ---- setup helpers
    def run_job(self, job_id, nodes, requeue=True):
        self.job_map[job_id] = {"nodes": list(nodes), "state": "RUNNING", "exc": [], "requeue": requeue}
        for n in nodes:
            self.node_map[n].state = "ALLOCATED"

    def operator_drain(self, node, reason):
        self.node_map[node].flags = ["DRAIN"]
        self.node_map[node].reason = reason

    # ---- SlurmBackend
    def ping(self):
        return "mem"

    def nodes(self, nodes=None):
        names = list(self.node_map) if nodes is None else nodes
        missing = [n for n in names if n not in self.node_map]
        if missing:
            raise SlurmError(f"Node {missing[0]} not found")
        return [self.node_map[n] for n in names]

    def jobs(self, *, job_ids=None, nodes=None, states=None):
        out = []
        for jid, j in self.job_map.items():
            if job_ids and jid not in job_ids or nodes and not set(nodes) & set(j["nodes"]):
                continue
            if j["state"] not in (states or ("PENDING", "RUNNING")):  # squeue's default
                continue
            out.append(SlurmJob(jid, j["state"], user="alice", partition="batch", nodes=list(j["nodes"]),
                                nodelist=",".join(j["nodes"])))
        return out

    def drain(self, nodes, code, text="", *, force=False):
        result = DrainResult(make_reason(self.drain_prefix, code, text))
        for n in nodes:
            node = self.node_map[n]
            if node.reason and not is_ours(node.reason, self.drain_prefix):
                result.skipped[n] = "someone else's"
                continue
            node.flags, node.reason = ["DRAIN"], result.reason
            result.drained.append(n)
        self.calls.append(("drain", tuple(result.drained)))
        if self.drain_file and result.drained:
            with open(self.drain_file, "a") as fh:
                fh.write(json.dumps(result.drained) + "\n")
        return result

    def resume(self, nodes, *, wait_s=10.0):
        out = ResumeResult()
        for n in nodes:
            node = self.node_map[n]
            if not is_ours(node.reason, self.drain_prefix):
                out.refused[n] = "not fleetctl's"
                continue
            node.flags, node.reason = [], ""
            out.resumed.append(n)
        return out

    def wait_responding(self, names, wait_s=10.0):
        return []

    def reservations(self, name=None):
        return [Reservation(k, nodes=list(v)) for k, v in self.res.items() if name in (None, k)]

    def create_reservation(self, name, nodes, *, flags=(), users=(), start="now", duration="infinite",
                           partition=""):
        if name in self.res:
            raise SlurmError("Duplicate reservation name")
        self.res[name] = list(nodes)
        return self.reservations(name)[0]

    def update_reservation(self, name, *, nodes=None, flags=None, users=None, duration=None):
        if self.write_delay:
            time.sleep(self.write_delay)
        self.res[name] = list(nodes)
        return self.reservations(name)[0]

    def delete_reservation(self, name):
        self.res.pop(name)

    def requeue(self, job_id, *, hold=False):
        raise NotImplementedError

    def reboot(self, nodes, reason):
        for n in nodes:  # scontrol reboot ASAP: drained meanwhile, the reason is the request's
            self.node_map[n].flags = sorted(set(self.node_map[n].flags) | {"DRAIN", "REBOOT_REQUESTED"})
            self.node_map[n].reason = reason
        self.calls.append(("reboot", tuple(nodes)))

    def cancel_reboot(self, nodes):
        for n in nodes:
            if "REBOOT_REQUESTED" not in self.node_map[n].flags:
                raise SlurmError(f"Node {n} has no reboot requested")
            self.node_map[n].flags = [f for f in self.node_map[n].flags if f != "REBOOT_REQUESTED"]
        self.calls.append(("cancel_reboot", tuple(nodes)))

    # ---- swap support (the CLI backend's additions)
    def job_record(self, job_id):
        j = self.job_map.get(job_id)
        if j is None:
            return {}
        return {"JobId": job_id, "JobState": j["state"], "NodeList": ",".join(j["nodes"]) or "(null)",
                "BatchFlag": "1", "Requeue": "1" if j["requeue"] else "0", "ExcNodeList": ",".join(j["exc"])}

    def requeue_excluding(self, job_id, exclude, *, wait_s=30.0, allow=()):
        j = self.job_map[job_id]
        j["exc"] = sorted((set(j["exc"]) | set(exclude)) - (set(allow) - set(exclude)))
        count = len(j["nodes"])
        for n in j["nodes"]:
            self.node_map[n].state = "IDLE"
        reserved = {n for nodes in self.res.values() for n in nodes}
        free = [n for n, s in self.node_map.items() if s.state == "IDLE" and not s.flags
                and n not in j["exc"] and n not in reserved]
        if len(free) < count:
            j["state"], j["nodes"] = "PENDING", []
            return
        j["nodes"], j["state"] = free[:count], "RUNNING"
        for n in j["nodes"]:
            self.node_map[n].state = "ALLOCATED"


def audit_report(failing: dict[str, str], ok=(), error=(), finished=None, action="reboot") -> dict:
    """A fleetctl.audit/1 report: failing {node: code}, passing nodes, nodes whose checks errored."""
    nodes = []
    for node, code in failing.items():
        nodes.append({"node": node, "status": "fail", "complete": True, "transport": "ok", "error": "",
                      "results": [{"code": code, "status": "fail", "message": "GPU has fallen off the bus",
                                   "action": action, "subject": "0000:1b:00",
                                   "evidence": {"line": "NVRM: Xid (PCI:0000:1b:00): 79, pid=1"}}]})
    for node in ok:
        nodes.append({"node": node, "status": "ok", "complete": True, "transport": "ok", "error": "",
                      "results": [{"code": "gpu.count", "status": "ok"}]})
    for node in error:
        nodes.append({"node": node, "status": "error", "complete": False, "transport": "ok", "error": "",
                      "results": [{"code": "xid.scan", "status": "error", "message": "kernel log unreadable"}]})
    return {"schema": "fleetctl.audit/1", "level": "quick", "started": finished or time.time(),
            "finished": finished or time.time(), "nodes": nodes, "fleet": []}


def lens_event(ev_id="ev-20261201T070000-0001", *, etype="link", eid="node1:eth0--leaf1", metric="loss",
               severity="critical", confidence=0.97, jobs=(), state="open", evidence=None):
    return {"v": 1, "id": ev_id, "kind": "open", "time": "2026-12-01T07:00:03Z", "state": state,
            "element": {"type": etype, "id": eid}, "metric": metric, "severity": severity,
            "confidence": confidence, "evidence": evidence if evidence is not None else {"loss_pct": 4.8},
            "first_seen": "2026-12-01T07:00:00Z", "last_seen": "2026-12-01T07:00:03Z", "flap": None,
            "jobs": list(jobs)}
