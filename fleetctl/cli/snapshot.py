"""`fleetctl snapshot take|list|verify|restore|prune|interval`: the operator's side of fleetctl.snapshot.

A TARGET is a Slurm job id (mapped to its snapshot directory through the registry the job writes,
fleetctl/snapshot/registry.py) or a snapshot directory. Exit codes: 0 ok; 2 `verify` found a snapshot
that fails (or none); 3 fleetctl could not do the job (bad target, registry entry, Slurm).
No torch here: the on-disk format is read with the standard library only.
"""

from __future__ import annotations

import click

from fleetctl.cli.app import Application, common_options, esc, pass_app
from fleetctl.cli.params import FiniteFloatRange, seconds
from fleetctl.errors import EXIT_FAILURES, EXIT_OK

MAX_WAIT_S = 86_400.0


def _registry_option(func):
    return click.option("--registry", metavar="DIR", default=None,
                        help="Registry of job snapshot directories (env FLEETCTL_SNAPSHOT_REGISTRY; "
                             "default /var/lib/fleetctl/snapshots).")(func)


@click.group("snapshot")
def snapshot() -> None:
    """Coordinated, verified snapshots of training jobs (docs/snapshot.md)."""


# ---------------------------------------------------------------- take
@snapshot.command("take")
@common_options
@_registry_option
@click.argument("target")
@click.option("--wait", is_flag=True, help="Wait until the snapshot is published (LATEST names it).")
@click.option("--timeout", type=seconds(0.1, MAX_WAIT_S), default=600.0, show_default=True,
              metavar="SECONDS", help="How long --wait waits.")
@click.option("--drain", is_flag=True, help="Mark the request as taken before a planned drain.")
@click.option("--signal", "send_signal", is_flag=True,
              help="Also send SIGUSR2 to the job's steps (scancel --signal=USR2): only for jobs whose "
                   "every step runs the Snapshotter, since USR2 kills a process that does not catch it.")
@click.option("--no-request", is_flag=True,
              help="With --signal: write no request file (a directory this host cannot write, e.g. NFS "
                   "with root_squash); --wait then waits for any newer snapshot.")
@pass_app
def take(app: Application, target: str, registry: str | None, wait: bool, timeout: float, drain: bool,
         send_signal: bool, no_request: bool) -> int:
    """Ask the job (JOBID or snapshot DIR) for a snapshot at its next iteration boundary."""
    from fleetctl.snapshot import SnapshotError, requests

    if no_request and not send_signal:
        raise SnapshotError("--no-request needs --signal (otherwise nothing asks the job)")
    root, job_id = _resolve(app, target, registry)
    if send_signal and job_id is None:
        raise SnapshotError("--signal needs a job id, not a directory")
    backend = None
    if send_signal:  # the site and its backend before any side effect
        from fleetctl.slurm import backend_for_site

        backend = backend_for_site(app.site)
        if not hasattr(backend, "run"):
            raise SnapshotError(f"the {backend.name} Slurm backend cannot signal a job")
    asked = requests.ask(root, "drain" if drain else "request", write=not no_request)
    if asked.problem:
        raise SnapshotError(asked.problem)
    signalled = False
    if backend is not None:
        backend.signal_job(job_id, "USR2")
        signalled = True
    request_id = asked.request_id
    app.info(f"requested a snapshot of {job_id or root}"
             + (f" (request {request_id})" if request_id else " (signal)"))
    data = {"job_id": job_id, "directory": str(root), "request": request_id, "signalled": signalled,
            "snapshot": None}
    if wait:
        requests.wait_all([asked], timeout)
        if asked.answer is None:
            raise asked.timeout_error(timeout)
        data["snapshot"] = asked.answer

    def render(console):
        if data["snapshot"]:
            snap = data["snapshot"]
            console.print(f"snapshot step {snap['step']} published: {esc(snap['path'])}")
        elif request_id:
            console.print(f"request {esc(request_id)} written to {esc(root)}")
        else:
            console.print(f"SIGUSR2 sent to the steps of job {esc(job_id)}")

    app.emit(data, render)
    return EXIT_OK


