"""The fleetctl command line: a lazy click group and the one exit point, `main()`.

Subcommand modules are imported only when their command runs, so `fleetctl --help` stays fast.
The package tree is the command tree: `fleetctl/cli/<command>.py`, or `fleetctl/cli/<group>/` with
one module per subcommand. A command is registered only once it works: no placeholders.
"""

from __future__ import annotations

import sys

import click

from fleetctl import __version__
from fleetctl.cli.app import Application, common_options
from fleetctl.errors import (EXIT_INTERRUPTED, EXIT_OK, FleetctlError, InternalError,
                             ResourceError)
from fleetctl.registry import Registry

# The top-level commands (fleetctl.registry), each with the one-line help `fleetctl --help` shows
# without importing the command's module.
COMMANDS = {  # name: (the click command as "module:attribute", its one-line help)
    "act": ("fleetctl.cli.act:act",
        "Detect -> Act: policies turn detections into drains, snapshots and swaps."),
    "audit": ("fleetctl.cli.audit:audit",
        "Check node health and fleet consistency; drain and resume in Slurm."),
    "config": ("fleetctl.cli.config:config",
        "Validate and show the site configuration."),
    "explain": ("fleetctl.cli.explain:explain",
        "A plain-language account of a finding, lens event, node or job."),
    "exec": ("fleetctl.cli.exec:exec_command",
        "Run a command on nodes (ssh, srun or local), outputs folded."),
    "failover": ("fleetctl.cli.failover:failover",
        "NIC failover for NCCL jobs: plan, watch and drill."),
    "hook": ("fleetctl.cli.hook:hook",
        "Slurm Prolog/Epilog/HealthCheckProgram hooks and their installer."),
    "inventory": ("fleetctl.cli.inventory:inventory",
        "Nodes, NICs, GPUs, switches and links, with Slurm state."),
    "job": ("fleetctl.cli.job:job",
        "Training jobs from the inside: hang and straggler signals."),
    "lab": ("fleetctl.cli.lab:lab",
        "An emulated GPU cluster on this machine, with fault injection."),
    "lens": ("fleetctl.cli.lens:lens",
        "Continuous fabric monitoring: events per element, with the jobs they touch."),
    "migrate": ("fleetctl.cli.migrate:migrate_command",
        "Move a fleetctl-run job's ranks off a node to its standbys, at the next step."),
    "run": ("fleetctl.cli.run_job:run_command",
        "Launch a training rank that survives a lost node: standbys, peer replicas, no rollback."),
    "site": ("fleetctl.cli.site:site",
        "Discover nodes, classes, NICs and cabling; write or diff a site file."),
    "spares": ("fleetctl.cli.spares:spares",
        "The audited spare pool and spare swaps."),
    "snapshot": ("fleetctl.cli.snapshot:snapshot",
        "Coordinated, verified snapshots of training jobs."),
}
commands = Registry("command")
for _name, (_target, _help) in COMMANDS.items():
    commands.register(_name, _target, help=_help)


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return commands.names()

    def get_command(self, ctx, name):
        if name not in commands:
            return None  # click's "No such command" with its suggestions
        return commands.get(name)

    def format_commands(self, ctx, formatter):
        rows = [(name, commands.meta(name)["help"]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@common_options
@click.version_option(__version__, prog_name="fleetctl")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """fleetctl: reliability toolkit for Slurm GPU clusters.

    Exit codes: 0 ok, 1 warnings only, 2 failures found (or a host failed),
    3 fleetctl could not do the job (bad input, config, transport, Slurm), 130 interrupted.
    """
    ctx.ensure_object(Application)


def main(argv: list[str] | None = None) -> None:
    """The one exit point: runs the CLI and turns every outcome into an exit code."""
    sys.exit(run(argv))


def run(argv: list[str] | None = None) -> int:
    app = Application()
    try:
        result = cli.main(args=argv, prog_name="fleetctl", standalone_mode=False, obj=app)
    except FleetctlError as exc:
        return _report(app, exc)
    except click.exceptions.Abort:
        click.echo("fleetctl: interrupted", err=True)
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        click.echo("fleetctl: interrupted", err=True)
        return EXIT_INTERRUPTED
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        # Usage errors: one line (JSON with --format json) and our exit code (2 means "failures found").
        return _report(app, _usage_error(exc), json_output=app.json or _asks_json(argv))
    except BrokenPipeError:
        return EXIT_OK
    except MemoryError:
        return _report(app, ResourceError(
            "out of memory", hint="a smaller input (fewer nodes or windows) or a machine with more "
            "memory; if the input is of a size fleetctl is meant to handle, report it"))
    except Exception as exc:  # noqa: BLE001 - the one exit point: a bug is a line, not a traceback
        return _report(app, InternalError.from_exception(exc))
    if isinstance(result, int):
        return result
    return EXIT_OK


def _usage_error(exc: click.ClickException) -> FleetctlError:
    from fleetctl.errors import UsageError

    ctx = getattr(exc, "ctx", None)
    where = ctx.command_path if ctx is not None else "fleetctl"
    return UsageError(" ".join(exc.format_message().split()), hint=f"`{where} --help` for usage")


def _asks_json(argv: list[str] | None) -> bool:
    """Whether the command line asks for JSON, when click stopped before reading --format."""
    words = list(sys.argv[1:] if argv is None else argv)
    return "--format=json" in words or any(a == "--format" and b == "json" for a, b in zip(words, words[1:]))


def _report(app: Application, exc: FleetctlError, *, json_output: bool | None = None) -> int:
    if app.verbose >= 2:
        import traceback

        traceback.print_exc()
    if app.json if json_output is None else json_output:
        import json

        click.echo(json.dumps({"error": exc.to_dict()}, indent=2))
    click.echo(exc.report_text(), err=True)
    return exc.exit_code
