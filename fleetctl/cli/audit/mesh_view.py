"""`fleetctl audit --mesh` and `audit analyze`: running the probe mesh and rendering its result.

The work is in fleetctl.meshrun (probe_run, analyze, via fleetctl.audit.command); this module draws
the human view: findings first, then a compact health table per switch and per link direction.
"""

from __future__ import annotations

from rich.markup import escape

SEV_STYLE = {"critical": "bold red", "major": "red", "minor": "yellow"}


def render(console, data: dict) -> None:
    s = data["summary"]
    console.print(f"[bold]fleetctl mesh[/bold] {data['cluster']} run {data['run_id']}: "
                  f"{s['pairs']} NIC pairs, {s['probes']} probes, {s['loss_pct']:g} % lost, "
                  f"{s['paths']} paths ({s['paths_traced']} traced), solver {s['solver']}")
    plan = s.get("plan") or {}
    if plan:
        console.print(f"plan: {plan['design']}, {plan['pairs']} pairs, "
                      f"{plan['rate_per_pair_pps']:g} probes/s per pair ({plan['rate_source']}), "
                      f"up to {plan['host_pps_max']:g} probes/s per host (budget "
                      f"{plan['budget_pps']:g})")
    _render_findings(console, data["findings"])
    _render_health(console, data.get("health") or {})
    _render_floor(console, s.get("loss_floor") or {})
    _render_clock(console, data.get("clock") or {})
    for w in data.get("warnings", []):
        console.print(f"[yellow]warning[/yellow] {escape(w)}")
    if data.get("file"):
        console.print(f"run file: {escape(data['file'])}")


def _render_findings(console, findings: list[dict]) -> None:
    if not any(f.get("category") != "probe" for f in findings):
        console.print("[green]no network finding[/green]")
    for f in findings:
        if f.get("category") == "probe":
            console.print(f"[yellow]WARNING [/] {f['check']} [bold]{escape(f['element']['id'])}"
                          f"[/bold]: {escape(f['note'])}; fix: {escape(f['fix'])}")
            continue
        el = f["element"]
        name = el["id"] + (f" ({el['direction']})" if el.get("direction") else "")
        console.print(f"[{SEV_STYLE.get(f['severity'], '')}]{f['severity'].upper():8}[/] "
                      f"{f['metric']:5} [bold]{el['type']} {escape(name)}[/bold] "
                      f"confidence {f['confidence']:.2f}: {escape('; '.join(_detail(f)))}")


def _detail(f: dict) -> list[str]:
    ev = f["evidence"]
    detail = []
    if f["metric"] in ("loss", "down") and ev.get("loss_pct_bad_median") is not None:
        detail.append(f"loss {ev['loss_pct_bad_median']:g} % on {ev['paths_bad']}/{ev['paths_through']} paths")
    if f["metric"] == "delay" and ev.get("excess_delay_us_bad_median") is not None:
        detail.append(f"+{ev['excess_delay_us_bad_median']:g} us on {ev['paths_bad']}/"
                      f"{ev['paths_through']} paths")
    if ev.get("check"):
        detail.append(ev.get("note", ev["check"]))
    if ev.get("indistinguishable_from"):
        detail.append("or " + ", ".join(ev["indistinguishable_from"]))
    if f.get("significance"):
        detail.append(f"q {f['significance']['q_value']:.2g}")
    return detail


def _render_health(console, health: dict) -> None:
    from rich.table import Table

    if health.get("switches"):
        t = Table(title="switches", box=None, pad_edge=False)
        for c in ("switch", "tier", "paths", "probes", "loss %", "p50 us"):
            t.add_column(c, justify="left" if c == "switch" else "right")
        for r in health["switches"]:
            t.add_row(escape(r["id"]), str(r["tier"]), str(r["paths"]), str(r["probes"]),
                      _num(r["loss_pct"]), _num(r["p50_us"]))
        console.print(t)
    links = [r for r in health.get("links", []) if r["probes"]]
    if links:
        t = Table(title="link directions", box=None, pad_edge=False)
        for c in ("direction", "paths", "probes", "loss %", "p50 us"):
            t.add_column(c, justify="left" if c == "direction" else "right")
        for r in links:
            t.add_row(escape(r["direction"]), str(r["paths"]), str(r["probes"]), _num(r["loss_pct"]),
                      _num(r["p50_us"]))
        console.print(t)


def _render_clock(console, c: dict) -> None:
    line = f"clock: {c.get('synchronized', 0)}/{c.get('hosts', 0)} hosts synchronised"
    if c.get("max_pair_residual_us") is not None:
        line += f", largest pair residual {c['max_pair_residual_us']:g} us"
    truth = c.get("truth") or {}
    if truth.get("hosts"):
        line += (f"; vs injected lab skew: p99 {truth['offset_error_us_p99']:g} us, "
                 f"max {truth['offset_error_us_max']:g} us")
    console.print(line)


def _render_floor(console, floor: dict) -> None:
    """The loss floor: a smaller loss is not measurable with this run, nor missed, nor raised."""
    links = floor.get("links")
    if not links:
        return
    conf = 100 * floor.get("confidence", 0.95)
    console.print(f"loss floor ({conf:g} % confidence): {links['loss_floor_pct_median']:g} % per "
                  f"link direction (median), {links['loss_floor_pct_max']:g} % on the least probed "
                  f"({links['least_probed']}); a smaller loss is not measurable with this run")
    vague = links.get("below_floor", []) + floor.get("not_significant", [])
    if vague:
        names = ", ".join(v["element"] for v in vague[:6]) + (" ..." if len(vague) > 6 else "")
        console.print(f"not measurable with this run (loss seen, not significant): {names}")
    if links.get("unprobed"):
        console.print(f"not probed: {', '.join(links['unprobed'][:6])}")


def _num(v) -> str:
    return "-" if v is None else f"{v:g}"
