"""`fleetctl spares add|remove NODESET`: change the pool's members (an add audits first)."""

from __future__ import annotations

import click

from fleetctl.cli.app import Application, common_options, esc, pass_app
from fleetctl.cli.spares.common import pool, print_warnings, state_dir_option
from fleetctl.errors import EXIT_OK, EXIT_WARNINGS


def _command(name: str, doc: str):
    @click.command(name, help=doc)
    @common_options
    @state_dir_option
    @click.argument("nodeset")
    @click.option("--dry-run", is_flag=True, help="Say what would change; change nothing.")
    @click.option("--audit/--no-audit", "run_audit", default=True,
                  help="(add) audit nodes without a fresh passing verdict first (default: yes).")
    @click.option("--report", metavar="FILE", default=None,
                  help="(add) record the verdicts of this audit report (fleetctl audit --format json) first.")
    @pass_app
    def cmd(app: Application, state_dir, nodeset: str, dry_run: bool, run_audit: bool, report) -> int:
        from fleetctl.act.run import read_report
        from fleetctl.nodeset import parse_nodeset
        from fleetctl.spares.membership import audit_nodes, change

        nodes = list(parse_nodeset(app.nodes(nodeset)))
        _, spare_pool = pool(app, state_dir)
        audit = (lambda stale: audit_nodes(app.cluster, spare_pool, stale)) if name == "add" and run_audit else None
        data = change(spare_pool, nodes, add=name == "add", dry_run=dry_run,
                      report=read_report(report) if report is not None else None, audit=audit,
                      on_audit=lambda stale: app.info(f"auditing {','.join(stale)} "
                                                      f"({spare_pool.config.audit_level}) before they join"))

        def render(console):
            verb = "would " + name if dry_run else name + "ed" if name == "add" else "removed"
            console.print(f"{verb}: {esc(','.join(data['changed']) or 'nothing')}; pool now "
                          f"{esc(','.join(data['members_after']) or 'empty')}")
            for node, why in data["refused"].items():
                console.print(f"  refused {esc(node)}: {esc(why)}")
            print_warnings(console, data["warnings"])

        app.emit(data, render)
        return EXIT_WARNINGS if data["warnings"] or data["refused"] else EXIT_OK

    return cmd


add = _command("add", "Add nodes to the pool: only those whose last audit passed recently (others are "
                      "audited first unless --no-audit).\n\n\b\nExamples:\n  fleetctl spares add 'node[9-12]'\n"
                      "  fleetctl spares add node9 --report audit.json --no-audit")
remove = _command("remove", "Take nodes out of the pool (warns below the floor).\n\n\b\nExamples:\n"
                            "  fleetctl spares remove node9 --dry-run")
