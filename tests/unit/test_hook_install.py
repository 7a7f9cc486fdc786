"""Which fleetctl the installed hooks run (fleetctl.audit.hook_install.running_fleetctl)."""

from __future__ import annotations

import zipfile

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