def _resolve(app: Application, target: str, registry: str | None):
    """(directory, job id) of TARGET; a job's registry entry must be written by the job's owner: the
    calling user, or for root the owner Slurm names (registry squatting, docs/security.md)."""
    import os

    from fleetctl.snapshot.registry import is_job_id, resolve

    owner = None
    if is_job_id(target):
        owner = os.geteuid() if os.geteuid() != 0 else _slurm_owner(app, target)
    return resolve(target, registry, owner=owner)


def _slurm_owner(app: Application, job_id: str) -> int | None:
    from fleetctl.errors import FleetctlError
    from fleetctl.snapshot.registry import job_owner

    try:
        return job_owner(app.slurm_backend(), job_id)
    except FleetctlError:  # no site, no Slurm: entries of different owners are then refused
        return None


# ---------------------------------------------------------------- list
@snapshot.command("list")
@common_options
@_registry_option
@click.argument("target", required=False)
@click.option("--verify", "digests", is_flag=True, help="Also check every file's sha256 (reads all data).")
@pass_app
def list_command(app: Application, target: str | None, registry: str | None, digests: bool) -> int:
    """Snapshots of a job (JOBID or DIR); without TARGET, the jobs in the registry."""
    from fleetctl.snapshot import catalog
    from fleetctl.snapshot.registry import entries

    if target is None:
        data = {"jobs": entries(registry)}

        def render_jobs(console):
            from rich.table import Table

            table = Table("job", "directory", "problem", box=None)
            for row in data["jobs"]:
                table.add_row(esc(row["job_id"]), esc(row["directory"] or "-"), esc(row["problem"] or ""))
            console.print(table if data["jobs"] else "no job in the snapshot registry")

        app.emit(data, render_jobs)
        return EXIT_OK
    root, job_id = _resolve(app, target, registry)
    data = {"job_id": job_id, **catalog.describe(root, digests=digests)}

    def render(console):
        from rich.table import Table

        table = Table("step", "state", "size", "reason", "latest", "problems", box=None,
                      title=esc(root))
        for row in data["snapshots"]:
            style = {"ok": "green", "bad": "red", "partial": "yellow"}[row["state"]]
            table.add_row(str(row["step"]), f"[{style}]{row['state']}[/{style}]", _size(row["bytes"]),
                          esc(row["reason"] or ""), "LATEST" if row["latest"] else "",
                          esc("; ".join(row["problems"]), 2000))
        console.print(table if data["snapshots"] else f"no snapshot in {esc(root)}")
        if data["latest_problem"]:
            app.err_console.print(f"[yellow]warning:[/yellow] {esc(data['latest_problem'])}")

    app.emit(data, render)
    return EXIT_OK


