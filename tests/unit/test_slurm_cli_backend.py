"""CliBackend failure handling with the real Slurm client commands (no slurmctld needed):
a controller that refuses connections, one that accepts and never answers, missing commands,
and input that must be refused before any command runs."""

from __future__ import annotations

import shutil
import socket

import pytest

from fleetctl.errors import SlurmError, UsageError
from fleetctl.slurm import get_backend
from fleetctl.slurm.cli_backend import CliBackend

pytestmark = pytest.mark.skipif(shutil.which("scontrol") is None, reason="Slurm client commands not installed")


def conf(tmp_path, port: int, message_timeout: int = 2) -> str:
    path = tmp_path / "slurm.conf"
    path.write_text(f"ClusterName=t\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort={port}\n"
                    "AuthType=auth/none\nCredType=cred/none\n"
                    f"MessageTimeout={message_timeout}\n"
                    "NodeName=n1 CPUs=1\nPartitionName=p Nodes=n1 Default=YES\n")
    return str(path)


def test_refused_connection_is_slurmctld_not_reachable(tmp_path):
    backend = CliBackend(slurm_conf=conf(tmp_path, 9), timeout=20)
    for call in (backend.nodes, backend.jobs, backend.reservations, backend.ping):
        with pytest.raises(SlurmError) as info:
            call()
        assert info.value.message.startswith("slurmctld not reachable (SLURM_CONF=")
        assert "Unable to contact slurm controller" in info.value.message or " is DOWN" in info.value.message
        assert info.value.hint


def test_silent_controller_times_out(tmp_path):
    with socket.socket() as server:  # accepts (backlog) but never answers
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        backend = CliBackend(slurm_conf=conf(tmp_path, server.getsockname()[1], 10), timeout=1.0)
        with pytest.raises(SlurmError, match=r"^`scontrol show node --oneliner` timed out after 1 s"):
            backend.nodes()


def test_a_slurm_conf_that_is_not_there_is_named_before_slurm_runs(tmp_path, monkeypatch):
    """Slurm's own commands retry a missing slurm.conf for 60 s before saying so."""
    with pytest.raises(SlurmError, match=r"^slurm.conf .*/missing.conf: no such file \(slurm.conf in the site file\)"):
        CliBackend(slurm_conf=str(tmp_path / "missing.conf"), bindir=str(tmp_path / "never-run")).nodes()
    monkeypatch.setenv("SLURM_CONF", str(tmp_path))
    with pytest.raises(SlurmError, match=r"not a regular file \(SLURM_CONF\)"):
        CliBackend().ping()


def test_missing_commands(tmp_path):
    with pytest.raises(SlurmError, match=f"^scontrol not found in {tmp_path}"):
        CliBackend(bindir=str(tmp_path)).nodes()


def test_bad_input_refused_before_running_anything(tmp_path):
    backend = CliBackend(bindir=str(tmp_path))  # would fail with "not found" if it ran anything
    with pytest.raises(UsageError, match="invalid reservation name 'a b'"):
        backend.create_reservation("a b", ["n1"])
    with pytest.raises(UsageError, match="invalid reservation flag 'maint;x'"):
        backend.create_reservation("r", ["n1"], flags=["maint;x"])
    with pytest.raises(UsageError, match="no nodes given"):
        backend.create_reservation("r", [])
    with pytest.raises(UsageError, match="nothing to update"):
        backend.update_reservation("r")
    with pytest.raises(UsageError, match="invalid job id '12; rm'"):
        backend.requeue("12; rm")
    with pytest.raises(UsageError, match="invalid drain code 'two words'"):
        backend.drain(["n1"], "two words")
    with pytest.raises(UsageError, match="drain: no nodes given"):
        backend.drain([], "x")
    assert backend.nodes([]) == []


def test_registry():
    assert isinstance(get_backend("cli", drain_prefix="nhc"), CliBackend)
    with pytest.raises(Exception, match="unknown Slurm backend 'pyslurm'; choose one of cli"):
        get_backend("pyslurm")


def test_swap_commands_refuse_bad_input_before_running_anything(tmp_path):
    backend = CliBackend(bindir=str(tmp_path))
    with pytest.raises(UsageError, match="invalid job id '1;reboot'"):
        backend.requeue_excluding("1;reboot", ["n1"])
    with pytest.raises(UsageError, match="no node to exclude"):
        backend.requeue_excluding("12", [])
    with pytest.raises(UsageError, match="invalid job id"):
        backend.job_record("-1")
    with pytest.raises(UsageError, match="invalid job id"):
        backend.release("12 13")


def test_seconds_until_a_slurm_time_stamp():
    import time

    from fleetctl.slurm.cli_backend import _seconds_until

    soon = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() + 30))
    assert 28 <= _seconds_until(soon) <= 30
    assert _seconds_until("2001-01-01T00:00:00") == 0.0
    assert _seconds_until("Unknown") == 0.0 and _seconds_until("") == 0.0
