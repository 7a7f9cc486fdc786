"""The shipped systemd units (prolog_epilog/*.service, docs/deploy.md): sandboxed, and their
ExecStart lines are fleetctl command lines that fleetctl's own parser accepts (an option renamed in
the CLI would otherwise break a unit only on a cluster). systemd itself is not on this machine;
`systemd-analyze verify` is documented for where it is."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

UNITS = sorted((Path(__file__).resolve().parents[2] / "prolog_epilog").glob("*.service"))


def directives(unit: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    text = unit.read_text().replace("\\\n", " ")
    for line in text.splitlines():
        if "=" in line and not line.lstrip().startswith(("#", "[")):
            key, _, value = line.partition("=")
            out.setdefault(key.strip(), []).append(value.strip())
    return out


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_units_are_sandboxed_and_find_fleetctl_on_path(unit):
    d = directives(unit)
    assert d["NoNewPrivileges"] == ["yes"] and d["ProtectSystem"] == ["strict"]
    assert d.get("ReadWritePaths"), "a strict unit must name what it writes"
    for line in d["ExecStart"] + d.get("ExecStop", []):
        assert line.startswith("/usr/bin/env fleetctl "), line


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_exec_lines_parse_as_fleetctl_commands(unit, capsys):
    """Every option of the line must exist (click refuses an unknown one before it reads --help)."""
    from fleetctl.cli import run

    for line in directives(unit)["ExecStart"] + directives(unit).get("ExecStop", []):
        assert run([*shlex.split(line)[2:], "--help"]) == 0, (line, capsys.readouterr().err)
        assert "Usage: fleetctl" in capsys.readouterr().out


@pytest.mark.parametrize("unit", UNITS, ids=[u.name for u in UNITS])
def test_documentation_names_the_man_page_of_the_command_it_runs(unit):
    from fleetctl.cli import cli
    from fleetctl.cli.tree import commands

    pages = {"-".join(["fleetctl", *path]) for path, _ in commands(cli)}
    [doc] = directives(unit)["Documentation"]
    page = doc.removeprefix("man:").removesuffix("(1)")
    assert doc.startswith("man:") and page in pages, doc
    words = directives(unit)["ExecStart"][0].split()
    names = []  # the command words after `fleetctl`, up to the first option
    for word in words[words.index("fleetctl") + 1:]:
        if word.startswith("-"):
            break
        names.append(word)
    assert page.startswith("-".join(["fleetctl", *names])), (page, names)  # `audit` runs `audit run`
