"""`fleetctl hook prolog|epilog|healthcheck` (run by slurmd) and `fleetctl hook install DIR`."""

from __future__ import annotations

import click

from fleetctl.cli.app import Application, common_options, pass_app
from fleetctl.cli.params import MAX_HOOK_BUDGET_S, seconds


@click.group("hook")
def hook() -> None:
    """Slurm Prolog, Epilog and HealthCheckProgram hooks (docs/hooks.md)."""


def _run(app: Application, name: str, level: str, budget: float | None) -> int:
    from fleetctl.audit.hooks import log_verdict, run_hook, save_last
    from fleetctl.errors import FleetctlError

    try:
        verdict = run_hook(app.site, name, level=level, budget_s=budget)
    except FleetctlError as exc:
        click.echo(log_verdict(None, name, exc), err=True)
        raise
    save_last(verdict)
    line = log_verdict(verdict, name)
    app.emit(verdict.to_dict(), lambda console: console.print(line, markup=False))
    return verdict.exit_code


def _hook_command(name: str, default_level: str, doc: str):
    @hook.command(name, help=doc)
    @common_options
    @click.option("--level", type=click.Choice(["quick", "standard"]), default=default_level,
                  show_default=True)
    @click.option("--budget", type=seconds(0.5, MAX_HOOK_BUDGET_S), help="Hard time budget in seconds.")
    @pass_app
    def command(app: Application, level: str, budget: float | None) -> int:
        return _run(app, name, level, budget)

    return command


_hook_command("prolog", "quick", "Quick checks of this node before a job; exit 2 and drain on a definite "
              "hardware failure.")
_hook_command("epilog", "quick", "After a job: what went wrong during it (new Xids, ECC, flaps); drains "
              "on a definite failure, always exits 0 itself.")
_hook_command("healthcheck", "quick", "HealthCheckProgram: drain on a definite failure, resume a node "
              "fleetctl drained once it passes.")


@hook.command("install")
@common_options
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--fail-closed", is_flag=True, help="Fail the Prolog when fleetctl itself fails.")
@click.option("--log", "log_path", default="/var/log/fleetctl-hooks.log", show_default=True)
@pass_app
def install(app: Application, directory: str, fail_closed: bool, log_path: str) -> int:
    """Install the hook wrappers into DIRECTORY with an env file naming this fleetctl and site."""
    import shutil
    import sys
    from importlib import resources
    from pathlib import Path

    from fleetctl.atomic import write_atomic
    from fleetctl.audit.hooks import settings_text
    from fleetctl.errors import UsageError

    target = Path(directory)
    site_path = str(Path(app.site_file()).resolve())
    app.site  # validate before installing anything that would use it
    fleetctl_bin = shutil.which("fleetctl") or str(Path(sys.executable).parent / "fleetctl")
    source = resources.files("fleetctl.audit").joinpath("hook.sh").read_text()
    settings_file = settings_text({  # validated before anything is written
        "FLEETCTL": fleetctl_bin, "FLEETCTL_SITE": site_path,
        "FLEETCTL_FAIL_CLOSED": str(int(fail_closed)), "FLEETCTL_HOOK_LOG": log_path})
    installed = []
    try:
        target.mkdir(parents=True, exist_ok=True)
        # Never a half-written settings file or wrapper beside live ones, never through a planted link.
        write_atomic(target / "fleetctl-hooks.env", settings_file)
        for name in ("prolog", "epilog", "healthcheck"):
            path = target / f"fleetctl-{name}"
            write_atomic(path, source, mode=0o755)
            installed.append(str(path))
    except OSError as exc:
        raise UsageError(f"cannot install hooks into {target}: {exc.strerror or exc}") from None
    data = {"installed": installed, "env": str(target / "fleetctl-hooks.env"), "site": site_path}

    def render(console):
        for path in installed:
            console.print(f"installed {path}")
        console.print("slurm.conf:\n"
                      f"  Prolog={target / 'fleetctl-prolog'}\n  Epilog={target / 'fleetctl-epilog'}\n"
                      f"  PrologFlags=Alloc\n  HealthCheckProgram={target / 'fleetctl-healthcheck'}\n"
                      "  HealthCheckInterval=300")

    app.emit(data, render)
    return 0
