"""`fleetctl audit analyze FILE.h5`: re-analyse a stored probe run (docs/mesh-probing.md)."""

from __future__ import annotations

import click

from fleetctl.cli.app import Application, common_options, pass_app


@click.command("analyze")
@common_options
@click.argument("file", metavar="FILE.h5")
@click.option("--solver", default=None, metavar="NAME",
              help="Triangulation solver (nnls, l1, vote, netbouncer, ...; default: the run's own).")
@click.option("--out", type=click.Path(dir_okay=False), metavar="FILE.h5",
              help="Write the run with this analysis to a new HDF5 file.")
@pass_app
def analyze(app: Application, file: str, solver: str | None, out: str | None) -> int:
    """Re-analyse a stored probe run (from `audit --mesh --out FILE.h5`).

    Exit codes: 0 no finding, 1 probe warnings only (the measurement, not the network), 2 network
    findings, 3 the file could not be analysed.

    \b
    Examples:
      fleetctl audit analyze run.h5
      fleetctl audit analyze run.h5 --solver vote --format json
      fleetctl audit analyze run.h5 --out reanalysed.h5
    """
    from fleetctl.atomic import check_writable
    from fleetctl.cli.audit import mesh_view
    from fleetctl.extras import require

    require("mesh", "audit analyze")
    from fleetctl.meshrun.analyze import exit_code, reanalyze

    if out:
        check_writable(out, "--out")
    data = reanalyze(file, solver, out)
    app.emit(data, lambda console: mesh_view.render(console, data))
    return exit_code(data)
