"""`fleetctl spares status|add|remove|replenish|swap`: the audited spare pool (docs/spares.md).

Exit codes: 0 done; 1 done with warnings (the pool below its floor, some nodes refused); 3 fleetctl
could not do the job (Slurm, bad input).
"""

from __future__ import annotations

import click

from fleetctl.cli.app import Application, common_options, esc, pass_app
from fleetctl.cli.params import seconds
from fleetctl.errors import EXIT_OK, EXIT_WARNINGS


def _pool(app: Application, state_dir: str | None):
    from fleetctl.slurm import backend_for_site
    from fleetctl.spares import SparePool, SparesConfig

    backend = backend_for_site(app.site)
    return backend, SparePool(backend, SparesConfig.from_site(app.site, state_dir))


def _state_dir_option(func):
    return click.option("--state-dir", metavar="DIR", default=None,
                        help="The pool's lock and audit verdicts (default: spares.state_dir).")(func)


def _audit(app: Application, pool, nodes: list[str]) -> dict:
    """A quick audit of `nodes` (the pool's level), recorded as their verdicts."""
    import time

    from fleetctl.audit import build_report, collect

    started = time.time()
    outcomes = collect(app.site, nodes, pool.config.audit_level)
    return build_report(app.site, outcomes, level=pool.config.audit_level, started=started).to_dict()


@click.group("spares")
def spares() -> None:
    """The audited spare pool: a Slurm reservation of nodes that passed a recent audit."""


@spares.command("status")
@common_options
@_state_dir_option
@pass_app
def status(app: Application, state_dir: str | None) -> int:
    """Members, their last audit verdict and its age, free or in use."""
    _, pool = _pool(app, state_dir)
    st = pool.status()
    data = st.to_dict()

    def render(console):
        from rich.table import Table

        table = Table(title=f"spare pool {esc(st.reservation)} (floor {st.floor})", title_justify="left")
        for col in ("node", "state", "use", "last audit", "age"):
            table.add_column(col)
        for m in st.members:
            age = f"{m['audit_age_s']:.0f} s" if m["audit_age_s"] is not None else "-"
            table.add_row(esc(m["node"]), esc(m["state"]),
                          "in use" if m["in_use"] else ("free" if m["free"] else "unusable"),
                          esc(m["verdict"] or "none"), age)
        console.print(table if st.members else f"spare pool {esc(st.reservation)}: empty")
        for w in st.warnings:
            console.print(f"[yellow]warning[/yellow]: {esc(w)}")

    app.emit(data, render)
    return EXIT_WARNINGS if st.warnings else EXIT_OK


def _change_cmd(name: str, doc: str):
    @spares.command(name, help=doc)
    @common_options
    @_state_dir_option
    @click.argument("nodeset")
    @click.option("--dry-run", is_flag=True, help="Say what would change; change nothing.")
    @click.option("--audit/--no-audit", "run_audit", default=True,
                  help="(add) audit nodes without a fresh passing verdict first (default: yes).")
    @click.option("--report", metavar="FILE", default=None,
                  help="(add) record the verdicts of this audit report (fleetctl audit --format json) first.")
    @pass_app
    def cmd(app: Application, state_dir, nodeset: str, dry_run: bool, run_audit: bool, report) -> int:
        import time

        from fleetctl.nodeset import parse_nodeset
        from fleetctl.spares.verdicts import passed_within

        nodes = list(parse_nodeset(nodeset))
        _, pool = _pool(app, state_dir)
        audited = None
        if report is not None:
            from fleetctl.act.run import read_report

            with pool.locked():
                audited = pool.verdicts.record_report(read_report(report))
        if name == "add" and run_audit:
            verdicts = pool.verdicts.load()
            stale = [n for n in nodes if not passed_within(verdicts.get(n), pool.config.max_audit_age_s)[0]]
            if stale:
                app.info(f"auditing {','.join(stale)} ({pool.config.audit_level}) before they join")
                report = _audit(app, pool, stale)
                with pool.locked():
                    audited = pool.verdicts.record_report(report)
        change = pool.add(nodes, dry_run=dry_run, now=time.time()) if name == "add" else \
            pool.remove(nodes, dry_run=dry_run)
        data = change.to_dict()
        if audited is not None:
            data["audited"] = audited

        def render(console):
            verb = "would " + name if dry_run else name + "ed" if name == "add" else "removed"
            console.print(f"{verb}: {esc(','.join(change.changed) or 'nothing')}; pool now "
                          f"{esc(','.join(change.members_after) or 'empty')}")
            for node, why in change.refused.items():
                console.print(f"  refused {esc(node)}: {esc(why)}")
            for w in change.warnings:
                console.print(f"[yellow]warning[/yellow]: {esc(w)}")

        app.emit(data, render)
        return EXIT_WARNINGS if change.warnings or change.refused else EXIT_OK

    return cmd


