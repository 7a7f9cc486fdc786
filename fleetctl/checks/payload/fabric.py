"""NVLink fabric of a node: each GPU's fabric state (NVSwitch systems, GB200 NVL72 trays), the IMEX
domain of a multi-node NVLink domain, and NVLink error counters judged as rises between runs.

Judged only where it applies. A GPU whose fabric is "Not Supported" (PCIe cards, no NVSwitch) has
no fabric result. IMEX is judged only on a node configured in a multi-node IMEX domain whose daemon
runs: many sites start IMEX per job (the Slurm prolog writes its node list), so an idle node without
a daemon is not a fault, and a single-node domain has nothing to connect. NVLink error counters are
totals since the driver loaded: only their rise since the previous run (same boot) is judged, never a
total read once (the context-blind reading that makes old errors look new).

None of this has run on NVSwitch or NVL72 hardware here: the parsers are tested on real outputs of
others (tests/data/real, PROVENANCE.md), NVML's calls follow its documentation.

Payload module: standard library only.
"""

from __future__ import annotations

import os
import re

from fleetctl.checks.payload.common import read_or_none, result, run_cmd  # payload-local

# nvmlGpuFabricState_t
NVML_FABRIC_STATES = {0: "Not Supported", 1: "Not Started", 2: "In Progress", 3: "Completed"}
ZERO_UUID = "00000000-0000-0000-0000-000000000000"
IMEX_NODES_CONFIG = "/etc/nvidia-imex/nodes_config.cfg"
MAX_TEXT = 1 << 20
NVLINK_REPLAY_PER_S_WARN = 1.0  # CRC and replay: a few per hour are normal on long cables
NVLINK_CRC_PER_S_WARN = 1.0


# ---------------------------------------------------------------- fabric state
def fabric_record(state, status, clique_id, cluster_uuid, health=None, bandwidth=None):
    """One GPU's fabric state in the record's form; N/A values are None."""
    def clean(value):
        value = (str(value).strip() if value is not None else "")[:80]
        return None if value in ("", "N/A", "[N/A]") else value
    clique = clean(clique_id)
    return {"state": clean(state), "status": clean(status),
            "clique_id": int(clique) if clique and clique.isdigit() else None,
            "cluster_uuid": clean(cluster_uuid), "health": clean(health), "bandwidth": clean(bandwidth)}


def nvml_fabric(nvml, handle):
    """NVML's nvmlDeviceGetGpuFabricInfo (R550+): state, status, clique id, cluster UUID; None when the
    driver or pynvml lacks it."""
    fn = getattr(nvml, "nvmlDeviceGetGpuFabricInfo", None)
    if fn is None:
        return None
    try:
        info = fn(handle)
    except nvml.NVMLError:
        return None
    raw = bytes(bytearray(getattr(info, "clusterUuid", b"") or b""))[:16]
    h = raw.hex()
    uuid = "-".join((h[:8], h[8:12], h[12:16], h[16:20], h[20:])) if len(raw) == 16 else None
    status = getattr(info, "status", None)
    status_text = "Success" if status == 0 else (str(nvml.NVMLError(status)) if status is not None else None)
    return fabric_record(NVML_FABRIC_STATES.get(getattr(info, "state", None)), status_text,
                         getattr(info, "cliqueId", None), uuid)


def fabric_from_xml(el):
    """`<fabric>` of `nvidia-smi -q -x` (tag names as the nvsmi DTD spells them; not seen on a real
    document here), or None."""
    if el is None:
        return None
    def text(*names):
        for name in names:
            child = el.find(name)
            if child is not None and child.text is not None:
                return child.text
        return None
    return fabric_record(text("state"), text("status"), text("cliqueId", "clique_id"),
                         text("clusterUuid", "cluster_uuid"), text("health/summary"), text("health/bandwidth"))


def parse_smi_fabric_text(text):
    """The `Fabric` sections of `nvidia-smi -q` (text), in GPU order."""
    out, current, indent = [], None, 0
    for line in (text or "")[:MAX_TEXT].splitlines():
        stripped = line.strip()
        if stripped == "Fabric":
            current, indent = {}, len(line) - len(line.lstrip())
            out.append(current)
            continue
        if current is None:
            continue
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            current = None  # the next section of the same depth
            continue
        key, sep, value = stripped.partition(":")
        if sep:
            current.setdefault(key.strip(), value.strip())
    return [fabric_record(f.get("State"), f.get("Status"), f.get("CliqueId"), f.get("ClusterUUID"),
                          f.get("Summary"), f.get("Bandwidth")) for f in out]


