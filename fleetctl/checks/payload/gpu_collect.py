"""GPU state from NVML (nvidia-ml-py), else `nvidia-smi --query-gpu`, else the lab's simulated JSON.

All three produce one record (docs/simulated-gpus.md): {"source", "driver_version", "cuda_version",
"gpus": [...]}. A value the source cannot read is None, never a made-up one.
"""

from __future__ import annotations

import json
import re

from fleetctl.checks.payload.common import run_cmd, to_int  # payload-local
from fleetctl.checks.payload.fabric import (fabric_from_xml, merge_nvlink_errors, nvml_fabric,  # payload-local
                                            parse_smi_fabric_text)  # payload-local

# nvmlClocksEventReasons bits (nvml.h), names as in docs/simulated-gpus.md.
THROTTLE_BITS = (
    (0x1, "gpu_idle"), (0x2, "applications_clocks_setting"), (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"), (0x10, "sync_boost"), (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"), (0x80, "hw_power_brake_slowdown"), (0x100, "display_clock_setting"),
)
NVML_FI_DEV_MEMORY_TEMP = 82  # nvml.h field id: HBM temperature
NVML_NVLINK_MAX_LINKS = 18


class GpuSourceError(Exception):
    """No GPU source could be read (the message says what was tried)."""


def throttle_names(mask):
    if mask is None:
        return None
    return [name for bit, name in THROTTLE_BITS if mask & bit]


def collect_gpus(args, deadline):
    """Pick the source: simulated file (lab) > NVML > nvidia-smi."""
    path = args.get("simulated_gpus")
    if path:
        return load_simulated(path)
    tried = []
    try:
        import pynvml  # nvidia-ml-py, when the node has it
    except ImportError:
        tried.append("pynvml not importable")
    else:
        try:
            return collect_nvml(pynvml)
        except pynvml.NVMLError as exc:
            tried.append("NVML: %s" % exc)
    try:
        return collect_nvidia_smi(deadline, args.get("nvidia_smi") or "nvidia-smi")
    except GpuSourceError as exc:
        tried.append(str(exc))
    raise GpuSourceError("; ".join(tried))


def load_simulated(path):
    try:
        with open(path) as f:
            record = json.load(f)
    except OSError as exc:
        raise GpuSourceError("simulated GPU file %s: %s" % (path, exc.strerror or exc))
    except ValueError as exc:
        raise GpuSourceError("simulated GPU file %s: not valid JSON (%s)" % (path, exc))
    if not isinstance(record, dict) or not isinstance(record.get("gpus"), list):
        raise GpuSourceError("simulated GPU file %s: no \"gpus\" list" % path)
    record["simulated"] = True
    return record


def _nvml_value(nvml, fn, *args):
    """Call one NVML getter; a query the GPU or driver does not support reads as None."""
    try:
        value = fn(*args)
    except nvml.NVMLError:
        return None
    return value.decode() if isinstance(value, bytes) else value


