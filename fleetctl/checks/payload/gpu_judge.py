"""Judge a GPU record (gpu_collect) against the node class's expectations and the thresholds.

One result per check code, covering all GPUs: the subject names the GPUs at fault (`gpu3,gpu5`), the
evidence holds the values read per GPU.
"""

from __future__ import annotations

from fleetctl.checks.payload.common import result, worst_status, strongest_action  # payload-local

HW_THROTTLE = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
SW_THERMAL = ("sw_thermal_slowdown",)
RETIRED_PAGES_RMA = 60  # NVIDIA: a GPU with 60+ retired pages qualifies for replacement
TEMP_MARGIN_WARN_C = 5  # warn when this close to the slowdown temperature


def _gid(gpu):
    return "gpu%s" % gpu.get("index")


def _aggregate(code, per_gpu, sim, ok_message, evidence):
    """per_gpu: [(gpu_id, status, action, text)] for the GPUs at fault -> one result."""
    if not per_gpu:
        return result(code, "ok", ok_message, evidence=evidence, simulated=sim)
    status = worst_status(s for _, s, _, _ in per_gpu)
    action = strongest_action(a for _, s, a, _ in per_gpu if s == status)
    worst = [p for p in per_gpu if p[1] == status]
    text = "; ".join("%s: %s" % (g, t) for g, _, _, t in worst[:4])
    if len(worst) > 4:
        text += "; and %d more" % (len(worst) - 4)
    return result(code, status, text, action, evidence, subject=",".join(g for g, _, _, _ in worst),
                  simulated=sim)


def judge_gpus(record, expect, thresholds):
    """All GPU results from one record. expect: the node class's gpus table (count, model, ...)."""
    sim = bool(record.get("simulated"))
    gpus = record.get("gpus") or []
    src = record.get("source", "?")
    out = [_count(gpus, expect, sim, src)]
    if not gpus:
        return out
    out.append(_model(gpus, expect, sim))
    out.append(_ecc(gpus, sim))
    out.append(_remap(gpus, sim))
    out.append(_retired(gpus, sim))
    out.append(_temperature(gpus, thresholds, sim))
    out.append(_throttle(gpus, sim))
    out.append(_persistence(gpus, sim))
    out.append(_pcie(gpus, expect, sim))
    out.append(_nvlink(gpus, expect, sim))
    out.append(_versions(record, gpus, expect, sim))
    if any(g.get("recovery_action") for g in gpus):
        out.append(_recovery(gpus, sim))
    return out


# `nvidia-smi -q` "GPU Recovery Action" (R570+), the state Xid 154 announces: what the driver requires now.
RECOVERY_BY_TEXT = (("reboot", "reboot"), ("reset", "reset-gpu"), ("drain", "reset-gpu"))


def _recovery(gpus, sim):
    bad, ev = [], {}
    for g in gpus:
        text = g.get("recovery_action")
        ev[_gid(g)] = text
        if text and text.lower() not in ("none", "n/a"):
            action = next((a for word, a in RECOVERY_BY_TEXT if word in text.lower()), "inspect-hardware")
            bad.append((_gid(g), "fail", action, "driver requires recovery action %r" % text))
    return _aggregate("gpu.recovery", bad, sim, "no recovery action pending", ev)


def _count(gpus, expect, sim, src):
    want = expect.get("count") or 0
    ev = {"found": len(gpus), "expected": want, "source": src}
    if want and len(gpus) < want:
        return result("gpu.count", "fail", "%d of %d GPUs visible" % (len(gpus), want), "reboot", ev,
                      simulated=sim)
    if want and len(gpus) > want:
        return result("gpu.count", "warn", "%d GPUs visible, site file expects %d" % (len(gpus), want),
                      evidence=ev, simulated=sim)
    return result("gpu.count", "ok", "%d GPUs visible" % len(gpus), evidence=ev, simulated=sim)


def _model(gpus, expect, sim):
    want = expect.get("model") or ""
    names = {_gid(g): g.get("name") for g in gpus}
    if not want:
        return result("gpu.model", "skipped", "no model in the site file", evidence=names, simulated=sim)
    bad = [(g, "fail", "drain", "is %r, expected %r" % (n, want)) for g, n in names.items() if n != want]
    return _aggregate("gpu.model", bad, sim, "all GPUs are %s" % want, names)


def _ecc(gpus, sim):
    bad, ev = [], {}
    for g in gpus:
        ecc = g.get("ecc") or {}
        ev[_gid(g)] = dict(ecc, mode=g.get("ecc_mode"))
        if (ecc.get("volatile_dbe") or 0) > 0:
            bad.append((_gid(g), "fail", "reset-gpu", "%d uncorrectable ECC errors since the last reset"
                        % ecc["volatile_dbe"]))
        elif (ecc.get("aggregate_dbe") or 0) > 0:
            bad.append((_gid(g), "warn", "inspect-hardware", "%d uncorrectable ECC errors over its life"
                        % ecc["aggregate_dbe"]))
        elif g.get("ecc_mode") is False:
            bad.append((_gid(g), "warn", "reset-gpu", "ECC is disabled"))
    return _aggregate("gpu.ecc", bad, sim, "no uncorrectable ECC errors", ev)


def _remap(gpus, sim):
    bad, ev, known = [], {}, False
    for g in gpus:
        rr = g.get("remapped_rows")
        ev[_gid(g)] = rr
        if rr is None:
            continue
        known = True
        if rr.get("failure"):
            bad.append((_gid(g), "fail", "inspect-hardware", "row remapping failed"))
        elif rr.get("pending"):
            bad.append((_gid(g), "fail", "reset-gpu", "row remapping pending (%s uncorrectable rows)"
                        % rr.get("uncorrectable")))
    if not known:
        return result("gpu.remap", "skipped", "row remapping not reported (pre-Ampere GPU or source)",
                      evidence=ev, simulated=sim)
    return _aggregate("gpu.remap", bad, sim, "no row remapping pending or failed", ev)


