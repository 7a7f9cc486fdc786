"""Every fleetctl command line in the documentation's code blocks (README.md, docs/*.md,
prolog_epilog/README.md) parses: its command exists and every option it uses is one the command
takes. A renamed option or command fails here, not in an operator's shell. The JSON examples are
checked against the real validators and outputs in test_docs_json.py."""

from __future__ import annotations

import pytest

from fleetctl.cli import run
from tests.support.docs import LINES, words_of


@pytest.mark.parametrize("doc, line", LINES, ids=[f"{d}: {ln[:60]}" for d, ln in LINES])
def test_documented_command_parses(doc, line, capsys):
    argv = [w for w in words_of(line) if not w.startswith("<") and "..." not in w]
    assert run([*argv, "--help"]) == 0, (doc, line, capsys.readouterr().err)


def test_the_docs_hold_enough_commands_to_mean_something():
    assert len(LINES) >= 50