# ---------------------------------------------------------------- verify
@snapshot.command("verify")
@common_options
@_registry_option
@click.argument("target")
@pass_app
def verify(app: Application, target: str, registry: str | None) -> int:
    """Check snapshots end to end: manifest, every shard present, sizes and sha256 digests.

    TARGET is a job id, a snapshot directory (every snapshot in it) or one step_N directory.
    Exit 2 when a snapshot fails (the message names what is wrong) or there is none."""
    from pathlib import Path

    from fleetctl.snapshot import SnapshotError, catalog, manifest
    from fleetctl.snapshot.layout import MANIFEST, parse_step, parse_tmp_step, scan
    from fleetctl.snapshot.registry import is_job_id

    path = Path(target).expanduser()
    single = not is_job_id(target) and (parse_step(path.name) is not None or (path / MANIFEST).exists()
                                        or parse_tmp_step(path.name) is not None)
    if single and not (path.exists() or path.is_symlink()):
        raise SnapshotError(f"{target}: no such snapshot directory")
    if single:
        if parse_tmp_step(path.name) is not None:
            verdicts = [manifest.Verdict(str(path), parse_tmp_step(path.name), False,
                                         ["a step_N.tmp directory is an unfinished or interrupted write, "
                                          "never a snapshot"])]
        else:
            verdicts = [manifest.verify(path)]
        root, job_id, chosen = path.parent, None, None
    else:
        root, job_id = _resolve(app, target, registry)
        verdicts = [manifest.verify(e.path) for e in scan(root) if e.committed]
        chosen = catalog.choose(root).step if verdicts else None
    failed = [v for v in verdicts if not v.ok]
    data = {"job_id": job_id, "directory": str(root), "ok": bool(verdicts) and not failed,
            "restore_would_use": chosen, "snapshots": [v.to_dict() for v in verdicts]}

    def render(console):
        if not verdicts:
            console.print(f"no committed snapshot in {esc(root)}")
        for v in verdicts:
            if v.ok:
                console.print(f"[green]ok[/green]   {esc(v.path)} ({_size(v.bytes)})")
            else:
                console.print(f"[red]FAIL[/red] {esc(v.path)}: {esc(v.reason, 2000)}")
        if not single and verdicts:
            console.print(f"restore would use step {chosen}" if chosen is not None else
                          "restore would find no usable snapshot", markup=False)

    app.emit(data, render)
    return EXIT_OK if data["ok"] else EXIT_FAILURES


# ---------------------------------------------------------------- restore
@snapshot.command("restore")
@common_options
@_registry_option
@click.argument("job_id")
@click.option("--dry-run", is_flag=True, help="Say which snapshot the job would restore; requeue nothing.")
@pass_app
def restore(app: Application, job_id: str, registry: str | None, dry_run: bool) -> int:
    """Requeue JOB_ID (scontrol requeue) so that its Snapshotter restores the newest verified snapshot."""
    from fleetctl.snapshot import SnapshotError, catalog
    from fleetctl.snapshot.registry import is_job_id

    if not is_job_id(job_id):
        raise SnapshotError(f"{job_id[:40]!r} is not a Slurm job id")
    root, _ = _resolve(app, job_id, registry)
    choice = catalog.choose(root)
    if choice.step is None:
        why = "; ".join(f"step {s['step']}: {s['reason']}" for s in choice.skipped[:4])
        raise SnapshotError(f"job {job_id}: no verified snapshot in {root}" + (f" ({why})" if why else ""),
                            hint="requeueing now would restart the job from scratch: "
                                 "`scontrol requeue` it yourself if that is meant")
    if not dry_run:
        from fleetctl.slurm import backend_for_site

        backend_for_site(app.site).requeue(job_id)
    data = {"job_id": job_id, "directory": str(root), "requeued": not dry_run, **choice.to_dict()}

    def render(console):
        for skipped in choice.skipped:
            app.err_console.print(f"[yellow]skipping[/yellow] step {skipped['step']}: {esc(skipped['reason'], 2000)}")
        verb = "would restore" if dry_run else "requeued; it will restore"
        console.print(f"job {job_id} {verb} step {choice.step} ({esc(choice.path)})")

    app.emit(data, render)
    return EXIT_OK


# ---------------------------------------------------------------- prune
@snapshot.command("prune")
@common_options
@_registry_option
@click.argument("target")
@click.option("--keep", type=click.IntRange(1, 10_000), default=3, show_default=True,
              help="Committed snapshots to keep (LATEST's is always kept).")
@click.option("--dry-run", is_flag=True, help="List what would be removed.")
@pass_app
def prune(app: Application, target: str, registry: str | None, keep: int, dry_run: bool) -> int:
    """Remove old snapshots beyond --keep and leftovers of interrupted writes."""
    from fleetctl.snapshot import catalog

    root, job_id = _resolve(app, target, registry)
    plan = catalog.prune_plan(root, keep)
    for entry in plan if not dry_run else ():
        catalog.remove(entry)
    data = {"job_id": job_id, "directory": str(root), "keep": keep, "dry_run": dry_run,
            "removed": [str(e.path) for e in plan]}

    def render(console):
        verb = "would remove" if dry_run else "removed"
        for path in data["removed"]:
            console.print(f"{verb} {esc(path)}")
        if not plan:
            console.print("nothing to prune", markup=False)

    app.emit(data, render)
    return EXIT_OK


