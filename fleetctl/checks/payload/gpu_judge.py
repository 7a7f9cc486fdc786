"""Judge a GPU record (gpu_collect) against the node class's expectations and the thresholds.

One result per check code, covering all GPUs: the subject names the GPUs at fault (`gpu3,gpu5`), the
evidence holds the values read per GPU.
"""

from __future__ import annotations

from fleetctl.checks.payload.common import result, worst_status, strongest_action  # payload-local
from fleetctl.checks.payload.fabric import judge_fabric, nvlink_error_verdict  # payload-local

HW_THROTTLE = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
SW_THERMAL = ("sw_thermal_slowdown",)
RETIRED_PAGES_RMA = 60  # NVIDIA: a GPU with 60+ retired pages qualifies for replacement
TEMP_MARGIN_WARN_C = 5  # warn when this close to the slowdown temperature


def _gid(gpu):
    return "gpu%s" % gpu.get("index")


def _aggregate(code, per_gpu, ok_message, evidence):
    """per_gpu: [(gpu_id, status, action, text)] for the GPUs at fault -> one result."""
    if not per_gpu:
        return result(code, "ok", ok_message, evidence=evidence)
    status = worst_status(s for _, s, _, _ in per_gpu)
    action = strongest_action(a for _, s, a, _ in per_gpu if s == status)
    worst = [p for p in per_gpu if p[1] == status]
    text = "; ".join("%s: %s" % (g, t) for g, _, _, t in worst[:4])
    if len(worst) > 4:
        text += "; and %d more" % (len(worst) - 4)
    return result(code, status, text, action, evidence, subject=",".join(g for g, _, _, _ in worst))


def judge_gpus(record, expect, thresholds):
    """All GPU results from one record. expect: the node class's gpus table (count, model, ...)."""
    gpus = record.get("gpus") or []
    src = record.get("source", "?")
    out = [_count(gpus, expect, src)]
    if not gpus:
        return out
    out.append(_model(gpus, expect))
    out.append(_ecc(gpus))
    out.append(_remap(gpus))
    out.append(_retired(gpus))
    out.append(_temperature(gpus, thresholds))
    out.append(_throttle(gpus))
    out.append(_persistence(gpus))
    out.append(_pcie(gpus, expect))
    out.append(_nvlink(gpus, expect))
    fabric = judge_fabric(gpus, _gid)
    if fabric is not None:
        out.append(fabric)
    out.append(_versions(record, gpus, expect))
    if any(g.get("recovery_action") for g in gpus):
        out.append(_recovery(gpus))
    return out


def _each_gpu(gpus, evidence, verdict):
    """(faults, evidence by GPU) of a per-GPU check: evidence(gpu) is what the result shows of it,
    verdict(gpu, its evidence) its fault (status, action, text) or None."""
    bad, ev = [], {}
    for g in gpus:
        ev[_gid(g)] = e = evidence(g)
        fault = verdict(g, e)
        if fault:
            bad.append((_gid(g),) + fault)
    return bad, ev


def _reported(code, gpus, field, verdict, ok_message, unreported):
    """A check of one field that older GPUs or sources do not report: skipped when no GPU has it,
    a GPU without it never at fault."""
    bad, ev = _each_gpu(gpus, lambda g: g.get(field),
                        lambda _g, value: None if value is None else verdict(value))
    if all(g.get(field) is None for g in gpus):
        return result(code, "skipped", unreported, evidence=ev)
    return _aggregate(code, bad, ok_message, ev)


# `nvidia-smi -q` "GPU Recovery Action" (R570+), the state Xid 154 announces: what the driver requires now.
RECOVERY_BY_TEXT = (("reboot", "reboot"), ("reset", "reset-gpu"), ("drain", "reset-gpu"))


def _recovery(gpus):
    bad, ev = _each_gpu(gpus, lambda g: g.get("recovery_action"), _recovery_fault)
    return _aggregate("gpu.recovery", bad, "no recovery action pending", ev)


def _recovery_fault(_g, text):
    if text and text.lower() not in ("none", "n/a"):
        action = next((a for word, a in RECOVERY_BY_TEXT if word in text.lower()), "inspect-hardware")
        return "fail", action, "driver requires recovery action %r" % text
    return None


