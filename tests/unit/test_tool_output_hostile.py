"""The node payload's readers of tool output (nccl-tests, dcgmi diag -j, nvidia-smi nvlink --status)
on hostile or broken output: non-finite numbers, digit runs past int()'s limit, Unicode digits,
floods of lines. Each gives a verdict, never an exception (the payload runs as root in a Prolog)."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from fleetctl.checks.payload.deep import judge_dcgm, judge_nccl, parse_dcgmi_diag, parse_dcgmi_json, parse_nccl_tests
from fleetctl.checks.payload.gpu_collect import merge_smi_nvlink
from fleetctl.checks.payload.gpu_judge import judge_gpus

REAL = Path(__file__).resolve().parents[1] / "data" / "real"
HUGE = "9" * 5000  # past Python's int() digit limit
CELLS = st.sampled_from(["0", "-1", "inf", "nan", "1e400", "-0", "N/A", "2e-07", "9e+999", HUGE, "²", "٣",
                         "1.2.3", "[1,0]<stdout>:", "(head, rank=0)", "GPU", "Link", ":", "#"])


def test_nccl_rows_with_non_finite_and_huge_cells():
    row = "     1048576        262144     float     sum      -1  4366.46    0.24    0.24       {w}  4365.21" \
          "    0.24    0.24       0\n"
    for cell in ("inf", "nan", "1e400", "-5", HUGE):
        p = parse_nccl_tests(row.format(w=cell) + "# Out of bounds values : 0 OK\n# Avg bus bandwidth : 1.2.3\n")
        assert judge_nccl(p, 0, "", 0)["status"] in ("ok", "fail")
    p = parse_nccl_tests(f"{HUGE} {HUGE} float sum -1 1 1 1 0 1 1 1 0\n# Out of bounds values : {HUGE}\n")
    assert judge_nccl(p, 0, "", 0)["status"] == "fail"  # nothing readable is no pass


@settings(max_examples=200, deadline=None, database=None)
@given(st.lists(st.lists(CELLS, min_size=1, max_size=14).map(" ".join), max_size=30))
def test_nccl_any_table_gives_a_verdict(lines):
    sample = (REAL / "nccl-tag-output-rtx5090-socket.txt").read_text().splitlines()
    text = "\n".join(sample[:20] + lines + sample[20:])
    assert judge_nccl(parse_nccl_tests(text), 0, text, 0)["status"] in ("ok", "fail")


def test_dcgm_json_with_hostile_entity_ids_and_statuses():
    doc = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "checks" / "dcgmi-diag-4x-fail.json")
                     .read_text())
    results = doc["DCGM Diagnostic"]["test_categories"][1]["tests"][0]["results"]
    results += [{"entity_group": "GPU", "entity_id": eid, "status": status}
                for eid in (HUGE, -1, 10 ** 30, "٣", None, [1, 2]) for status in ("Fail", None, ["x"])]
    results += [{"entity_group": "GPU", "entity_id": i, "status": "Fail"} for i in range(5000)]
    parsed = parse_dcgmi_json(json.dumps(doc).replace(f'"{HUGE}"', HUGE[:4000]))
    r = judge_dcgm(parsed, 0, "", 2)
    assert r["status"] == "fail" and len(parsed["tests"][1]["gpus"]) <= 64


@settings(max_examples=200, deadline=None, database=None)
@given(st.lists(st.lists(CELLS, min_size=1, max_size=6).map(" ".join), max_size=40))
def test_dcgm_table_any_rows_give_a_verdict(cells):
    text = "\n".join("| %s | %s |" % (c, c) for c in cells)
    doc = parse_dcgmi_json(text) or parse_dcgmi_diag(text)
    assert judge_dcgm(doc, 0, text, 1)["status"] in ("ok", "warn", "fail", "error")


@settings(max_examples=200, deadline=None, database=None)
@given(st.lists(st.lists(CELLS, min_size=1, max_size=5).map(" ".join), max_size=40))
def test_nvlink_any_output_gives_a_verdict(lines):
    text = "\n".join(["GPU 0: x", *lines, f"GPU {HUGE}: y", "\t Link 99999: 1 GB/s",
                      "GPU 1: z", "NVML: Unable to retrieve NVLink information as all links are inActive"])
    record = {"gpus": [{"index": 0, "nvlink": None}, {"index": 1, "nvlink": None}]}
    merge_smi_nvlink(record, text)
    [r] = [r for r in judge_gpus(record, {"nvlinks": 4}, {}) if r["code"] == "gpu.nvlink"]
    assert r["status"] in ("ok", "warn", "fail", "skipped")


def test_nvlink_link_lines_are_bounded_per_gpu():
    text = "GPU 0: x\n" + "\t Link 1: 25 GB/s\n" * 100000
    record = {"gpus": [{"index": 0, "nvlink": None}]}
    merge_smi_nvlink(record, text)
    assert len(record["gpus"][0]["nvlink"]) == 18
