"""GPU collectors (NVML, nvidia-smi CSV, simulated JSON) and the judging of their values."""

import json
import stat
import types
from pathlib import Path

import pynvml
import pytest

from fleetctl.checks.payload.common import Deadline
from fleetctl.checks.payload.gpu_collect import (GpuSourceError, collect_gpus, collect_nvidia_smi,
                                                 collect_nvml, load_simulated, parse_smi_csv)
from fleetctl.checks.payload.gpu_judge import judge_gpus
from fleetctl.checks.payload.runner import _gpu_group

FIX = Path(__file__).parents[1] / "fixtures" / "checks"
H100 = {"count": 8, "model": "NVIDIA H100 80GB HBM3", "driver_version": "550.54.15", "nvlinks": 18}
TH = {"gpu_temp_warn_c": 85, "gpu_temp_fail_c": 95, "hbm_temp_fail_c": 95}


def by_code(results):
    return {r["code"]: r for r in results}


# ------------------------------------------------------------------ NVML
def fake_nvml(gpus, driver="550.54.15", cuda=12040):
    """FAKE NVML, clearly not the library: the real pynvml module's constants, exception classes and
    field-value struct, with getters returning values documented for an H100 SXM (NVML API reference,
    H100 datasheet). It exists because this machine has no GPU; the collector code path is the real one."""
    m = types.SimpleNamespace(**{k: getattr(pynvml, k) for k in dir(pynvml)
                                 if k.startswith(("NVML_", "NVMLError"))})
    unsupported = pynvml.NVMLError_NotSupported

    def dev(h, key, *default):
        value = gpus[h].get(key, *default)
        if value is unsupported:
            raise pynvml.NVMLError_NotSupported()
        return value

    def field_values(h, ids):
        fv = pynvml.c_nvmlFieldValue_t()
        fv.fieldId, fv.nvmlReturn = ids[0], 0
        fv.value.uiVal = gpus[h]["hbm"]
        return [fv]

    m.calls = []
    m.nvmlInit = lambda: m.calls.append("init")
    m.nvmlShutdown = lambda: m.calls.append("shutdown")
    m.nvmlSystemGetDriverVersion = lambda: driver
    m.nvmlSystemGetCudaDriverVersion = lambda: cuda
    m.nvmlDeviceGetCount = lambda: len(gpus)
    m.nvmlDeviceGetHandleByIndex = lambda i: i
    m.nvmlDeviceGetName = lambda h: dev(h, "name")
    m.nvmlDeviceGetUUID = lambda h: "GPU-5e0f6c1a-%04d-4000-8000-000000000000" % h
    m.nvmlDeviceGetSerial = lambda h: "16549220%05d" % h
    m.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(busId=b"00000000:%02X:00.0" % (0x18 + h))
    m.nvmlDeviceGetVbiosVersion = lambda h: "96.00.89.00.01"
    m.nvmlDeviceGetPersistenceMode = lambda h: 1
    m.nvmlDeviceGetTemperature = lambda h, s: dev(h, "temp")
    m.nvmlDeviceGetFieldValues = field_values
    m.nvmlDeviceGetTemperatureThreshold = lambda h, t: {1: 87, 0: 92}[t]
    m.nvmlDeviceGetPowerUsage = lambda h: 71520  # mW
    m.nvmlDeviceGetEnforcedPowerLimit = lambda h: 700000
    m.nvmlDeviceGetEccMode = lambda h: (1, 1)
    m.nvmlDeviceGetTotalEccErrors = lambda h, kind, counter: dev(h, "ecc")[(kind, counter)]
    m.nvmlDeviceGetRemappedRows = lambda h: dev(h, "remap", (0, 0, 0, 0))
    m.nvmlDeviceGetRetiredPages = lambda h, cause: dev(h, "retired", unsupported)
    m.nvmlDeviceGetRetiredPagesPendingStatus = lambda h: dev(h, "retired", unsupported)
    m.nvmlDeviceGetCurrentClocksEventReasons = lambda h: dev(h, "reasons", 0x1)
    m.nvmlDeviceGetCurrPcieLinkGeneration = lambda h: 5
    m.nvmlDeviceGetMaxPcieLinkGeneration = lambda h: 5
    m.nvmlDeviceGetCurrPcieLinkWidth = lambda h: dev(h, "width", 16)
    m.nvmlDeviceGetMaxPcieLinkWidth = lambda h: 16

    def nvlink_state(h, link):
        if link >= 18:
            raise pynvml.NVMLError_InvalidArgument()
        return 0 if link in dev(h, "down_links", ()) else 1

    m.nvmlDeviceGetNvLinkState = nvlink_state
    m.nvmlDeviceGetNvLinkErrorCounter = lambda h, link, c: dev(h, "nvlink_err", {}).get((link, c), 0)
    return m


