"""`fleetctl lens records` in-process over a real debug store (lens.debug_records): filters,
JSON and human views, nothing stored, bad input and planted files as one line."""

from __future__ import annotations

import json

import numpy as np

from fleetctl.cli import run
from fleetctl.lens.debugstore import DebugStore
from fleetctl.model.fabric import FLOW_DTYPE, PROBE_DTYPE

T = 1_800_000_000.0
HOSTILE = "n[red]x\x1b[2J:0"


def _store(state_dir, windows: int = 3, nic0: str = "node1:mlx5_0") -> None:
    flows = np.zeros(16, FLOW_DTYPE)
    flows["flow"] = np.arange(16)
    flows["src_nic"] = np.where(flows["flow"] < 8, 0, 1)
    flows["dst_nic"] = 1 - flows["src_nic"]
    flows["dst_nic"][15] = -1  # a loop probe: to a switch and back
    flows["sport"] = 61300 + flows["flow"] % 8
    store = DebugStore(state_dir / "debug-records")
    store.set_layout(flows, [nic0, "node2:mlx5_0"], [nic0.split(":")[0], "node2"])
    for w in range(windows):
        p = np.zeros(16, PROBE_DTYPE)
        p["flow"] = np.arange(16)
        p["src_nic"], p["dst_nic"] = flows["src_nic"], flows["dst_nic"]
        p["sport"], p["seq"] = flows["sport"], w
        p["t_send"] = int((T + w) * 1e9) + np.arange(16) * 1000
        p["t_remote_rx"], p["t_remote_tx"] = p["t_send"] + 7_000, p["t_send"] + 9_000
        p["t_recv"] = p["t_send"] + 15_000
        p["t_remote_rx"][15] = p["t_remote_tx"][15] = 0
        p["lost"][3] = 2
        p["t_remote_rx"][3] = p["t_remote_tx"][3] = p["t_recv"][3] = 0
        store.append(p, T + w, T + w + 1)
    store.flush()


def _json(args, capsys) -> dict:
    assert run(["--format", "json", "lens", "records", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_records_json_and_filters(tmp_path, capsys):
    _store(tmp_path)
    doc = _json(["--state-dir", str(tmp_path), "--limit", "1000"], capsys)
    assert len(doc["records"]) == 48 and doc["files"] == 1 and doc["skipped"] == []
    first = doc["records"][0]
    assert first["time"] == "2027-01-15T08:00:00.000Z" and first["src"] == "node1:mlx5_0"
    assert first["rtt_us"] == 13.0 and first["result"] == "answered"
    lost = [r for r in doc["records"] if r["flow"] == 3]
    assert {r["result"] for r in lost} == {"lost back"} and lost[0]["rtt_us"] is None
    loop = [r for r in doc["records"] if r["flow"] == 15]
    assert loop[0]["dst"] == "loop" and loop[0]["rtt_us"] == 15.0 and loop[0]["fwd_raw_us"] is None
    assert [r["seq"] for r in _json(["--state-dir", str(tmp_path), "--flow", "5"],
                                     capsys)["records"]] == [0, 1, 2]
    assert len(_json(["--state-dir", str(tmp_path), "--limit", "5"], capsys)["records"]) == 5
    since = _json(["--state-dir", str(tmp_path), "--since", "2027-01-15T08:00:02Z"], capsys)
    assert {r["seq"] for r in since["records"]} == {2}
    # node1 -> node2 flows 0-7, node2 -> node1 8-14, node2's loop 15: from or to the node
    assert len(_json(["--state-dir", str(tmp_path), "--node", "node2", "--limit", "1000"],
                     capsys)["records"]) == 48
    assert len(_json(["--state-dir", str(tmp_path), "--node", "node1", "--limit", "1000"],
                     capsys)["records"]) == 45
    assert _json(["--state-dir", str(tmp_path), "--node", "node[5-9]"], capsys)["records"] == []


def test_records_human_view_and_nothing_stored(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert run(["lens", "records", "--state-dir", str(tmp_path), "--no-color"]) == 0
    assert "no sampled records" in capsys.readouterr().out
    _store(tmp_path)
    assert run(["lens", "records", "--state-dir", str(tmp_path), "--no-color", "--flow", "3"]) == 0
    out = capsys.readouterr().out
    assert "lost back" in out and "node1:mlx5_0" in out and "3 records from 1 of 1 files" in out


def test_bad_input_is_one_line_exit_3(tmp_path, capsys):
    for args, why in ((["--since", "yesterday-ish"], "--since"), (["--node", "a b"], "--node"),
                      (["--flow", "-1"], "Invalid value"), (["--limit", "0"], "Invalid value")):
        assert run(["lens", "records", "--state-dir", str(tmp_path), *args]) == 3
        err = capsys.readouterr().err
        assert why in err and "Traceback" not in err, err
    assert run(["lens", "records", "--state-dir", str(tmp_path / "typo")]) == 3
    assert "does not exist" in capsys.readouterr().err


def test_planted_files_and_strings_are_skipped_or_printed_literally(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    _store(tmp_path, windows=1, nic0=HOSTILE)
    (tmp_path / "debug-records" / "debug-20270101T000000Z.h5").write_bytes(b"\x89HDF garbage")
    assert run(["lens", "records", "--state-dir", str(tmp_path), "--no-color"]) == 0
    out = capsys.readouterr().out
    assert "skipped debug-20270101T000000Z.h5" in out and "[red]" in out and "\x1b" not in out
    doc = _json(["--state-dir", str(tmp_path)], capsys)
    assert len(doc["records"]) == 16 and len(doc["skipped"]) == 1
