"""`fleetctl lab env` exports the lab site file's check data paths as the FLEETCTL_CHECKS_* variables
that a run without a site file reads (docs/discover.md), so that `unset FLEETCTL_SITE; fleetctl audit`
checks the lab's simulated data by hand as the tests do."""

from __future__ import annotations

import json

import pytest

from fleetctl.errors import LabError
from fleetctl.inventory.from_slurm import CHECK_ENV
from fleetctl.lab import lifecycle, sitefile
from fleetctl.lab.topology import LabParams, build_layout


def test_lab_env_exports_the_check_paths_of_its_site_file(tmp_path, monkeypatch):
    monkeypatch.setenv("FLEETCTL_LAB_DIR", str(tmp_path))
    with pytest.raises(LabError):
        lifecycle.env()
    (tmp_path / "state.json").write_text(json.dumps({"status": "up"}))
    layout = build_layout(LabParams(gpus_per_host=2, ssh=False))
    doc = sitefile.site_document(layout, tmp_path, slurm_conf="/x/slurm.conf", ssh={}, cpus=2)
    (tmp_path / "site.toml").write_text(sitefile.to_toml(doc))
    env = lifecycle.env()
    assert {k: env[v] for k, v in CHECK_ENV.items()} == doc["checks"]
    assert env["FLEETCTL_CHECKS_KERNEL_LOG"] == f"{tmp_path}/hosts/{{node}}/kern.log"
    (tmp_path / "site.toml").write_text("checks = [")
    with pytest.raises(LabError, match="site.toml"):
        lifecycle.env()