# ---------------------------------------------------------------- interval
@snapshot.command("interval")
@common_options
@_registry_option
@click.argument("target", required=False)
@click.option("--cost", type=FiniteFloatRange(1e-6, 86_400.0), metavar="SECONDS",
              help="Snapshot cost (blocking time); default: the job's measured cost, else 10 s.")
@click.option("--mtbf-hours", type=FiniteFloatRange(1e-3, 1e7), metavar="H", help="The job's MTBF.")
@click.option("--node-mtbf-hours", type=FiniteFloatRange(1e-3, 1e8), metavar="H",
              help="One node's MTBF (default 6300 h, from Llama 3's published failure counts).")
@click.option("--nodes", type=click.IntRange(1, 1_000_000), default=None, help="Nodes the job spans.")
@click.option("--restart", type=FiniteFloatRange(0.0, 86_400.0), default=0.0, metavar="SECONDS",
              help="Restart time R, for Daly's formula.")
@pass_app
def interval(app: Application, target: str | None, registry: str | None, cost: float | None,
             mtbf_hours: float | None, node_mtbf_hours: float | None, nodes: int | None,
             restart: float) -> int:
    """The optimum snapshot interval: Young sqrt(2 C M) and Daly sqrt(2 C (R + M)), with their inputs."""
    from fleetctl.snapshot import interval as yd
    from fleetctl.snapshot.layout import read_status

    status = {}
    if target is not None:
        root, _ = _resolve(app, target, registry)
        status = read_status(root) or {}
    cost_source = "--cost"
    if cost is None:
        measured = status.get("cost_s")
        if _positive(measured) and measured < 86_400:
            cost, cost_source = float(measured), "measured by the job (STATUS.json)"
        else:
            cost, cost_source = yd.DEFAULT_COST_S, "default (no measurement)"
    job_mtbf = status.get("mtbf_s")
    if mtbf_hours is not None:
        mtbf_s, mtbf_source = mtbf_hours * 3600.0, "--mtbf-hours"
    elif node_mtbf_hours is None and nodes is None and _positive(job_mtbf):
        mtbf_s = float(job_mtbf)
        mtbf_source = f"the job's: {str(status.get('mtbf_source'))[:80]}"
    else:
        job_nodes = status.get("nodes")
        if nodes is None:
            nodes = job_nodes if isinstance(job_nodes, int) and 0 < job_nodes <= 1_000_000 else 1
        node_h = node_mtbf_hours or yd.DEFAULT_NODE_MTBF_H
        mtbf_s = yd.job_mtbf_s(nodes, node_h)
        mtbf_source = f"node MTBF {node_h:g} h / {nodes} node(s)"
    data = {"young_s": round(yd.young(cost, mtbf_s), 3), "daly_s": round(yd.daly(cost, mtbf_s, restart), 3),
            "inputs": {"cost_s": cost, "cost_source": cost_source, "mtbf_s": mtbf_s,
                       "mtbf_source": mtbf_source, "restart_s": restart},
            "job_interval_s": status.get("interval_s")}

    def render(console):
        console.print(f"Young  {_duration(data['young_s'])}  = sqrt(2 x {cost:g} s x {mtbf_s:g} s)", markup=False)
        console.print(f"Daly   {_duration(data['daly_s'])}  = sqrt(2 x {cost:g} s x ({restart:g} s + {mtbf_s:g} s))",
                      markup=False)
        console.print(f"cost: {esc(cost_source)}; MTBF: {esc(mtbf_source)}")

    app.emit(data, render)
    return EXIT_OK


def _positive(value) -> bool:
    import math

    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        and 0 < value < 1e12


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _duration(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.2f} h"
