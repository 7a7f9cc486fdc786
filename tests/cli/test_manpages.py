"""Man pages generated from the CLI (fleetctl.cli.manpages; the .deb ships them): one per command,
every option of the command on its page, and roff that groff reads without a warning."""

from __future__ import annotations

import subprocess

import click

from fleetctl.cli import cli
from fleetctl.cli.manpages import escape, page, write_all
from fleetctl.cli.tree import commands


def test_one_page_per_command_with_every_option(tmp_path):
    written = write_all(tmp_path)
    found = commands(cli, hidden=False)
    assert len(written) == len(found) > 40
    names = {p.name for p in written}
    assert {"fleetctl.1", "fleetctl-audit.1", "fleetctl-audit-run.1", "fleetctl-lens-events.1"} <= names
    for path, cmd in found:
        text = (tmp_path / f"{'-'.join(['fleetctl', *path])}.1").read_text()
        assert ".SH NAME" in text and ".SH SYNOPSIS" in text and ".SH EXIT STATUS" in text
        for param in cmd.params:
            if isinstance(param, click.Option) and not param.hidden:
                assert escape(param.opts[0]) in text, (path, param.opts[0])


def test_groff_reads_every_page_without_a_warning(tmp_path):
    for target in write_all(tmp_path):
        result = subprocess.run(["groff", "-man", "-ww", "-z", str(target)], capture_output=True,
                                text=True, timeout=30)
        assert result.returncode == 0 and result.stderr == "", (target.name, result.stderr)


def test_roff_requests_in_help_text_stay_text():
    assert escape(".SH not a section\n'also\nback\\slash") == "\\&.SH not a section\n\\&'also\nback\\eslash"


def test_examples_are_a_section_of_their_own():
    cmd = cli.get_command(click.Context(cli), "exec")
    text = page(["exec"], cmd)
    assert ".SH EXAMPLES\n.nf\nfleetctl exec" in text
