"""`fleetctl lens keygen` and the refusals of `fleetctl lens agent` and `lens run --agents
registered`: every bad input is one line and exit 3 before anything runs."""

from __future__ import annotations

import json
import os
from pathlib import Path

from fleetctl.cli import run
from fleetctl.errors import EXIT_ERROR, EXIT_OK

SITE = str(Path(__file__).resolve().parents[2] / "site_configs" / "roce-leaf-spine.toml")


def test_keygen_writes_a_private_key_once(tmp_path, capsys):
    key = tmp_path / "lens.key"
    assert run(["--format", "json", "lens", "keygen", str(key)]) == EXIT_OK
    assert json.loads(capsys.readouterr().out)["written"] == str(key)
    assert os.stat(key).st_mode & 0o777 == 0o600 and len(key.read_bytes()) == 32
    before = key.read_bytes()
    assert run(["lens", "keygen", str(key)]) == EXIT_ERROR
    assert "cannot create the lens key" in capsys.readouterr().err
    assert key.read_bytes() == before


def test_agent_refuses_bad_inputs_before_it_connects(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("FLEETCTL_SITE", raising=False)
    monkeypatch.delenv("FLEETCTL_NODE", raising=False)
    key = tmp_path / "lens.key"
    run(["lens", "keygen", str(key)])
    capsys.readouterr()
    cases = [
        (["--key-file", str(key)], "no coordinator"),
        (["--coordinator", "mgmt1", "--key-file", str(key)], "not ADDRESS:PORT"),
        (["--coordinator", "mgmt1:99999", "--key-file", str(key)], "not ADDRESS:PORT"),
        (["--coordinator", "mgmt1:61250", "--key-file", str(tmp_path / "none")], "cannot read"),
        (["--coordinator", "mgmt1:61250", "--key-file", str(key), "--node", "../etc"],
         "not a valid node name"),
        (["--coordinator", "mgmt1:61250", "--key-file", str(key), "--node", "n" * 100],
         "not a valid node name"),
    ]
    for args, why in cases:
        assert run(["lens", "agent", *args]) == EXIT_ERROR, args
        err = capsys.readouterr().err
        assert why in err and "Traceback" not in err, (args, err)
    os.chmod(key, 0o644)
    assert run(["lens", "agent", "--coordinator", "mgmt1:61250", "--key-file", str(key)]) == EXIT_ERROR
    assert "readable by others" in capsys.readouterr().err


def test_run_registered_refuses_a_bad_key_or_address_before_it_daemonises(tmp_path, capsys):
    state = str(tmp_path / "state")
    assert run(["--site", SITE, "lens", "run", "--agents", "registered", "--key-file",
                str(tmp_path / "none"), "--state-dir", state]) == EXIT_ERROR
    assert "cannot read the lens key" in capsys.readouterr().err
    key = tmp_path / "lens.key"
    run(["lens", "keygen", str(key)])
    capsys.readouterr()
    assert run(["--site", SITE, "lens", "run", "--agents", "registered", "--key-file", str(key),
                "--listen", "0.0.0.0", "--state-dir", state]) == EXIT_ERROR
    assert "not ADDRESS:PORT" in capsys.readouterr().err
    assert not (tmp_path / "state" / "lens.pid").exists()
