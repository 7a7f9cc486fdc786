"""`fleetctl run`'s refusals, each one line with exit 3 before anything starts (the runs themselves:
tests/integration/test_run_lab.py)."""

from __future__ import annotations

import json
import sys

import pytest

from fleetctl.cli import run
from fleetctl.errors import EXIT_ERROR


@pytest.fixture(autouse=True)
def no_slurm(monkeypatch):
    for name in ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_JOB_NODELIST", "SLURM_NODELIST", "MASTER_ADDR",
                 "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("argv, message", [
    (["run", "--standbys", "1", "--store", "127.0.0.1:29999", "--", "true"], "leaves no training rank of 1"),
    (["run", "--store", "127.0.0.1:99999", "--", "true"], "port must be a number in 1..65535"),
    (["run", "--", "true"], "no control store address"),
])
def test_bad_launches_are_refused_in_one_line(argv, message, capsys):
    assert run(["--format", "json", *argv]) == EXIT_ERROR
    out = capsys.readouterr()
    assert message in json.loads(out.out)["error"]["message"]
    assert "Traceback" not in out.err


def test_a_slot_outside_the_task_count_is_refused(monkeypatch, capsys):
    monkeypatch.setenv("SLURM_PROCID", "4")
    monkeypatch.setenv("SLURM_NTASKS", "4")
    assert run(["run", "--store", "127.0.0.1:29999", "--", sys.executable, "-c", "pass"]) == EXIT_ERROR
    assert "SLURM_PROCID=4 outside SLURM_NTASKS=4" in capsys.readouterr().err


def test_a_command_is_required(capsys):
    assert run(["run", "--standbys", "1"]) == EXIT_ERROR
    assert "Missing argument" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["run", "--join", "127.0.0.1:29999", "--standbys", "1", "--", "true"], "takes no --standbys"),
    (["run", "--join", "node1", "--", "true"], "--join 'node1': give HOST:PORT"),
    (["run", "--replenish", "1", "--replenish-args", "-p 'gpu", "--store", "127.0.0.1:29999", "--", "true"],
     "--replenish-args \"-p 'gpu\": No closing quotation"),
])
def test_bad_joins_and_replenish_options_are_refused_in_one_line(argv, message, capsys):
    assert run(["--format", "json", *argv]) == EXIT_ERROR
    out = capsys.readouterr()
    assert message in json.loads(out.out)["error"]["message"]
    assert "Traceback" not in out.err


def test_joining_a_store_that_serves_no_run_is_refused(capsys):
    import datetime

    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", 0, None, True, datetime.timedelta(seconds=5), wait_for_workers=False)
    assert run(["run", "--join", f"127.0.0.1:{store.port}", "--", "true"]) == EXIT_ERROR
    assert f"127.0.0.1:{store.port} is not a `fleetctl run` control store" in capsys.readouterr().err