def judge_fabric(gpus, gid):
    """gpu.fabric from each GPU's fabric record; None when no GPU has a fabric to judge."""
    judged = [g for g in gpus if g.get("fabric") and g["fabric"].get("state") not in (None, "Not Supported")]
    if not judged:
        return None
    bad, ev = [], {}
    for g in judged:
        f = g["fabric"]
        ev[gid(g)] = f
        verdict = _fabric_verdict(f)
        if verdict:
            bad.append((gid(g),) + verdict)
    domains = {(f["cluster_uuid"], f["clique_id"]) for f in ev.values() if f.get("state") == "Completed"
               and f.get("status") == "Success"}
    if len(domains) > 1:
        bad.append(("node", "fail", "drain", "GPUs of this node are in %d NVLink domains (cluster UUID, "
                    "clique id): %s" % (len(domains), sorted(domains, key=str)[:4])))
    if not bad:
        [(uuid, clique)] = domains or [(None, None)]
        where = "single-node fabric" if uuid in (None, ZERO_UUID) else "NVLink domain %s clique %s" % (uuid, clique)
        return result("gpu.fabric", "ok", "%d GPUs: fabric Completed (%s)" % (len(judged), where), evidence=ev)
    status = "fail" if any(b[1] == "fail" for b in bad) else "warn"
    worst = [b for b in bad if b[1] == status]
    action = worst[0][2]
    return result("gpu.fabric", status, "; ".join("%s: %s" % (b[0], b[3]) for b in worst[:4]), action, ev,
                  ",".join(b[0] for b in worst))


def _fabric_verdict(f):
    state, status = f.get("state"), f.get("status")
    if state == "In Progress":
        return ("warn", "none", "fabric registration in progress: NVLink not usable yet (just booted, or the "
                "fabric manager restarting)")
    if state == "Not Started":
        return ("fail", "drain", "fabric not started: CUDA cannot use NVLink (fabric manager or NVLink "
                "fabric not running)")
    if state == "Completed" and status not in (None, "Success"):
        return ("fail", "drain", "fabric Completed with status %s" % status)
    if f.get("health") == "Unhealthy":
        return ("warn", "inspect-hardware", "fabric health Unhealthy (bandwidth %s)" % (f.get("bandwidth") or "?"))
    if f.get("bandwidth") not in (None, "Full"):
        return ("warn", "inspect-hardware", "NVLink fabric bandwidth %s" % f["bandwidth"])
    return None


def domain_of(gpus):
    """The node's multi-node NVLink domain `uuid/clique` (facts; blocks of Slurm's topology), or None."""
    for g in gpus:
        f = g.get("fabric") or {}
        if f.get("state") == "Completed" and f.get("cluster_uuid") not in (None, ZERO_UUID):
            return "%s/%s" % (f["cluster_uuid"], f.get("clique_id"))
    return None


# ---------------------------------------------------------------- fabric manager
def fabric_manager_state(text):
    """What the fabric manager's journal or `systemctl status` says of it: {"running": True/False/None,
    "configured": bool, "nothing_to_do": bool (no NVSwitch on this machine: FM exits 1 by design),
    "failed": bool, "last": the last line that says so}."""
    out = {"running": None, "configured": False, "nothing_to_do": False, "failed": False, "last": None}
    for line in (text or "")[-MAX_TEXT:].splitlines():
        s = line.strip()
        if re.search(r"Active:\s+active \(running\)", s) or re.search(r"Started .*fabric ?manager", s, re.I):
            out["running"], out["failed"], out["last"] = True, False, s[:300]
        elif re.search(r"Active:\s+(failed|inactive)", s) or re.search(r"(Stopped|Stopping) .*fabric ?manager", s, re.I):
            out["running"], out["last"] = False, s[:300]
        if "Successfully configured all the available NVSwitches" in s:
            out["configured"], out["last"] = True, s[:300]
        if "NV_WARN_NOTHING_TO_DO" in s:
            out["nothing_to_do"], out["last"] = True, s[:300]
        if re.search(r"fabric ?manager.*(Control process exited|failed!|status=\d+/FAILURE)|"
                     r"fabricmanager\.service: (Control process exited|Failed)", s, re.I):
            out["running"], out["failed"], out["last"] = False, True, s[:300]
    return out