def _count(gpus, expect, src):
    want = expect.get("count") or 0
    ev = {"found": len(gpus), "expected": want, "source": src}
    if want and len(gpus) < want:
        return result("gpu.count", "fail", "%d of %d GPUs visible" % (len(gpus), want), "reboot", ev)
    if want and len(gpus) > want:
        return result("gpu.count", "warn", "%d GPUs visible, site file expects %d" % (len(gpus), want),
                      evidence=ev)
    return result("gpu.count", "ok", "%d GPUs visible" % len(gpus), evidence=ev)


def _model(gpus, expect):
    want = expect.get("model") or ""
    names = {_gid(g): g.get("name") for g in gpus}
    if not want:
        return result("gpu.model", "skipped", "no model in the site file", evidence=names)
    bad = [(g, "fail", "drain", "is %r, expected %r" % (n, want)) for g, n in names.items() if n != want]
    return _aggregate("gpu.model", bad, "all GPUs are %s" % want, names)


def _ecc(gpus):
    bad, ev = _each_gpu(gpus, lambda g: dict(g.get("ecc") or {}, mode=g.get("ecc_mode")), _ecc_fault)
    return _aggregate("gpu.ecc", bad, "no uncorrectable ECC errors", ev)


def _ecc_fault(g, _ev):
    ecc = g.get("ecc") or {}
    if (ecc.get("volatile_dbe") or 0) > 0:
        return "fail", "reset-gpu", "%d uncorrectable ECC errors since the last reset" % ecc["volatile_dbe"]
    if (ecc.get("aggregate_dbe") or 0) > 0:
        return "warn", "inspect-hardware", "%d uncorrectable ECC errors over its life" % ecc["aggregate_dbe"]
    if g.get("ecc_mode") is False:
        return "warn", "reset-gpu", "ECC is disabled"
    return None


def _remap(gpus):
    return _reported("gpu.remap", gpus, "remapped_rows", _remap_fault, "no row remapping pending or failed",
                     "row remapping not reported (pre-Ampere GPU or source)")


def _remap_fault(rr):
    if rr.get("failure"):
        return "fail", "inspect-hardware", "row remapping failed"
    if rr.get("pending"):
        return "fail", "reset-gpu", "row remapping pending (%s uncorrectable rows)" % rr.get("uncorrectable")
    return None


def _retired(gpus):
    return _reported("gpu.retired_pages", gpus, "retired_pages", _retired_fault, "no retired pages pending",
                     "page retirement not reported (Ampere+ remaps rows)")


def _retired_fault(rp):
    total = (rp.get("sbe") or 0) + (rp.get("dbe") or 0)
    if total >= RETIRED_PAGES_RMA:
        return "fail", "inspect-hardware", "%d retired pages" % total
    if rp.get("pending"):
        return "fail", "reset-gpu", "page retirement pending"
    return None


def _temperature(gpus, th):
    warn_c, fail_c = th.get("gpu_temp_warn_c", 85), th.get("gpu_temp_fail_c", 95)
    hbm_fail_c = th.get("hbm_temp_fail_c", 95)

    def fault(_g, e):
        t, m, margin = e["gpu_c"], e["hbm_c"], e["margin_c"]
        if t is not None and t >= fail_c:
            return "fail", "inspect-hardware", "GPU at %s C (limit %s C)" % (t, fail_c)
        if m is not None and m >= hbm_fail_c:
            return "fail", "inspect-hardware", "HBM at %s C (limit %s C)" % (m, hbm_fail_c)
        if t is not None and t >= warn_c:
            return "warn", "inspect-hardware", "GPU at %s C (warning at %s C)" % (t, warn_c)
        if margin is not None and margin < TEMP_MARGIN_WARN_C:
            return "warn", "inspect-hardware", "%s C below its slowdown temperature" % margin
        return None

    bad, ev = _each_gpu(gpus, _temperatures, fault)
    if all(e["gpu_c"] is None for e in ev.values()):
        return result("gpu.temperature", "skipped", "temperature not reported", evidence=ev)
    return _aggregate("gpu.temperature", bad, "temperatures within limits", ev)


def _temperatures(g):
    t, m, slow = g.get("temperature_c"), g.get("memory_temperature_c"), g.get("slowdown_temp_c")
    return {"gpu_c": t, "hbm_c": m, "slowdown_c": slow, "margin_c": None if t is None or slow is None else slow - t}


