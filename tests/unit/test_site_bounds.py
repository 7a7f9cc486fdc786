"""Bounds on what site loading and the hooks read (docs/security.md): file kinds and sizes, switch
hierarchy depth, the hook's node name and job id as file-name parts."""

from __future__ import annotations

import os
import threading
import time

import pytest

from fleetctl.config import load_site
from fleetctl.config.files import read_bounded
from fleetctl.errors import ConfigError, UsageError

SITE = '[cluster]\nname = "t"\n[slurm]\ntopology_conf = "topology.conf"\n' \
       '[[node_classes]]\nname = "c"\nnodes = "n[1-2]"\n'


def test_a_fifo_as_site_file_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "site.toml"
    os.mkfifo(fifo)
    # open() of a FIFO blocks until a writer appears: give it one that writes nothing, then check
    # that the loader refused the FIFO instead of reading it.
    opener = threading.Thread(target=lambda: open(fifo, "wb").close(), daemon=True)
    opener.start()
    with pytest.raises(ConfigError, match="site file is not a regular file"):
        load_site(fifo)


def test_a_device_as_topology_conf_is_refused(tmp_path):
    (tmp_path / "site.toml").write_text(SITE.replace('"topology.conf"', '"/dev/zero"'))
    start = time.monotonic()
    with pytest.raises(ConfigError, match="topology.conf is not a regular file"):
        load_site(tmp_path / "site.toml")
    assert time.monotonic() - start < 2


def test_a_file_over_the_limit_is_refused(tmp_path):
    path = tmp_path / "big.toml"
    path.write_text("#" * 100)
    assert read_bounded(path, "x", limit=100) == "#" * 100
    with pytest.raises(ConfigError, match="x larger than"):
        read_bounded(path, "x", limit=99)


def test_a_long_switch_chain_is_a_config_error_not_a_recursion_error(tmp_path):
    lines = ["SwitchName=s0 Nodes=n[1-2]"] + [f"SwitchName=s{i} Switches=s{i - 1}" for i in range(1, 3000)]
    (tmp_path / "topology.conf").write_text("\n".join(reversed(lines)) + "\n")  # the top first
    (tmp_path / "site.toml").write_text(SITE)
    with pytest.raises(ConfigError, match="more than 4 tiers below it"):
        load_site(tmp_path / "site.toml")


def test_hook_node_name_and_job_id_are_checked(monkeypatch):
    from fleetctl.audit import hooks

    monkeypatch.setenv("SLURMD_NODENAME", "../../../../tmp/x")
    with pytest.raises(UsageError, match="invalid node name"):
        hooks.hook_node()
    monkeypatch.setenv("SLURMD_NODENAME", "gpu01")
    assert hooks.hook_node() == "gpu01"
    for bad in ("../1", "1/../../x", "12 3", "x" * 30, ""):
        monkeypatch.setenv("SLURM_JOB_ID", bad)
        assert hooks.hook_job_id() == ""
    for good in ("123", "123_4"):
        monkeypatch.setenv("SLURM_JOB_ID", good)
        assert hooks.hook_job_id() == good


def test_a_fifo_without_a_writer_is_refused_at_once(tmp_path):
    """No writer ever comes (a Prolog would hang): the open must not wait for one."""
    fifo = tmp_path / "ib.txt"
    os.mkfifo(fifo)
    outcome = []

    def read():
        try:
            read_bounded(fifo, "ibnetdiscover output")
        except ConfigError as exc:
            outcome.append(exc.message)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(5)
    if reader.is_alive():
        open(fifo, "wb").close()  # release the blocked reader before failing
        pytest.fail("read_bounded blocked on a FIFO without a writer")
    assert outcome and "not a regular file" in outcome[0]
