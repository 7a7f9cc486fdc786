"""The Application object on click's ctx.obj: output format, console, verbosity, site file.

Every command gets it with `@pass_app`. It owns the rich consoles; the rest of cli/ imports rich
only to render, and no package outside cli/ imports click or rich.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from functools import cached_property
from typing import Any

import click

from fleetctl.errors import ConfigError

FORMATS = ("human", "json")
NO_SITE = ('no site file: give --site, set FLEETCTL_SITE, or for the lab run eval "$(fleetctl lab env)"')


class Application:
    def __init__(self) -> None:
        self.format = "human"
        self.verbose = 0
        self.no_color = bool(os.environ.get("NO_COLOR"))
        self.site_path: str | None = None

    # ---- output
    @cached_property
    def console(self):
        from rich.console import Console

        # Not a terminal (a pipe, a file, a test): lines are never folded at 80 columns, so that
        # `grep` and scripts see each record whole; tables still lay out at the console's width.
        return Console(no_color=self.no_color, highlight=False, soft_wrap=not sys.stdout.isatty())

    @cached_property
    def err_console(self):
        from rich.console import Console

        return Console(stderr=True, no_color=self.no_color, highlight=False,
                       soft_wrap=not sys.stderr.isatty())

    @property
    def json(self) -> bool:
        return self.format == "json"

    def emit(self, data: Any, render: Callable[[Any], None] | None = None) -> None:
        """Print `data` as JSON, or call `render(console)` for the human view."""
        if self.json or render is None:
            click.echo(json.dumps(data, indent=2, sort_keys=False, default=_json_default))
        else:
            render(self.console)

    def info(self, message: str) -> None:
        """Progress and notes go to stderr so that stdout stays machine-readable."""
        if not self.json or self.verbose:
            self.err_console.print(message, markup=False, highlight=False)

    def debug(self, message: str) -> None:
        if self.verbose:
            self.err_console.print(message, style="dim", markup=False, highlight=False)

    # ---- site
    def site_file(self) -> str:
        """--site > FLEETCTL_SITE. Never a guess: the lab's site file is chosen explicitly, by
        `eval "$(fleetctl lab env)"` (which sets FLEETCTL_SITE)."""
        if self.site_path:
            return self.site_path
        env = os.environ.get("FLEETCTL_SITE")
        if env:
            return env
        raise ConfigError(NO_SITE)

    @cached_property
    def cluster(self):
        from fleetctl.config import load_site

        return load_site(self.site_file())

    def slurm_backend(self):
        """The site's Slurm backend; without a site file, the CLI backend on SLURM_CONF or /etc/slurm
        (ConfigError when there is neither)."""
        if self.site_path or os.environ.get("FLEETCTL_SITE"):
            from fleetctl.slurm import backend_for_site

            return backend_for_site(self.cluster)
        from fleetctl.inventory.from_slurm import slurm_configured

        if not slurm_configured():
            raise ConfigError(NO_SITE, hint="or point SLURM_CONF at a slurm.conf")
        from fleetctl.slurm import get_backend

        return get_backend("cli", slurm_conf=os.environ.get("SLURM_CONF", ""), timeout=15.0)

    def nodes(self, text: str | None, *, what: str = "node set") -> str | None:
        """A NODESET argument with its groups (`@gpu`, `@partition:batch`, `@job:42`) expanded from the
        site's groups, clush's static group files and Slurm; text without `@` is returned as is."""
        if not text or "@" not in text:
            return text
        from fleetctl.nodegroups import groups_for_site

        has_site = bool(self.site_path or os.environ.get("FLEETCTL_SITE"))
        return groups_for_site(self.cluster if has_site else None, self.slurm_backend).expand(text, what=what)

    def site_or_slurm(self, *, alone: bool = False):
        """The site file in use; without one (no --site, no FLEETCTL_SITE), the cluster as Slurm
        describes it when there is a slurm.conf to ask (SLURM_CONF or /etc/slurm). `alone`: with
        neither, an empty cluster, in which a node is checked by itself (`audit --local`)."""
        if self.site_path or os.environ.get("FLEETCTL_SITE"):
            return self.cluster
        from fleetctl.inventory.from_slurm import cluster_from_slurm, slurm_configured

        if slurm_configured():
            from fleetctl.slurm import get_backend

            return cluster_from_slurm(get_backend("cli", slurm_conf=os.environ.get("SLURM_CONF", ""),
                                                  timeout=15.0))
        if alone:
            from fleetctl.config import site_from_document
            from fleetctl.inventory.from_slurm import checks_from_env

            return site_from_document({"cluster": {"name": "local"}, "checks": checks_from_env()},
                                      "<no site file>")
        raise ConfigError(NO_SITE, hint="or point SLURM_CONF at a slurm.conf: without a site file, "
                          "fleetctl builds its view from Slurm")


def esc(value: Any, limit: int = 4096) -> str:
    """An untrusted value (a path, a node's message, a reason, a registry entry) ready to print with
    rich markup on: one line of printable text (filekit.clean_text), cut at `limit`, its `[` escaped
    so that `ckpt[/b]` prints as itself instead of raising MarkupError."""
    from rich.markup import escape

    from fleetctl.filekit import clean_text

    return escape(clean_text(value, limit))


def _json_default(value: Any) -> Any:
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    return str(value)


pass_app = click.make_pass_decorator(Application, ensure=True)


def _set_format(ctx: click.Context, _param, value):
    if value is not None:
        ctx.ensure_object(Application).format = value
    return value


def _set_verbose(ctx: click.Context, _param, value):
    if value:
        ctx.ensure_object(Application).verbose += value
    return value


def _set_no_color(ctx: click.Context, _param, value):
    if value:
        ctx.ensure_object(Application).no_color = True
    return value


def _set_site(ctx: click.Context, _param, value):
    if value:
        ctx.ensure_object(Application).site_path = value
    return value


def common_options(func):
    """Options accepted both before and after the subcommand (`fleetctl --format json exec ...` and
    `fleetctl exec --format json ...`). They only set fields of the Application."""
    options = [
        click.option("--site", metavar="PATH", expose_value=False, callback=_set_site,
                     help="Site file (env FLEETCTL_SITE; for the lab: eval \"$(fleetctl lab env)\")."),
        click.option("--format", "output_format", type=click.Choice(FORMATS), default=None,
                     expose_value=False, callback=_set_format, help="Output format."),
        click.option("-v", "--verbose", count=True, expose_value=False, callback=_set_verbose,
                     help="More detail; -vv shows tracebacks."),
        click.option("--no-color", is_flag=True, expose_value=False, callback=_set_no_color,
                     help="No colours (also NO_COLOR=1)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func