def _retired(gpus, sim):
    bad, ev, known = [], {}, False
    for g in gpus:
        rp = g.get("retired_pages")
        ev[_gid(g)] = rp
        if rp is None:
            continue
        known = True
        total = (rp.get("sbe") or 0) + (rp.get("dbe") or 0)
        if total >= RETIRED_PAGES_RMA:
            bad.append((_gid(g), "fail", "inspect-hardware", "%d retired pages" % total))
        elif rp.get("pending"):
            bad.append((_gid(g), "fail", "reset-gpu", "page retirement pending"))
    if not known:
        return result("gpu.retired_pages", "skipped", "page retirement not reported (Ampere+ remaps rows)",
                      evidence=ev, simulated=sim)
    return _aggregate("gpu.retired_pages", bad, sim, "no retired pages pending", ev)


def _temperature(gpus, th, sim):
    warn_c, fail_c = th.get("gpu_temp_warn_c", 85), th.get("gpu_temp_fail_c", 95)
    hbm_fail_c = th.get("hbm_temp_fail_c", 95)
    bad, ev = [], {}
    for g in gpus:
        t, m, slow = g.get("temperature_c"), g.get("memory_temperature_c"), g.get("slowdown_temp_c")
        margin = None if t is None or slow is None else slow - t
        ev[_gid(g)] = {"gpu_c": t, "hbm_c": m, "slowdown_c": slow, "margin_c": margin}
        if t is not None and t >= fail_c:
            bad.append((_gid(g), "fail", "inspect-hardware", "GPU at %s C (limit %s C)" % (t, fail_c)))
        elif m is not None and m >= hbm_fail_c:
            bad.append((_gid(g), "fail", "inspect-hardware", "HBM at %s C (limit %s C)" % (m, hbm_fail_c)))
        elif t is not None and t >= warn_c:
            bad.append((_gid(g), "warn", "inspect-hardware", "GPU at %s C (warning at %s C)" % (t, warn_c)))
        elif margin is not None and margin < TEMP_MARGIN_WARN_C:
            bad.append((_gid(g), "warn", "inspect-hardware", "%s C below its slowdown temperature" % margin))
    if all(e["gpu_c"] is None for e in ev.values()):
        return result("gpu.temperature", "skipped", "temperature not reported", evidence=ev, simulated=sim)
    return _aggregate("gpu.temperature", bad, sim, "temperatures within limits", ev)


def _throttle(gpus, sim):
    bad, ev = [], {}
    for g in gpus:
        reasons = g.get("throttle_reasons")
        ev[_gid(g)] = reasons
        hw = [r for r in reasons or () if r in HW_THROTTLE]
        sw = [r for r in reasons or () if r in SW_THERMAL]
        if hw:
            bad.append((_gid(g), "warn", "inspect-hardware", "clocks held down by " + ", ".join(hw)))
        elif sw:
            bad.append((_gid(g), "warn", "none", "clocks held down by " + ", ".join(sw)))
    return _aggregate("gpu.throttle", bad, sim, "no hardware or thermal clock slowdown", ev)


def _persistence(gpus, sim):
    ev = {_gid(g): g.get("persistence_mode") for g in gpus}
    bad = [(gid, "warn", "none", "persistence mode off (start nvidia-persistenced)")
           for gid, on in ev.items() if on is False]
    return _aggregate("gpu.persistence", bad, sim, "persistence mode on", ev)


def _pcie(gpus, expect, sim):
    bad, ev = [], {}
    for g in gpus:
        p = g.get("pcie") or {}
        want_gen = expect.get("pcie_gen") or p.get("max_gen")
        want_width = expect.get("pcie_width") or p.get("max_width")
        ev[_gid(g)] = dict(p, expected_gen=want_gen, expected_width=want_width)
        idle = "gpu_idle" in (g.get("throttle_reasons") or ())
        if p.get("width") is not None and want_width and p["width"] < want_width:
            bad.append((_gid(g), "fail", "inspect-hardware", "PCIe link x%s, expected x%s"
                        % (p["width"], want_width)))
        elif p.get("gen") is not None and want_gen and p["gen"] < want_gen and not idle:
            # An idle GPU lowers its link generation to save power: only a busy GPU's gen is judged.
            bad.append((_gid(g), "warn", "inspect-hardware", "PCIe gen%s, expected gen%s"
                        % (p["gen"], want_gen)))
    return _aggregate("gpu.pcie", bad, sim, "PCIe links at full width", ev)


def _nvlink(gpus, expect, sim):
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
        if want and active < want:
            bad.append((_gid(g), "fail", "reset-gpu", "%d of %d NVLinks active" % (active, want)))
        elif errors["recovery_errors"]:
            bad.append((_gid(g), "warn", "inspect-hardware", "%d NVLink recovery errors"
                        % errors["recovery_errors"]))
        elif errors["crc_errors"] or errors["replay_errors"]:
            bad.append((_gid(g), "warn", "none", "NVLink CRC %d, replay %d errors"
                        % (errors["crc_errors"], errors["replay_errors"])))
    if not known:
        return result("gpu.nvlink", "skipped", "NVLink state not reported by this source", simulated=sim)
    return _aggregate("gpu.nvlink", bad, sim, "NVLinks active, no errors", ev)


def _versions(record, gpus, expect, sim):
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
    return _aggregate("gpu.versions", bad, sim, "driver %s" % record.get("driver_version"), ev)
