"""Every command's help ends with Examples (issue 23), and every example is a command line fleetctl
parses: an option renamed in the CLI fails here, not in an operator's shell."""

from __future__ import annotations

import re
import shlex

import click
import pytest

from fleetctl.cli import cli, run
from fleetctl.cli.tree import commands


def leaf_commands():
    return [(" ".join(path), cmd) for path, cmd in commands(cli) if not isinstance(cmd, click.Group)]


COMMANDS = leaf_commands()


def examples(cmd) -> list[str]:
    text = cmd.help or ""
    if "Examples:" not in text:
        return []
    lines = text.split("Examples:", 1)[1].splitlines()
    return [line.strip() for line in lines if line.strip()]


@pytest.mark.parametrize("path, cmd", COMMANDS, ids=[p for p, _ in COMMANDS])
def test_every_command_has_examples_that_parse(path, cmd, capsys):
    lines = examples(cmd)
    assert lines, f"`fleetctl {path}` has no Examples section"
    checked = 0
    for line in lines:
        inner = re.search(r"\$\((fleetctl[^)]*)\)", line)  # eval "$(fleetctl lab env)"
        words = shlex.split(inner.group(1) if inner else line, comments=True)
        words = words[:words.index("|")] if "|" in words else words  # the first command of a pipe
        words = [w for w in words if not re.match(r"^[A-Z_]+=", w)]  # drop VAR=value
        if not words or words[0] != "fleetctl":
            continue
        options = words[1:words.index("--")] if "--" in words else words[1:]  # not the remote command
        assert run([*options, "--help"]) == 0, (line, capsys.readouterr().err)
        capsys.readouterr()
        checked += 1
    assert checked, f"`fleetctl {path}`: no example is a fleetctl command line"