def _throttle(gpus):
    bad, ev = _each_gpu(gpus, lambda g: g.get("throttle_reasons"), _throttle_fault)
    return _aggregate("gpu.throttle", bad, "no hardware or thermal clock slowdown", ev)


def _throttle_fault(_g, reasons):
    hw = [r for r in reasons or () if r in HW_THROTTLE]
    sw = [r for r in reasons or () if r in SW_THERMAL]
    if hw:
        return "warn", "inspect-hardware", "clocks held down by " + ", ".join(hw)
    if sw:
        return "warn", "none", "clocks held down by " + ", ".join(sw)
    return None


def _persistence(gpus):
    ev = {_gid(g): g.get("persistence_mode") for g in gpus}
    bad = [(gid, "warn", "none", "persistence mode off (start nvidia-persistenced)")
           for gid, on in ev.items() if on is False]
    return _aggregate("gpu.persistence", bad, "persistence mode on", ev)


def _pcie(gpus, expect):
    def evidence(g):
        p = g.get("pcie") or {}
        return dict(p, expected_gen=expect.get("pcie_gen") or p.get("max_gen"),
                    expected_width=expect.get("pcie_width") or p.get("max_width"))

    bad, ev = _each_gpu(gpus, evidence, _pcie_fault)
    return _aggregate("gpu.pcie", bad, "PCIe links at full width", ev)


def _pcie_fault(g, e):
    p, want_width, want_gen = g.get("pcie") or {}, e["expected_width"], e["expected_gen"]
    width, gen = p.get("width"), p.get("gen")
    if width is not None and want_width and width < want_width:
        return "fail", "inspect-hardware", "PCIe link x%s, expected x%s" % (width, want_width)
    # An idle GPU lowers its link generation to save power: only a busy GPU's gen is judged.
    if gen is not None and want_gen and gen < want_gen and "gpu_idle" not in (g.get("throttle_reasons") or ()):
        return "warn", "inspect-hardware", "PCIe gen%s, expected gen%s" % (gen, want_gen)
    return None


def _nvlink(gpus, expect):
    want = expect.get("nvlinks") or 0
    bad, ev, known = [], {}, False
    for g in gpus:
        links = g.get("nvlink")
        if links is None:
            continue
        known = True
        active = sum(1 for l in links if l.get("active"))
        errors = {k: sum(l.get(k) or 0 for l in links)
                  for k in ("crc_errors", "replay_errors", "recovery_errors")}
        ev[_gid(g)] = dict(errors, active=active, present=len(links))
        # error counters are totals since the driver loaded: only their rise since the previous run counts
        rises = nvlink_error_verdict(links)
        if want and active < want:
            bad.append((_gid(g), "fail", "reset-gpu", "%d of %d NVLinks active" % (active, want)))
        elif rises:
            bad.append((_gid(g),) + rises)
    if not known:
        return result("gpu.nvlink", "skipped", "NVLink state not reported by this source")
    if not want and not any(e["active"] for e in ev.values()) and not bad:
        # PCIe cards, a lone GH200: no link up and none expected by the node class is not a fault
        return result("gpu.nvlink", "ok", "no NVLink active, none expected", evidence=ev)
    return _aggregate("gpu.nvlink", bad, "NVLinks active, no new errors", ev)


def _versions(record, gpus, expect):
    ev = {"driver_version": record.get("driver_version"), "cuda_version": record.get("cuda_version"),
          "vbios": {_gid(g): g.get("vbios_version") for g in gpus}}
    bad = []
    want_drv, want_vbios = expect.get("driver_version") or "", expect.get("vbios_version") or ""
    if want_drv and record.get("driver_version") != want_drv:
        bad.append(("driver", "fail", "drain", "driver %s, expected %s"
                    % (record.get("driver_version"), want_drv)))
    for gid, vb in ev["vbios"].items():
        if want_vbios and vb != want_vbios:
            bad.append((gid, "warn", "drain", "VBIOS %s, expected %s" % (vb, want_vbios)))
    if not want_vbios and len(set(ev["vbios"].values())) > 1:
        bad.append(("vbios", "warn", "none", "GPUs of this node carry different VBIOS versions"))
    return _aggregate("gpu.versions", bad, "driver %s" % record.get("driver_version"), ev)
