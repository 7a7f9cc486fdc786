"""`fleetctl hook install DIR`: the wrappers and their settings file (fleetctl.audit.hook_install)."""

from __future__ import annotations

import click

from fleetctl.cli.app import Application, common_options, pass_app


@click.command("install")
@common_options
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--fail-closed", is_flag=True, help="Fail the Prolog when fleetctl itself fails.")
@click.option("--log", "log_path", default="/var/log/fleetctl-hooks.log", show_default=True)
@click.option("--fleetctl", "fleetctl_bin", metavar="PATH", help="The fleetctl the hooks run (absolute; "
              "default: this one, e.g. /usr/bin/fleetctl or the node bundle /usr/local/lib/fleetctl.pyz).")
@pass_app
def install(app: Application, directory: str, fail_closed: bool, log_path: str,
            fleetctl_bin: str | None) -> int:
    """Install the hook wrappers into DIRECTORY with an env file naming this fleetctl and site.

    \b
    Examples:
      fleetctl --site /etc/fleetctl/site.toml hook install /etc/slurm/fleetctl
      fleetctl hook install /etc/slurm/fleetctl --log /var/log/fleetctl-hooks.log
      /usr/local/lib/fleetctl.pyz hook install /etc/slurm/fleetctl   # the hooks run the bundle
    """
    from pathlib import Path

    from fleetctl.audit.hook_install import install_hooks, running_fleetctl
    from fleetctl.errors import EXIT_OK, UsageError

    site_path = str(Path(app.site_file()).resolve())
    app.cluster  # validate before installing anything that would use it
    if fleetctl_bin is not None and not Path(fleetctl_bin).is_absolute():
        raise UsageError(f"--fleetctl {fleetctl_bin}: give an absolute path (slurmd gives hooks no PATH)")
    fleetctl_bin = fleetctl_bin or running_fleetctl()
    done = install_hooks(Path(directory), site_path=site_path, fleetctl_bin=fleetctl_bin,
                         fail_closed=fail_closed, log_path=log_path)

    def render(console):
        for path in done.wrappers.values():
            console.print(f"installed {path}")
        console.print("slurm.conf:\n" + "\n".join(f"  {line}" for line in done.slurm_conf().splitlines()))

    app.emit(done.to_dict(), render)
    return EXIT_OK