def collect_nvml(nvml):
    nvml.nvmlInit()
    try:
        cuda = _nvml_value(nvml, nvml.nvmlSystemGetCudaDriverVersion)
        record = {
            "source": "nvml",
            "driver_version": _nvml_value(nvml, nvml.nvmlSystemGetDriverVersion),
            "cuda_version": "%d.%d" % (cuda // 1000, cuda % 1000 // 10) if cuda else None,
            "gpus": [],
        }
        for index in range(nvml.nvmlDeviceGetCount()):
            record["gpus"].append(_nvml_gpu(nvml, index))
        return record
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass


def _nvml_gpu(nvml, index):
    h = nvml.nvmlDeviceGetHandleByIndex(index)
    v = lambda fn, *a: _nvml_value(nvml, fn, h, *a)  # noqa: E731 - one getter per line below
    pci = v(nvml.nvmlDeviceGetPciInfo)
    persistence = v(nvml.nvmlDeviceGetPersistenceMode)
    ecc_mode = v(nvml.nvmlDeviceGetEccMode)  # (current, pending)
    remap = v(nvml.nvmlDeviceGetRemappedRows)  # (correctable, uncorrectable, pending, failure)
    power = v(nvml.nvmlDeviceGetPowerUsage)
    limit = v(nvml.nvmlDeviceGetEnforcedPowerLimit)
    reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
        nvml.nvmlDeviceGetCurrentClocksThrottleReasons
    gpu = {
        "index": index,
        "name": v(nvml.nvmlDeviceGetName),
        "uuid": v(nvml.nvmlDeviceGetUUID),
        "serial": v(nvml.nvmlDeviceGetSerial),
        "pci_bus_id": _decode(pci.busId) if pci is not None else None,
        "vbios_version": v(nvml.nvmlDeviceGetVbiosVersion),
        "persistence_mode": None if persistence is None else persistence == 1,
        "temperature_c": v(nvml.nvmlDeviceGetTemperature, nvml.NVML_TEMPERATURE_GPU),
        "memory_temperature_c": _nvml_field(nvml, h, NVML_FI_DEV_MEMORY_TEMP),
        "slowdown_temp_c": v(nvml.nvmlDeviceGetTemperatureThreshold,
                             nvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN),
        "shutdown_temp_c": v(nvml.nvmlDeviceGetTemperatureThreshold,
                             nvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN),
        "power_w": None if power is None else power / 1000.0,
        "power_limit_w": None if limit is None else limit / 1000.0,
        "ecc_mode": None if ecc_mode is None else ecc_mode[0] == 1,
        "ecc": {
            "volatile_sbe": v(nvml.nvmlDeviceGetTotalEccErrors, nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED,
                              nvml.NVML_VOLATILE_ECC),
            "volatile_dbe": v(nvml.nvmlDeviceGetTotalEccErrors, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                              nvml.NVML_VOLATILE_ECC),
            "aggregate_sbe": v(nvml.nvmlDeviceGetTotalEccErrors, nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED,
                               nvml.NVML_AGGREGATE_ECC),
            "aggregate_dbe": v(nvml.nvmlDeviceGetTotalEccErrors,
                               nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_AGGREGATE_ECC),
        },
        "remapped_rows": None if remap is None else {
            "correctable": remap[0], "uncorrectable": remap[1],
            "pending": bool(remap[2]), "failure": bool(remap[3])},
        "retired_pages": _nvml_retired(nvml, h),
        "throttle_reasons": throttle_names(_nvml_value(nvml, reasons, h)),
        "pcie": {"gen": v(nvml.nvmlDeviceGetCurrPcieLinkGeneration),
                 "max_gen": v(nvml.nvmlDeviceGetMaxPcieLinkGeneration),
                 "width": v(nvml.nvmlDeviceGetCurrPcieLinkWidth),
                 "max_width": v(nvml.nvmlDeviceGetMaxPcieLinkWidth)},
        "nvlink": _nvml_nvlinks(nvml, h),
        "fabric": nvml_fabric(nvml, h),
    }
    return gpu


def _decode(value):
    return value.decode() if isinstance(value, bytes) else value


def _nvml_field(nvml, handle, field_id):
    try:
        values = nvml.nvmlDeviceGetFieldValues(handle, [field_id])
    except (nvml.NVMLError, AttributeError):
        return None
    fv = values[0]
    if getattr(fv, "nvmlReturn", 0) != 0:
        return None
    return fv.value.uiVal  # the memory temperature field is an unsigned int


def _nvml_retired(nvml, h):
    """Page retirement exists on pre-Ampere GPUs; Ampere and later use row remapping (None here)."""
    sbe = _nvml_value(nvml, nvml.nvmlDeviceGetRetiredPages, h,
                      nvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
    dbe = _nvml_value(nvml, nvml.nvmlDeviceGetRetiredPages, h,
                      nvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
    if sbe is None and dbe is None:
        return None
    pending = _nvml_value(nvml, nvml.nvmlDeviceGetRetiredPagesPendingStatus, h)
    return {"sbe": len(sbe or ()), "dbe": len(dbe or ()),
            "pending": None if pending is None else pending == 1}


def _nvml_nvlinks(nvml, h):
    links = []
    for link in range(NVML_NVLINK_MAX_LINKS):
        state = _nvml_value(nvml, nvml.nvmlDeviceGetNvLinkState, h, link)
        if state is None:  # link not present on this GPU
            continue
        err = lambda counter: _nvml_value(nvml, nvml.nvmlDeviceGetNvLinkErrorCounter, h, link,  # noqa
                                          counter)
        crc = [err(nvml.NVML_NVLINK_ERROR_DL_CRC_FLIT), err(nvml.NVML_NVLINK_ERROR_DL_CRC_DATA)]
        links.append({"link": link, "active": state == 1,
                      "crc_errors": None if None in crc else sum(crc),
                      "replay_errors": err(nvml.NVML_NVLINK_ERROR_DL_REPLAY),
                      "recovery_errors": err(nvml.NVML_NVLINK_ERROR_DL_RECOVERY)})
    return links


# ---------------------------------------------------------------- nvidia-smi
SMI_FIELDS = (
    "index", "name", "uuid", "serial", "pci.bus_id", "vbios_version", "driver_version",
    "persistence_mode", "temperature.gpu", "temperature.memory", "power.draw", "power.limit",
    "ecc.mode.current", "ecc.errors.corrected.volatile.total", "ecc.errors.uncorrected.volatile.total",
    "ecc.errors.corrected.aggregate.total", "ecc.errors.uncorrected.aggregate.total",
    "retired_pages.single_bit_ecc.count", "retired_pages.double_bit.count", "retired_pages.pending",
    "clocks_throttle_reasons.active", "pcie.link.gen.current", "pcie.link.gen.max",
    "pcie.link.width.current", "pcie.link.width.max",
)
REMAP_FIELDS = ("gpu_bus_id", "remapped_rows.correctable", "remapped_rows.uncorrectable",
                "remapped_rows.pending", "remapped_rows.failure")


def collect_nvidia_smi(deadline, exe="nvidia-smi"):
    rc, out, err = run_cmd([exe, "--query-gpu=" + ",".join(SMI_FIELDS),
                            "--format=csv,noheader,nounits"], deadline, timeout=15)
    if rc != 0:
        # An old driver rejects the whole query for one unknown field: `-q -x` has every field it knows.
        xrc, xout, _ = run_cmd([exe, "-q", "-x"], deadline, timeout=15)
        if xrc == 0:
            try:
                return parse_smi_xml(xout)
            except GpuSourceError:
                pass
        raise GpuSourceError("nvidia-smi: %s" % (err.strip() or out.strip() or "exit %s" % rc))
    record = parse_smi_csv(out)
    rc, out, _ = run_cmd([exe, "--query-remapped-rows=" + ",".join(REMAP_FIELDS),
                          "--format=csv,noheader,nounits"], deadline, timeout=10)
    if rc == 0:  # older drivers and pre-Ampere GPUs have no row remapping: stays None
        merge_smi_remap(record, out)
    rc, out, _ = run_cmd([exe, "nvlink", "--status"], deadline, timeout=10)
    if rc == 0 or NVLINK_ALL_INACTIVE_RE.search(out or ""):  # GPUs without NVLink print nothing:
        merge_smi_nvlink(record, out)                         # nvlink stays None (not judged)
        rc, out, _ = run_cmd([exe, "nvlink", "-e"], deadline, timeout=10)
        if rc == 0:
            merge_nvlink_errors(record, out)
    rc, out, _ = run_cmd([exe, "-q"], deadline, timeout=15)  # the Fabric sections (R550+)
    if rc == 0:
        for gpu, fabric in zip(record["gpus"], parse_smi_fabric_text(out)):
            gpu["fabric"] = fabric
    return record


def _smi_cell(text):
    text = text.strip()
    if not text or text.startswith("[") or text in ("N/A", "Unknown Error"):  # [N/A], [Not Supported]
        return None
    return text


def _smi_num(text, kind=int):
    text = _smi_cell(text)
    try:
        return None if text is None else kind(text)
    except ValueError:
        return None


def _smi_bool(text, yes=("Enabled", "Yes")):
    text = _smi_cell(text)
    return None if text is None else text in yes


def parse_smi_csv(text):
    """Parse `--query-gpu` CSV (noheader, nounits) in SMI_FIELDS order into the GPU record."""
    record = {"source": "nvidia-smi", "driver_version": None, "cuda_version": None, "gpus": []}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(SMI_FIELDS):
            raise GpuSourceError("nvidia-smi CSV line %d: %d fields, expected %d"
                                 % (lineno, len(cells), len(SMI_FIELDS)))
        c = dict(zip(SMI_FIELDS, cells))
        record["driver_version"] = record["driver_version"] or _smi_cell(c["driver_version"])
        mask = _smi_cell(c["clocks_throttle_reasons.active"])
        sbe_pages = _smi_num(c["retired_pages.single_bit_ecc.count"])
        dbe_pages = _smi_num(c["retired_pages.double_bit.count"])
        record["gpus"].append({
            "index": _smi_num(c["index"]), "name": _smi_cell(c["name"]), "uuid": _smi_cell(c["uuid"]),
            "serial": _smi_cell(c["serial"]), "pci_bus_id": _smi_cell(c["pci.bus_id"]),
            "vbios_version": _smi_cell(c["vbios_version"]),
            "persistence_mode": _smi_bool(c["persistence_mode"]),
            "temperature_c": _smi_num(c["temperature.gpu"]),
            "memory_temperature_c": _smi_num(c["temperature.memory"]),
            "slowdown_temp_c": None, "shutdown_temp_c": None,  # not in --query-gpu
            "power_w": _smi_num(c["power.draw"], float), "power_limit_w": _smi_num(c["power.limit"], float),
            "ecc_mode": _smi_bool(c["ecc.mode.current"]),
            "ecc": {"volatile_sbe": _smi_num(c["ecc.errors.corrected.volatile.total"]),
                    "volatile_dbe": _smi_num(c["ecc.errors.uncorrected.volatile.total"]),
                    "aggregate_sbe": _smi_num(c["ecc.errors.corrected.aggregate.total"]),
                    "aggregate_dbe": _smi_num(c["ecc.errors.uncorrected.aggregate.total"])},
            "remapped_rows": None,
            "retired_pages": None if sbe_pages is None and dbe_pages is None else {
                "sbe": sbe_pages or 0, "dbe": dbe_pages or 0,
                "pending": _smi_bool(c["retired_pages.pending"])},
            "throttle_reasons": throttle_names(to_int(mask)) if mask else None,
            "pcie": {"gen": _smi_num(c["pcie.link.gen.current"]), "max_gen": _smi_num(c["pcie.link.gen.max"]),
                     "width": _smi_num(c["pcie.link.width.current"]),
                     "max_width": _smi_num(c["pcie.link.width.max"])},
            "nvlink": None,  # not in --query-gpu; NVML reports it
        })
    return record


def merge_smi_remap(record, text):
    by_bus = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) == len(REMAP_FIELDS):
            by_bus[cells[0].lower()] = cells
    for gpu in record["gpus"]:
        cells = by_bus.get((gpu.get("pci_bus_id") or "").lower())
        if cells:
            gpu["remapped_rows"] = {"correctable": _smi_num(cells[1]), "uncorrectable": _smi_num(cells[2]),
                                    "pending": _smi_bool(cells[3], ("Yes", "yes", "1")),
                                    "failure": _smi_bool(cells[4], ("Yes", "yes", "1"))}


# What nvidia-smi prints under a GPU whose links are all down, instead of Link lines ("NVLink" or
# "Nvlink" by driver; with or without "NVML: ").
MAX_NVLINK_OUTPUT = 1 << 20  # characters; 8 GPUs x 18 links print about 6 KB
NVLINK_ALL_INACTIVE_RE = re.compile(r"unable to retrieve nvlink information as all links are inactive", re.I)


def merge_smi_nvlink(record, text):
    """Link state per GPU from `nvidia-smi nvlink --status` ("Link 3: 26.562 GB/s" or "<inactive>").
    A GPU whose links are all down prints NVML's "all links are inActive" message and no Link line:
    its nvlink is [] (reported, none active), never None (not reported). Error counters are not in
    this output: they stay None (NVML reads them)."""
    links, all_down, current = {}, set(), None
    for line in text[:MAX_NVLINK_OUTPUT].splitlines():
        m = re.match(r"^GPU ([0-9]{1,4}):", line)
        if m:
            current = int(m.group(1))
            links[current] = []
            continue
        if current is None:
            continue
        m = re.match(r"^\s+Link ([0-9]{1,3}): (.*)$", line)
        if m and len(links[current]) < NVML_NVLINK_MAX_LINKS:
            links[current].append({"link": int(m.group(1)), "active": "inactive" not in m.group(2),
                                   "crc_errors": None, "replay_errors": None, "recovery_errors": None})
        elif NVLINK_ALL_INACTIVE_RE.search(line):
            all_down.add(current)
    for gpu in record["gpus"]:
        index = gpu.get("index")
        if links.get(index):
            gpu["nvlink"] = links[index]
        elif index in all_down:
            gpu["nvlink"] = []  # reported: no link active (a header alone, or "does not support", stays None)


# ---------------------------------------------------------------- nvidia-smi -q -x
MAX_SMI_XML = 16 << 20  # characters; 8 GPUs with every section are about 1 MB
XML_THROTTLE = {"gpu_idle": "gpu_idle", "applications_clocks_setting": "applications_clocks_setting",
                "sw_power_cap": "sw_power_cap", "hw_slowdown": "hw_slowdown", "sync_boost": "sync_boost",
                "sw_thermal_slowdown": "sw_thermal_slowdown", "hw_thermal_slowdown": "hw_thermal_slowdown",
                "hw_power_brake_slowdown": "hw_power_brake_slowdown",
                "display_clocks_setting": "display_clock_setting"}


def parse_smi_xml(text):
    """`nvidia-smi -q -x` -> the same GPU record as NVML and the CSV query. Parsed with xml.etree after
    refusing what makes XML dangerous: an internal DTD subset or any ENTITY declaration (entity expansion);
    the external `<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_vNN.dtd">` every driver prints is allowed
    (xml.etree never fetches it). A value the driver prints as N/A is None."""
    import xml.etree.ElementTree as ET
    if len(text) > MAX_SMI_XML:
        raise GpuSourceError("nvidia-smi -q -x: %d characters, more than %d" % (len(text), MAX_SMI_XML))
    head = text[:4096]
    doctype = head.find("<!DOCTYPE")
    if "<!ENTITY" in text or (doctype >= 0 and "[" in head[doctype:head.find(">", doctype) + 1 or None]):
        raise GpuSourceError("nvidia-smi -q -x: refusing a document with an internal DTD or entity declarations")
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise GpuSourceError("nvidia-smi -q -x: not XML (%s)" % exc)
    if root.tag != "nvidia_smi_log":
        raise GpuSourceError("nvidia-smi -q -x: root element <%s>, expected <nvidia_smi_log>" % root.tag[:40])
    record = {"source": "nvidia-smi-xml", "driver_version": _xml_text(root, "driver_version"),
              "cuda_version": _xml_text(root, "cuda_version"), "gpus": []}
    for index, g in enumerate(root.findall("gpu")[:64]):
        record["gpus"].append(_xml_gpu(g, index))
    return record


def _xml_text(node, path):
    el = node.find(path) if node is not None else None
    return _smi_cell(el.text or "") if el is not None and el.text is not None else None


def _xml_num(node, path, kind=int):
    text = _xml_text(node, path)
    if text is None:
        return None
    text = text.split()[0].rstrip("x")  # "45 C", "27.22 W", "16x"
    try:
        return kind(float(text)) if kind is int else kind(text)
    except ValueError:
        return None


def _xml_sum(node, paths):
    values = [_xml_num(node, p) for p in paths if node is not None and node.find(p) is not None]
    values = [v for v in values if v is not None]
    return sum(values) if values else None


def _xml_gpu(g, index):
    ecc = g.find("ecc_errors")
    vol, agg = (ecc.find("volatile"), ecc.find("aggregate")) if ecc is not None else (None, None)
    # Ampere+ schema: sram_/dram_ counters; older: single_bit/double_bit totals.
    sbe_paths = ("sram_correctable", "dram_correctable", "single_bit/total")
    dbe_paths = ("sram_uncorrectable", "sram_uncorrectable_parity", "sram_uncorrectable_secded",
                 "dram_uncorrectable", "double_bit/total")
    rr = g.find("remapped_rows")
    remap = None
    if rr is not None and _xml_text(rr, "remapped_row_pending") is not None:
        remap = {"correctable": _xml_num(rr, "remapped_row_corr"), "uncorrectable": _xml_num(rr, "remapped_row_unc"),
                 "pending": _xml_text(rr, "remapped_row_pending") == "Yes",
                 "failure": _xml_text(rr, "remapped_row_failure") == "Yes"}
    rp = g.find("retired_pages")
    retired = None
    if rp is not None:
        sbe = _xml_num(rp, "multiple_single_bit_retirement/retired_count")
        dbe = _xml_num(rp, "double_bit_retirement/retired_count")
        if sbe is not None or dbe is not None:
            pending = _xml_text(rp, "pending_retirement") or _xml_text(rp, "pending_blacklist")
            retired = {"sbe": sbe or 0, "dbe": dbe or 0, "pending": None if pending is None else pending == "Yes"}
    reasons = g.find("clocks_event_reasons")
    prefix = "clocks_event_reason_"
    if reasons is None:
        reasons, prefix = g.find("clocks_throttle_reasons"), "clocks_throttle_reason_"
    throttle = None
    if reasons is not None:
        throttle = [XML_THROTTLE[el.tag[len(prefix):]] for el in reasons
                    if el.tag.startswith(prefix) and el.tag[len(prefix):] in XML_THROTTLE
                    and (el.text or "").strip() == "Active"]
    power = g.find("gpu_power_readings")
    if power is None:
        power = g.find("power_readings")
    temp = g.find("temperature")
    link = g.find("pci/pci_gpu_link_info")
    return {
        "index": index, "name": _xml_text(g, "product_name"), "uuid": _xml_text(g, "uuid"),
        "serial": _xml_text(g, "serial"), "pci_bus_id": _xml_text(g, "pci/pci_bus_id") or g.get("id"),
        "vbios_version": _xml_text(g, "vbios_version"),
        "persistence_mode": _smi_bool(_xml_text(g, "persistence_mode") or ""),
        "temperature_c": _xml_num(temp, "gpu_temp"), "memory_temperature_c": _xml_num(temp, "memory_temp"),
        "slowdown_temp_c": _xml_num(temp, "gpu_temp_slow_threshold"),
        "shutdown_temp_c": _xml_num(temp, "gpu_temp_max_threshold"),
        "power_w": next((v for v in (_xml_num(power, p, float) for p in
                                     ("power_draw", "instant_power_draw", "average_power_draw")) if v is not None),
                        None),
        "power_limit_w": next((v for v in (_xml_num(power, p, float) for p in
                                           ("current_power_limit", "enforced_power_limit", "power_limit"))
                               if v is not None), None),
        "ecc_mode": _smi_bool(_xml_text(g, "ecc_mode/current_ecc") or ""),
        "ecc": {"volatile_sbe": _xml_sum(vol, sbe_paths), "volatile_dbe": _xml_sum(vol, dbe_paths),
                "aggregate_sbe": _xml_sum(agg, sbe_paths), "aggregate_dbe": _xml_sum(agg, dbe_paths)},
        "remapped_rows": remap, "retired_pages": retired, "throttle_reasons": throttle,
        "pcie": {"gen": _xml_num(link, "pcie_gen/current_link_gen"), "max_gen": _xml_num(link, "pcie_gen/max_link_gen"),
                 "width": _xml_num(link, "link_widths/current_link_width"),
                 "max_width": _xml_num(link, "link_widths/max_link_width")},
        "nvlink": None,  # -q -x has no per-link state; `nvidia-smi nvlink --status` and NVML have it
        "recovery_action": _xml_text(g, "gpu_recovery_action"),
        "fabric": fabric_from_xml(g.find("fabric")),
    }