def fabric_manager_journal(deadline):
    """The fabric manager's last journal lines (None without journalctl)."""
    rc, out, _ = run_cmd(["journalctl", "-u", "nvidia-fabricmanager", "-n", "50", "--no-pager", "-q"],
                         deadline, timeout=3)
    return out if rc == 0 else None


# ---------------------------------------------------------------- NVLink error counters
def parse_nvlink_errors(text):
    """{gpu index: {link: {"replay_errors", "recovery_errors", "crc_errors"}}} of `nvidia-smi nvlink -e`."""
    out, current = {}, None
    names = {"replay errors": "replay_errors", "recovery errors": "recovery_errors", "crc errors": "crc_errors"}
    for line in (text or "")[:MAX_TEXT].splitlines():
        m = re.match(r"^GPU ([0-9]{1,4}):", line)
        if m:
            current = out.setdefault(int(m.group(1)), {})
            continue
        m = re.match(r"^\s+Link ([0-9]{1,3}): ([A-Za-z ]+):\s*([0-9]{1,20})\s*$", line)
        if m and current is not None and m.group(2).strip().lower() in names:
            current.setdefault(int(m.group(1)), {})[names[m.group(2).strip().lower()]] = int(m.group(3))
    return out


def merge_nvlink_errors(record, text):
    """Put `nvidia-smi nvlink -e` counters into the record's links (state from `nvlink --status`)."""
    errors = parse_nvlink_errors(text)
    for gpu in record.get("gpus") or []:
        for link in gpu.get("nvlink") or []:
            link.update(errors.get(gpu.get("index"), {}).get(link.get("link"), {}))


def nvlink_rises(gpus, state, boot_id, now):
    """Annotate each link with `rises` ({counter: rise}) and `window_s` against the previous run's
    snapshot (same boot); then store this run's snapshot in `state["nvlink"]`."""
    snap = state.get("nvlink") if isinstance(state.get("nvlink"), dict) else {}
    usable = snap.get("boot_id") == boot_id and 0 < now - float(snap.get("time") or 0) <= 86400
    before = snap.get("values") if usable and isinstance(snap.get("values"), dict) else {}
    values = {}
    for g in gpus:
        key = str(g.get("uuid") or g.get("index"))
        for link in g.get("nvlink") or []:
            link.pop("rises", None)
            link.pop("window_s", None)
            counts = {k: link.get(k) for k in ("crc_errors", "replay_errors", "recovery_errors")
                      if isinstance(link.get(k), int)}
            values.setdefault(key, {})[str(link.get("link"))] = counts
            old = (before.get(key) or {}).get(str(link.get("link")))
            if isinstance(old, dict):
                link["rises"] = {k: max(0, v - old[k]) for k, v in counts.items() if isinstance(old.get(k), int)}
                link["window_s"] = round(now - float(snap["time"]), 1)
    state["nvlink"] = {"boot_id": boot_id, "time": now, "values": values}


def nvlink_error_verdict(links):
    """(status, action, text) for one GPU's links from their rises, or None (no rise, or no earlier
    read to compare with: totals alone are not judged)."""
    rises = [l for l in links if l.get("rises")]
    if not rises:
        return None
    window = max(l.get("window_s") or 0 for l in rises) or 1.0
    total = {k: sum(l["rises"].get(k, 0) for l in rises) for k in ("crc_errors", "replay_errors", "recovery_errors")}
    if total["recovery_errors"]:
        where = [str(l["link"]) for l in rises if l["rises"].get("recovery_errors")]
        return ("warn", "inspect-hardware", "%d NVLink recovery errors in %.0f s (link %s)"
                % (total["recovery_errors"], window, ",".join(where)))
    if total["crc_errors"] / window > NVLINK_CRC_PER_S_WARN or total["replay_errors"] / window > NVLINK_REPLAY_PER_S_WARN:
        return ("warn", "none", "NVLink CRC %d, replay %d errors in %.0f s"
                % (total["crc_errors"], total["replay_errors"], window))
    return None


