"""Man pages from the CLI itself: one page per command (fleetctl-audit-run.1), written as roff from
click's own help, options and Examples, so they cannot drift from `--help`.

    python -m fleetctl.cli.manpages OUTDIR    (scripts/package puts them in the .deb)
"""

from __future__ import annotations

import re
import sys
from datetime import date
from pathlib import Path

import click

from fleetctl import __version__
from fleetctl.cli.tree import commands

EXAMPLES = "Examples:"


def escape(text: str) -> str:
    """Text as roff data: backslashes escaped, a line starting with . or ' not read as a request."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\n".join("\\&" + line if line[:1] in (".", "'") else line for line in text.splitlines())


def _paragraphs(text: str) -> list[str]:
    out = []
    for block in re.split(r"\n\s*\n", text.strip()):
        if block.startswith("\b\n"):  # click's "do not rewrap" marker
            out.append(".nf\n" + escape(block[2:]) + "\n.fi")
        else:
            out.append(escape(" ".join(line.strip() for line in block.splitlines())))
    return out


def page(path: list[str], cmd: click.Command, parent: click.Context | None = None) -> str:
    """One command's page as roff (man(7) macros)."""
    name = "-".join(["fleetctl", *path])
    ctx = click.Context(cmd, info_name=" ".join(["fleetctl", *path]), parent=parent)
    help_text = cmd.help or ""
    body, _, examples = help_text.partition(EXAMPLES)
    summary = cmd.get_short_help_str(limit=80) if path else "reliability toolkit for Slurm GPU clusters"
    lines = [f'.TH "{name.upper()}" "1" "{date.today().isoformat()}" "fleetctl {__version__}" "fleetctl"',
             ".SH NAME", f"{escape(name)} \\- {escape(summary)}",
             ".SH SYNOPSIS", f"\\fB{escape(' '.join(['fleetctl', *path]))}\\fR "
             + escape(" ".join(cmd.collect_usage_pieces(ctx)))]
    if body.strip():
        lines.append(".SH DESCRIPTION")
        lines.extend(p for para in _paragraphs(body) for p in (para, ".PP"))
        lines.pop()
    options = [rec for param in cmd.get_params(ctx)
               if isinstance(param, click.Option) and (rec := param.get_help_record(ctx))]
    if options:
        lines.append(".SH OPTIONS")
        for opts, text in options:
            lines += [".TP", f"\\fB{escape(opts)}\\fR", escape(text) or "\\&"]
    if isinstance(cmd, click.Group):
        subs = [(n, cmd.get_command(ctx, n)) for n in cmd.list_commands(ctx)]
        lines.append(".SH COMMANDS")
        for sub_name, sub in subs:
            if sub is not None and not sub.hidden:
                lines += [".TP", f"\\fB{escape(sub_name)}\\fR",
                          escape(sub.get_short_help_str(limit=120)) + f" See \\fB{name}-{escape(sub_name)}\\fR(1)."]
    if examples.strip():
        lines += [".SH EXAMPLES", ".nf"]
        lines += [escape(line.strip()) for line in examples.strip("\b\n").splitlines() if line.strip()]
        lines.append(".fi")
    lines += [".SH EXIT STATUS", "0 ok, 1 warnings only, 2 failures found (or a host failed), 3 fleetctl "
              "could not do the job (bad input, configuration, transport, Slurm), 130 interrupted.",
              ".SH SEE ALSO", "\\fBfleetctl\\fR(1), \\fBsrun\\fR(1), \\fBscontrol\\fR(1), \\fBclush\\fR(1)"]
    return "\n".join(lines) + "\n"


def write_all(outdir: Path) -> list[Path]:
    from fleetctl.cli import cli

    outdir.mkdir(parents=True, exist_ok=True)
    written = []
    for path, cmd in commands(cli, hidden=False):
        target = outdir / f"{'-'.join(['fleetctl', *path])}.1"
        target.write_text(page(path, cmd))
        written.append(target)
    return written


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m fleetctl.cli.manpages OUTDIR")
    print(len(write_all(Path(sys.argv[1]))), "man pages in", sys.argv[1])
