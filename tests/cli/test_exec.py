"""`fleetctl exec` in-process, over the local transport (real processes). The ssh path of the CLI is
tested against a real sshd in tests/unit/test_fanout_ssh.py, srun and ssh over the lab in
tests/integration/test_exec_lab.py."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from fleetctl.cli import cli, run
from fleetctl.cli.app import Application


@pytest.fixture
def site(tmp_path, monkeypatch):
    # No lab site leaking in: the lab may be up on this machine while tests run.
    path = tmp_path / "site.toml"
    path.write_text('[cluster]\nname = "t"\n[access]\ntransport = "local"\ncommand_timeout = 20\n'
                    '[[node_classes]]\nname = "c"\nnodes = "n[1-4]"\n')
    return str(path)


def test_identical_outputs_are_folded(site, capsys):
    assert run(["--site", site, "exec", "n[1-3,5]", "--", "echo same"]) == 0
    out = capsys.readouterr().out
    assert out == "---------------\nn[1-3,5] (4)\n---------------\nsame\n"


def test_a_failed_host_gives_exit_2_and_a_summary(site, capsys):
    code = run(["--site", site, "exec", "n[1-4]", "--", 'echo x; [ "$FLEETCTL_NODE" != n3 ]'])
    assert code == 2
    captured = capsys.readouterr()
    assert "n[1-2,4] (3)" in captured.out and "n3 (1) failed exit 1" in captured.out
    assert captured.err.strip() == "fleetctl: 4 nodes: 3 ok: n[1-2,4], 1 failed: n3"


def test_json_after_the_subcommand(site, capsys):
    assert run(["exec", "n[1-2]", "--site", site, "--format", "json", "--", "printf", "%s", "a b"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["transport"] == "local" and data["command"] == ["printf", "%s", "a b"]
    assert data["summary"].pop("duration_s") > 0
    assert data["summary"] == {"total": 2, "ok": 2, "by_status": {"ok": 2},
                               "nodes_by_status": {"ok": "n[1-2]"}}
    assert [r["node"] for r in data["results"]] == ["n1", "n2"]
    assert data["results"][0]["stdout"] == "a b" and data["results"][0]["exit_code"] == 0
    assert data["groups"] == [{"nodes": "n[1-2]", "count": 2, "status": "ok", "exit_code": 0,
                               "stdout": "a b", "stderr": "", "error": ""}]


def test_no_fold_prints_one_line_per_node_and_line(site, capsys):
    assert run(["--site", site, "exec", "--no-fold", "n[1-2]", "--", 'echo "a $FLEETCTL_NODE"; echo b']) == 0
    assert capsys.readouterr().out.splitlines() == ["n1: a n1", "n1: b", "n2: a n2", "n2: b"]


def test_timeout_option(site, capsys):
    code = run(["--site", site, "exec", "--timeout", "0.5", "n[1-3]", "--",
                '[ "$FLEETCTL_NODE" = n2 ] && sleep 20; echo ok'])
    assert code == 2
    captured = capsys.readouterr()
    assert "n2 (1) timeout" in captured.out and "command timed out after 0.5 s" in captured.out
    assert "1 timeout: n2" in captured.err


def test_output_is_printed_verbatim(site, capsys):
    text = "[bold]not markup[/bold] :smile: " + "w" * 200
    assert run(["--site", site, "exec", "n1", "--", "printf", "%s\\n", text]) == 0
    assert text + "\n" in capsys.readouterr().out


def test_without_any_site_file_the_defaults_apply(tmp_path, monkeypatch, capsys):
    assert run(["exec", "-t", "local", "--fanout", "1", "localhost", "--", "echo", "hi"]) == 0
    assert "hi" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (["n[1-", "--", "true"], "invalid node set 'n[1-'"),
    (["-t", "telnet", "n1", "--", "true"], "'telnet' is not one of"),
    (["--fanout", "0", "n1", "--", "true"], "--fanout"),
    (["--timeout", "-1", "n1", "--", "true"], "--timeout"),
    (["n1"], "Missing argument 'COMMAND..."),
])
def test_bad_input_is_one_clear_line_and_exit_3(site, capsys, args, message):
    assert run(["--site", site, "exec", *args]) == 3
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_broken_site_file_is_exit_3(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text('[cluster]\nname = "x"\n[access]\ntransport = "rsh"\n')
    assert run(["--site", str(bad), "exec", "n1", "--", "true"]) == 3
    err = capsys.readouterr().err
    assert str(bad) in err and "access.transport" in err


def test_clirunner_in_process(site):
    result = CliRunner().invoke(cli, ["--site", site, "exec", "n[1-2]", "--", "echo", "$x"],
                                obj=Application(), catch_exceptions=False)
    assert result.exit_code == 0 and "n[1-2] (2)" in result.output and "$x" in result.output


def test_progress_bar_only_on_a_terminal_and_only_for_long_runs(monkeypatch):
    import io
    import time

    from rich.console import Console

    from fleetctl.cli.progress import ProgressBar
    from fleetctl.fanout.result import HostResult

    app = Application()
    buffer = io.StringIO()
    app.__dict__["err_console"] = Console(file=buffer, force_terminal=True, width=60)
    with ProgressBar(app, 3, "exec", after_s=0.05, terminal=True) as bar:
        bar.advance(HostResult("n1", "ok", 0))
        deadline = time.monotonic() + 30  # past the delay the bar shows (importing rich may be slow)
        while bar._bar is None and time.monotonic() < deadline:
            time.sleep(0.02)
        bar.advance(HostResult("n2", "ok", 0))
        bar.advance(HostResult("n3", "ok", 0))
    assert "3/3" in buffer.getvalue() or "2/3" in buffer.getvalue()

    assert not ProgressBar(Application(), 3, "exec", terminal=False).enabled  # not a terminal
    assert not ProgressBar(Application(), 1, "exec", terminal=True).enabled  # one node
    quiet = Application()
    quiet.format = "json"
    assert not ProgressBar(quiet, 3, "exec", terminal=True).enabled  # JSON mode


def test_plain_output_does_not_import_rich(site):
    """Piped human output is written without rich: part of a short run's start-up budget."""
    import subprocess
    import sys

    code = ("import sys; from fleetctl.cli import run; rc = run(sys.argv[1:]); "
            "print('RICH' if any(m.startswith('rich') for m in sys.modules) else 'NORICH'); sys.exit(rc)")
    out = subprocess.run([sys.executable, "-c", code, "--site", site, "exec", "n[1-2]", "--", "echo hi"],
                         capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["---------------", "n[1-2] (2)", "---------------", "hi", "NORICH"]