# ---------------------------------------------------------------- IMEX
def parse_imex_ctl(text):
    """`nvidia-imex-ctl -N` (and the `-q` status line before it): {"daemon": READY|...|None,
    "nodes": {index: {"address", "status", "version"}}, "matrix": {from: {to: code}}, "domain": UP|...}."""
    out = {"daemon": None, "nodes": {}, "matrix": {}, "domain": None}
    lines = (text or "")[:MAX_TEXT].splitlines()
    header = None
    for i, line in enumerate(lines):
        s = line.strip()
        if s == "IMEX daemon status:" and i + 1 < len(lines):
            out["daemon"] = lines[i + 1].strip()[:40] or None
        m = re.match(r"^Node #(\d{1,5})\s+-\s+(\S+)\s+-\s+([A-Z_]+)(?:\s+-\s+Version:\s*(\S+))?", s)
        if m:
            out["nodes"][int(m.group(1))] = {"address": m.group(2)[:64], "status": m.group(3),
                                            "version": m.group(4)}
            continue
        if s.startswith("Nodes From\\To"):
            header = [int(x) for x in s.split()[2:] if x.isdigit()]
            continue
        m = re.match(r"^(\d{1,5})\s+(\S.*)$", s)
        if header is not None and m and len(m.group(2).split()) == len(header):
            out["matrix"][int(m.group(1))] = dict(zip(header, m.group(2).split()))
            continue
        m = re.match(r"^Domain State:\s*(\S+)", s)
        if m:
            out["domain"] = m.group(1)[:40]
            header = None
    return out


def imex_config_nodes(path):
    """The addresses of the IMEX node config (one per line, # comments), or None when absent."""
    text = read_or_none(path)
    if text is None:
        return None
    return [l.split("#", 1)[0].strip() for l in text.splitlines()[:100000] if l.split("#", 1)[0].strip()]


def imex_daemon_running(proc="/proc"):
    try:
        pids = [p for p in os.listdir(proc) if p.isdigit()]
    except OSError:
        return False
    for pid in pids:
        if (read_or_none(os.path.join(proc, pid, "comm")) or "").strip() == "nvidia-imex":
            return True
    return False


def check_imex(args, deadline):
    """nvlink.imex, only on a node of a multi-node IMEX domain whose daemon runs."""
    config = args.get("imex_nodes_config") or IMEX_NODES_CONFIG
    nodes = imex_config_nodes(config)
    if nodes is None:
        return [result("nvlink.imex", "skipped", "no IMEX domain configured (%s absent)" % config)]
    if len(nodes) < 2:
        return [result("nvlink.imex", "skipped", "single-node IMEX domain: nothing to connect, not judged",
                       evidence={"nodes": len(nodes)})]
    if not imex_daemon_running():
        return [result("nvlink.imex", "skipped", "IMEX daemon not running: not judged on an idle node (many "
                       "sites start it per job)", evidence={"nodes": len(nodes)})]
    rc, out, err = run_cmd(["nvidia-imex-ctl", "-N"], deadline, timeout=5)
    if rc != 0 and "Domain State" not in (out or ""):
        return [result("nvlink.imex", "error", "nvidia-imex-ctl -N failed: %s" % ((err or out).strip()[:200] or rc))]
    return [judge_imex(parse_imex_ctl(out), len(nodes))]


def judge_imex(doc, configured):
    ev = {"domain": doc["domain"], "daemon": doc["daemon"], "nodes": len(doc["nodes"]), "configured": configured}
    if doc["daemon"] not in (None, "READY"):
        return result("nvlink.imex", "fail", "this node's IMEX daemon is %s" % doc["daemon"], "drain", ev)
    if doc["domain"] is None:
        return result("nvlink.imex", "error", "nvidia-imex-ctl printed no Domain State", evidence=ev)
    not_ready = sorted(i for i, n in doc["nodes"].items() if n["status"] != "READY")
    cut = sorted({(a, b) for a, row in doc["matrix"].items() for b, code in row.items() if code != "C"})
    versions = sorted({n["version"] for n in doc["nodes"].values() if n.get("version")})
    ev.update(not_ready=not_ready, unconnected_pairs=len(cut), versions=versions)
    if doc["domain"] == "UP" and not not_ready and not cut:
        return result("nvlink.imex", "ok", "IMEX domain UP, %d nodes READY and connected" % len(doc["nodes"]),
                      evidence=ev)
    # A domain that is not UP may be another node's fault: this node warns, the fleet view localizes.
    addresses = ", ".join("#%d %s %s" % (i, doc["nodes"][i]["address"], doc["nodes"][i]["status"])
                          for i in not_ready[:4])
    return result("nvlink.imex", "warn", "IMEX domain %s: %d nodes not READY%s, %d node pairs not connected"
                  % (doc["domain"], len(not_ready), " (%s)" % addresses if addresses else "", len(cut)),
                  "none", ev)