def h100(**over):
    g = {"name": "NVIDIA H100 80GB HBM3", "temp": 34, "hbm": 41,
         "ecc": {(0, 0): 0, (1, 0): 0, (0, 1): 3, (1, 1): 0}}
    g.update(over)
    return g


def test_nvml_record_of_a_healthy_h100_node():
    nvml = fake_nvml([h100() for _ in range(8)])
    rec = collect_nvml(nvml)
    assert nvml.calls == ["init", "shutdown"]
    assert rec["driver_version"] == "550.54.15" and rec["cuda_version"] == "12.4"
    g = rec["gpus"][0]
    assert g["pci_bus_id"] == "00000000:18:00.0" and g["memory_temperature_c"] == 41
    assert g["slowdown_temp_c"] == 87 and g["power_w"] == pytest.approx(71.52)
    assert g["ecc"]["aggregate_sbe"] == 3 and g["retired_pages"] is None  # H100: remaps rows instead
    assert g["throttle_reasons"] == ["gpu_idle"] and len(g["nvlink"]) == 18
    r = by_code(judge_gpus(rec, H100, TH))
    assert all(x["status"] in ("ok", "skipped") for x in r.values()), [x for x in r.values()
                                                                       if x["status"] not in ("ok", "skipped")]
    assert r["gpu.retired_pages"]["status"] == "skipped"


def test_nvml_faults_are_judged():
    gpus = [h100() for _ in range(8)]
    gpus[2] = h100(ecc={(0, 0): 0, (1, 0): 4, (0, 1): 0, (1, 1): 4}, remap=(0, 4, 1, 0))
    gpus[5] = h100(width=8, down_links=(3, 4), nvlink_err={(0, 1): 2})
    gpus[6] = h100(temp=96, reasons=0x40 | 0x1)
    gpus[7] = h100(remap=(0, 9, 0, 1), temp=pynvml.NVMLError_NotSupported)
    r = by_code(judge_gpus(collect_nvml(fake_nvml(gpus)), H100, TH))
    assert (r["gpu.ecc"]["status"], r["gpu.ecc"]["action"], r["gpu.ecc"]["subject"]) == ("fail", "reset-gpu", "gpu2")
    assert r["gpu.remap"]["status"] == "fail" and r["gpu.remap"]["action"] == "inspect-hardware"
    assert r["gpu.remap"]["subject"] == "gpu2,gpu7"
    assert r["gpu.pcie"]["subject"] == "gpu5" and r["gpu.pcie"]["status"] == "fail"
    assert r["gpu.nvlink"]["subject"] == "gpu5" and "16 of 18" in r["gpu.nvlink"]["message"]
    assert r["gpu.temperature"]["subject"] == "gpu6" and r["gpu.temperature"]["status"] == "fail"
    assert r["gpu.temperature"]["evidence"]["gpu7"]["gpu_c"] is None  # not supported reads as None
    assert "hw_thermal_slowdown" in r["gpu.throttle"]["message"]


