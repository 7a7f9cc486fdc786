"""`fleetctl audit` as a command group, in-process: the default command, `analyze` as a real
subcommand, a node named `analyze`, `--local`, and the message when no site file is given."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from fleetctl.cli import cli, run
from fleetctl.cli.app import Application

from simsite import sim_site  # noqa: E402  (tests/cli)


@pytest.fixture
def site(tmp_path):
    return sim_site(tmp_path, ["n1", "analyze", "run"])


def invoke(args, env=None):
    """click's runner, exceptions not caught: a traceback fails the test instead of hiding."""
    result = CliRunner().invoke(cli, args, obj=Application(), catch_exceptions=False, env=env,
                                standalone_mode=False)
    return result


def audited(capsys, *args) -> tuple[int, dict]:
    capsys.readouterr()
    rc = run(["--format", "json", *args])
    return rc, json.loads(capsys.readouterr().out)


def test_no_site_file_names_the_three_ways(capsys):
    assert run(["audit", "n1"]) == 3
    err = capsys.readouterr().err
    assert ('no site file: give --site, set FLEETCTL_SITE, or for the lab run eval "$(fleetctl lab env)"'
            in err), err


def test_site_from_the_environment(site, capsys, monkeypatch):
    monkeypatch.setenv("FLEETCTL_SITE", str(site))
    rc, report = audited(capsys, "audit", "n1", "--level", "quick", "--since", "1h")
    assert rc == 0 and [n["node"] for n in report["nodes"]] == ["n1"]


def test_default_command_is_run_with_options_before_or_after(site, capsys):
    for args in (["audit", "n1", "--level", "quick"], ["audit", "--level", "quick", "n1"],
                 ["audit", "run", "n1", "--level", "quick"]):
        rc, report = audited(capsys, "--site", str(site), *args, "--since", "1h")
        assert rc == 0, args
        assert report["schema"] == "fleetctl.audit/1" and [n["node"] for n in report["nodes"]] == ["n1"]


def test_no_node_set_audits_every_node_of_the_site(site, capsys):
    rc, report = audited(capsys, "--site", str(site), "audit", "--level", "quick", "--since", "1h")
    assert rc == 0 and sorted(n["node"] for n in report["nodes"]) == ["analyze", "n1", "run"]


@pytest.mark.parametrize("args", [["audit", "run", "analyze", "--level", "quick"],
                                  ["audit", "--level", "quick", "--", "analyze"],
                                  ["audit", "run", "--level", "quick", "--", "analyze"]])
def test_a_node_named_analyze_can_be_audited(site, capsys, args):
    rc, report = audited(capsys, "--site", str(site), *args)
    assert rc == 0 and [n["node"] for n in report["nodes"]] == ["analyze"]


def test_a_node_named_run_is_audited_after_run(site, capsys):
    rc, report = audited(capsys, "--site", str(site), "audit", "run", "run", "--level", "quick")
    assert rc == 0 and [n["node"] for n in report["nodes"]] == ["run"]


def test_analyze_is_a_subcommand(tmp_path, capsys):
    missing = tmp_path / "nothing.h5"
    assert run(["audit", "analyze", str(missing)]) == 3  # the subcommand ran: no site needed
    err = capsys.readouterr().err
    assert str(missing) in err and "no site file" not in err
    assert run(["audit", "analyze"]) == 3  # FILE.h5 is required
    assert "Missing argument 'FILE.h5'" in capsys.readouterr().err


def test_analyze_with_options_before_it_says_how_to_write_it(site, capsys):
    assert run(["--site", str(site), "audit", "--solver", "vote", "analyze", "x.h5"]) == 3
    err = capsys.readouterr().err
    assert "`analyze` is a subcommand: fleetctl audit analyze FILE.h5" in err
    assert "fleetctl audit run analyze" in err


def test_group_help_lists_both_commands():
    result = invoke(["audit", "--help"])
    assert "run" in result.output and "analyze" in result.output
    assert "fleetctl audit -- analyze" in result.output


def test_audit_local_checks_this_machine_in_process(site, capsys, monkeypatch):
    monkeypatch.setenv("SLURMD_NODENAME", "n1")
    rc, report = audited(capsys, "--site", str(site), "audit", "--local", "--level", "quick")
    assert rc == 0
    (node,) = report["nodes"]
    assert node["node"] == "n1" and node["transport"] == "local" and node["simulated"] is True
    assert {r["code"] for r in node["results"]} >= {"gpu.count"}


def test_audit_local_with_node_and_a_failure(site, tmp_path, capsys):
    (tmp_path / "analyze" / "kern.log").write_text(
        "2099-01-01T00:00:00,000000+00:00 NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=x, "
        "GPU has fallen off the bus.\n")
    rc, report = audited(capsys, "--site", str(site), "audit", "--local", "--node", "analyze",
                         "--level", "quick")
    assert rc == 2
    (node,) = report["nodes"]
    assert node["node"] == "analyze" and node["status"] == "fail"
    assert any(r["code"] == "xid.79" and r["status"] == "fail" for r in node["results"])


def test_audit_local_refuses_a_node_set_and_a_bad_name(site, capsys):
    assert run(["--site", str(site), "audit", "--local", "n1"]) == 3
    assert "--local checks this machine" in capsys.readouterr().err
    assert run(["--site", str(site), "audit", "--local", "--node", "../../x"]) == 3
    assert "invalid --node '../../x'" in capsys.readouterr().err


def test_click_runner_without_caught_exceptions(site):
    result = invoke(["--site", str(site), "audit", "n1", "--level", "quick", "--format", "json"])
    assert result.return_value == 0
    assert json.loads(result.output)["summary"]["nodes"] == 1
