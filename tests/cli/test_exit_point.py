"""The one exit point (fleetctl.cli.run): whatever a command raises ends as one line and a
documented exit code, never a traceback; -vv shows the traceback."""

from __future__ import annotations

import json

import pytest

import fleetctl.config
from fleetctl.cli import run
from fleetctl.errors import EXIT_ERROR


@pytest.mark.parametrize("raised, kind, words", [
    (MemoryError(), "resource", "out of memory"),
    (KeyError("nodes"), "internal", "internal error: KeyError: 'nodes'"),
    (ZeroDivisionError("division by zero\nsecond line"), "internal", "ZeroDivisionError: division by zero"),
])
def test_an_unexpected_exception_is_one_line_and_code_3(monkeypatch, capsys, tmp_path, raised, kind,
                                                      words):
    def boom(*_a, **_k):
        raise raised

    monkeypatch.setattr(fleetctl.config, "load_site", boom)
    site = tmp_path / "site.toml"
    site.write_text("")
    assert run(["config", "check", "--site", str(site)]) == EXIT_ERROR
    err = capsys.readouterr().err
    assert "Traceback" not in err and words in err and "second line" not in err
    assert run(["--format", "json", "config", "check", "--site", str(site)]) == EXIT_ERROR
    out = capsys.readouterr().out
    assert json.loads(out)["error"]["kind"] == kind


def test_the_traceback_with_vv(monkeypatch, capsys, tmp_path):
    def boom(*_a, **_k):
        raise KeyError("nodes")

    monkeypatch.setattr(fleetctl.config, "load_site", boom)
    site = tmp_path / "site.toml"
    site.write_text("")
    assert run(["-vv", "config", "check", "--site", str(site)]) == EXIT_ERROR
    assert "Traceback" in capsys.readouterr().err


def test_a_click_usage_error_is_one_line_with_a_hint_and_json_when_asked(capsys):
    assert run(["exec", "--bogus", "n1", "--", "true"]) == 3
    captured = capsys.readouterr()
    assert captured.err.splitlines() == ["fleetctl: error: No such option '--bogus'. Did you mean '--verbose'?",
                                         "  hint: `fleetctl exec --help` for usage"]
    assert run(["exec", "--format", "json", "--bogus", "n1", "--", "true"]) == 3
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["kind"] == "usage" and "--bogus" in error["message"]