def test_real_pynvml_without_a_driver_falls_back_and_reports_both(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi either
    with pytest.raises(GpuSourceError) as exc:
        collect_gpus({}, Deadline(0))
    assert "NVML" in str(exc.value) and "nvidia-smi" in str(exc.value)


# ------------------------------------------------------------------ nvidia-smi
def test_smi_csv_h100_with_faults():
    rec = parse_smi_csv((FIX / "smi-h100.csv").read_text())
    assert len(rec["gpus"]) == 8 and rec["driver_version"] == "550.54.15"
    g = rec["gpus"][3]
    assert g["ecc"]["volatile_dbe"] == 2 and g["retired_pages"] is None and g["remapped_rows"] is None
    assert rec["gpus"][6]["throttle_reasons"] == ["hw_thermal_slowdown"]
    r = by_code(judge_gpus(rec, H100, TH))
    assert r["gpu.ecc"]["subject"] == "gpu3" and r["gpu.ecc"]["status"] == "fail"
    assert r["gpu.pcie"]["subject"] == "gpu5"  # x8; the idle GPUs at gen1 are not faults
    assert r["gpu.temperature"]["subject"] == "gpu6"
    assert r["gpu.nvlink"]["status"] == "skipped" and r["gpu.remap"]["status"] == "skipped"


def test_smi_csv_v100_retired_pages_and_persistence():
    rec = parse_smi_csv((FIX / "smi-v100.csv").read_text())
    g0, g1 = rec["gpus"]
    assert g0["memory_temperature_c"] is None and g0["retired_pages"] == {"sbe": 2, "dbe": 0, "pending": False}
    r = by_code(judge_gpus(rec, {"count": 2}, TH))
    assert r["gpu.retired_pages"]["subject"] == "gpu1" and r["gpu.retired_pages"]["action"] == "reset-gpu"
    assert r["gpu.persistence"]["status"] == "warn" and r["gpu.persistence"]["subject"] == "gpu1"
    assert r["gpu.model"]["status"] == "skipped"


def test_smi_csv_with_wrong_field_count_is_a_source_error():
    with pytest.raises(GpuSourceError, match="line 1: 3 fields"):
        parse_smi_csv("0, NVIDIA H100, x\n")


def test_nvidia_smi_subprocess_path(tmp_path):
    """A stand-in nvidia-smi executable (FAKE: prints the fixtures) drives the real subprocess path."""
    exe = tmp_path / "nvidia-smi"
    exe.write_text("#!/bin/sh\ncase \"$1\" in\n"
                   f"  --query-gpu=*) cat {FIX / 'smi-h100.csv'} ;;\n"
                   f"  --query-remapped-rows=*) cat {FIX / 'smi-remapped-rows.csv'} ;;\n"
                   f"  nvlink) cat {FIX / 'smi-nvlink-status.txt'} ;;\n"
                   "  *) exit 2 ;;\nesac\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    rec = collect_nvidia_smi(Deadline(10), str(exe))
    assert rec["gpus"][3]["remapped_rows"] == {"correctable": 1, "uncorrectable": 2, "pending": True,
                                               "failure": False}
    assert rec["gpus"][0]["remapped_rows"]["pending"] is False
    assert len(rec["gpus"][5]["nvlink"]) == 18 and sum(l["active"] for l in rec["gpus"][5]["nvlink"]) == 16
    nvlink = by_code(judge_gpus(rec, H100, TH))["gpu.nvlink"]
    assert nvlink["status"] == "fail" and nvlink["subject"] == "gpu5"
    broken = tmp_path / "broken-smi"
    broken.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed because it couldn'\"'\"'t communicate with "
                      "the NVIDIA driver.' >&2\nexit 9\n")
    broken.chmod(0o755)
    with pytest.raises(GpuSourceError, match="communicate with the NVIDIA driver"):
        collect_nvidia_smi(Deadline(10), str(broken))


# ------------------------------------------------------------------ simulated (lab)
SIM_GPU = json.loads((Path(__file__).parents[2] / "docs" / "simulated-gpus.md").read_text()
                     .split("```json", 1)[1].split("```", 1)[0])


def test_simulated_file_from_the_documented_format(tmp_path):
    p = tmp_path / "gpus.json"
    doc = dict(SIM_GPU, gpus=[dict(SIM_GPU["gpus"][0], index=i) for i in range(4)])
    doc["gpus"][1] = dict(doc["gpus"][1], remapped_rows={"correctable": 0, "uncorrectable": 1,
                                                         "pending": True, "failure": False})
    p.write_text(json.dumps(doc))
    args = {"simulated_gpus": str(p), "gpus": {"count": 4, "model": "NVIDIA H100 80GB HBM3"}, "thresholds": TH}
    r = by_code(_gpu_group({"args": args, "facts": {}, "deadline": Deadline(0)}))
    assert all(x.get("simulated") for x in r.values())  # the runner marks what the lab's file fed
    assert not any("simulated" in x for x in judge_gpus(collect_gpus(args, Deadline(0)), args["gpus"], TH))
    assert r["gpu.remap"]["subject"] == "gpu1" and r["gpu.count"]["status"] == "ok"


@pytest.mark.parametrize("content,match", [(None, "No such file"), ("{not json", "not valid JSON"),
                                           ('{"gpus": 3}', 'no "gpus" list')])
def test_bad_simulated_file(tmp_path, content, match):
    p = tmp_path / "gpus.json"
    if content is not None:
        p.write_text(content)
    with pytest.raises(GpuSourceError, match=match):
        load_simulated(str(p))


def test_missing_gpus_fail_the_count():
    rec = {"source": "nvml", "driver_version": "550.54.15", "gpus": [dict(SIM_GPU["gpus"][0], index=i)
                                                                     for i in range(7)]}
    r = by_code(judge_gpus(rec, H100, TH))
    assert (r["gpu.count"]["status"], r["gpu.count"]["action"]) == ("fail", "reboot")
    assert r["gpu.nvlink"]["status"] == "fail"  # the documented sample has one NVLink, 18 expected
    rec["driver_version"] = "535.129.03"
    assert by_code(judge_gpus(rec, H100, TH))["gpu.versions"]["status"] == "fail"


def test_recorder_without_a_gpu_says_so_in_one_line(tmp_path, capsys):
    import shutil
    from fleetctl.checks.record import main
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has nvidia-smi: the recorder would record")
    assert main([str(tmp_path / "rec")]) == 3
    err = capsys.readouterr().err.strip()
    assert err.startswith("fleetctl.checks.record: nothing to record: NVML:") and "\n" not in err
