"""`fleetctl lens shards`, `lens merge --once` and `lens run --shard` in-process, on the example
lab site: the layout as JSON, exit codes, bad input as one line (no traceback)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from fleetctl.cli import run

SITE = str(Path(__file__).resolve().parents[2] / "site_configs" / "lab-example.toml")


def test_shards_as_json_and_without_a_size(capsys):
    assert run(["--site", SITE, "--format", "json", "lens", "shards", "--max-hosts", "2"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(s["name"], s["nodes"], s["pods"]) for s in doc["shards"]] == [("shard-0", "node[1-4]", 2)]
    assert doc["shared_switches"] == [] and doc["unmeasured_uplinks"] == []
    assert run(["--site", SITE, "lens", "shards"]) == 3
    err = capsys.readouterr().err
    assert "lens.shard_max_hosts" in err and "Traceback" not in err


def _document(directory: Path, lost: float) -> None:
    """shard-0's window now: 10 probes, `lost` of them."""
    (directory / "shard-window.json").write_text(json.dumps({
        "version": 1, "shard": "shard-0", "t_end": time.time(), "window_s": 1.0, "probes": 10.0,
        "lost": lost, "switches": {}, "findings": []}))


def test_merge_once_names_each_shard_left_out(tmp_path, capsys):
    assert run(["--site", SITE, "lens", "merge", "--once", "--max-hosts", "2"]) == 3
    assert "--from" in capsys.readouterr().err
    d = tmp_path / "shard-0"
    d.mkdir()
    _document(d, lost=11.0)
    rc = run(["--site", SITE, "--format", "json", "lens", "merge", "--once", "--max-hosts", "2",
              "--root", str(tmp_path)])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 1 and doc["shards_missing"] == ["shard-0"] and doc["findings"] == []
    assert "lost more probes than it counted" in doc["why_missing"][str(d / "shard-window.json")]
    _document(d, lost=0.0)
    rc = run(["--site", SITE, "--format", "json", "lens", "merge", "--once", "--max-hosts", "2",
              "--from", str(d)])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["shards_used"] == ["shard-0"] and doc["shards_missing"] == []


def test_run_refuses_an_unknown_shard_and_a_nodeset_beside_one(tmp_path, capsys):
    site = tmp_path / "site.toml"
    site.write_text(Path(SITE).read_text().replace("[lens]\n", "[lens]\nshard_max_hosts = 2\n", 1)
                    if "[lens]\n" in Path(SITE).read_text()
                    else Path(SITE).read_text() + "\n[lens]\nshard_max_hosts = 2\n")
    args = ["--site", str(site), "lens", "run", "--foreground", "--state-dir", str(tmp_path / "s")]
    assert run([*args, "--shard", "shard-9"]) == 3
    assert "no shard 'shard-9'" in capsys.readouterr().err
    assert run([*args, "--shard", "shard-0", "node[1-2]"]) == 3
    assert "not both" in capsys.readouterr().err
