"""Which fleetctl the installed hooks run (fleetctl.audit.hook_install.running_fleetctl)."""

from __future__ import annotations

import zipfile
from pathlib import Path

from fleetctl.audit.hook_install import running_fleetctl


def test_the_node_bundle_names_itself(tmp_path):
    bundle = tmp_path / "fleetctl-0.1.0.pyz"
    with zipfile.ZipFile(bundle, "w") as zf:
        zf.writestr("__main__.py", "")
    assert running_fleetctl(str(bundle)) == str(bundle)


def test_a_fleetctl_script_started_by_path_names_itself(tmp_path):
    script = tmp_path / "bin" / "fleetctl"
    script.parent.mkdir()
    script.write_text("#!/usr/bin/python3\n")
    link = tmp_path / "fleetctl"
    link.symlink_to(script)
    assert running_fleetctl(str(link)) == str(script)  # the real file, not a link that may move


def test_anything_else_falls_back_to_path_or_this_python(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    (tmp_path / "fleetctl").write_text("#!/bin/sh\n")
    (tmp_path / "fleetctl").chmod(0o755)
    assert running_fleetctl(str(tmp_path / "pytest")) == str(tmp_path / "fleetctl")


def test_hostile_fleetctl_paths_are_refused_before_anything_is_written(tmp_path, capsys):
    from fleetctl.cli import run

    site = str(Path(__file__).resolve().parents[2] / "site_configs" / "roce-leaf-spine.toml")
    target = tmp_path / "hooks"
    for bad in ("bin/fleetctl", "/opt/it's/fleetctl", "/opt/a\nFLEETCTL_FAIL_CLOSED=1", "/" + "a" * 5000):
        rc = run(["--site", site, "hook", "install", str(target), "--fleetctl", bad])
        err = capsys.readouterr().err
        assert rc == 3 and "Traceback" not in err and len(err) < 1000, (bad[:20], err)
        assert not target.exists()