add = _change_cmd("add", "Add nodes to the pool: only those whose last audit passed recently (others are "
                         "audited first unless --no-audit).")
remove = _change_cmd("remove", "Take nodes out of the pool (warns below the floor).")


@spares.command("replenish")
@common_options
@_state_dir_option
@click.option("--dry-run", is_flag=True, help="Audit, but resume and add nothing.")
@pass_app
def replenish_cmd(app: Application, state_dir, dry_run: bool) -> int:
    """Audit the nodes fleetctl drained; resume those that pass and return them to the pool."""
    from fleetctl.spares.replenish import replenish

    backend, pool = _pool(app, state_dir)
    out = replenish(pool, backend, lambda nodes: _audit(app, pool, nodes), dry_run=dry_run)

    def render(console):
        console.print(f"candidates: {esc(','.join(out.candidates) or 'none')}; "
                      f"passed: {esc(','.join(out.passed) or 'none')}; "
                      f"added to the pool: {esc(','.join(out.added) or 'none')}")
        for node, why in {**out.failed, **out.refused}.items():
            console.print(f"  {esc(node)}: {esc(why)}")
        for w in out.warnings:
            console.print(f"[yellow]warning[/yellow]: {esc(w)}")

    app.emit(out.to_dict(), render)
    return EXIT_WARNINGS if out.warnings or out.failed else EXIT_OK


@spares.command("swap")
@common_options
@_state_dir_option
@click.argument("job_id")
@click.argument("bad_node")
@click.option("--dry-run", is_flag=True, help="Show every step; do none.")
@click.option("--wait", "wait_s", type=seconds(0.0, 86_400.0), default=0.0, metavar="SECONDS",
              help="Wait up to this long for the job to run again, and say where.")
@pass_app
def swap(app: Application, state_dir, job_id: str, bad_node: str, dry_run: bool, wait_s: float) -> int:
    """Drain BAD_NODE, release a spare, requeue JOB_ID excluding BAD_NODE (it restores its snapshot)."""
    from fleetctl.errors import EXIT_ERROR
    from fleetctl.nodeset import check_node_name
    from fleetctl.spares.swap import plan_swap, run_swap, wait_running

    check_node_name(bad_node, what="BAD_NODE")
    backend, pool = _pool(app, state_dir)
    plan = run_swap(plan_swap(backend, pool, job_id, bad_node, dry_run=dry_run), backend, pool)
    if wait_s > 0 and not dry_run and plan.ok:
        plan.running_on = wait_running(backend, job_id, wait_s)

    def render(console):
        for s in plan.steps:
            console.print(f"{s.status:8} {s.step:8} {esc(s.detail)}" + (f" -> {esc(s.result)}" if s.result else ""))
        if plan.running_on:
            console.print(f"job {job_id} running on {esc(','.join(plan.running_on))}")
        for w in plan.warnings:
            console.print(f"[yellow]warning[/yellow]: {esc(w)}")

    app.emit(plan.to_dict(), render)
    if not plan.ok:
        return EXIT_ERROR
    return EXIT_WARNINGS if plan.warnings else EXIT_OK
