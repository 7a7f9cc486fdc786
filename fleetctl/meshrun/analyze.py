"""Analysis of one probe run, fresh from the agents or re-read from its HDF5 file.

records -> clock sync (offsets, drifts) -> per-window, per-path loss and delay -> triangulation,
plus the discovery checks for links routing has withdrawn -> findings, and a per-link /
per-switch health table. Writing the run file is here too, so `audit analyze FILE` re-analyses
exactly what `audit --mesh` wrote.
"""

from __future__ import annotations

import json
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fleetctl.analysis.integrity import (IntegrityThresholds, budget_finding, host_delay_note,
                                         overload_findings, overload_marks, probes_kept)
from fleetctl.analysis.rollup import is_host_side
from fleetctl.analysis.significance import DEFAULT_FDR, significant
from fleetctl.analysis.solvers import get_solver
from fleetctl.analysis.step import element_stats
from fleetctl.analysis.triangulate import triangulate
from fleetctl.analysis.windows import add_pair_figures, build_windows, host_clock
from fleetctl.errors import EXIT_FAILURES, EXIT_OK, EXIT_WARNINGS, DataError
from fleetctl.mesh.collect import clock_error
from fleetctl.mesh.discovery import Discovery, dead_link_findings
from fleetctl.mesh.loops import add_loop_stats
from fleetctl.model.fabric import PathTable, Topology, WindowStats
from fleetctl.model.findings import sort_key
from fleetctl.store.runfile import RunWriter


@dataclass
class RunData:
    """Everything a run consists of, before or after the HDF5 file."""

    run_id: str
    cluster: str
    topo: Topology
    paths: PathTable
    flows: np.ndarray
    probes: np.ndarray
    epoch_ns: int
    parameters: dict
    switch_results: dict[str, bool] = field(default_factory=dict)
    agents: dict = field(default_factory=dict)
    discovery: dict = field(default_factory=dict)
    clock_truth: dict | None = None
    warnings: list[str] = field(default_factory=list)
    # per node: the agent's health table {"fields", "windows", "window_s"} (HDF5 /health)
    health: dict = field(default_factory=dict)


@dataclass
class Analysis:
    findings: list[dict]
    clock: object  # ClockModel
    windows: object  # analysis.windows.Windows
    solver: str
    health: dict
    clock_summary: dict
    integrity: dict = field(default_factory=dict)  # overload marks, probes set aside
    measurability: dict = field(default_factory=dict)  # loss floor, losses below it


def analyze(run: RunData, solver: str = "nnls", window_s: float | None = None,
            statistic: str = "p50") -> Analysis:
    """Records -> integrity (probes of overloaded or absent agents set aside) -> clock fit ->
    windows -> the probe engine's window step over every window (triangulate) -> significance ->
    findings, with the clock summary, the health table and what could not be measured."""
    get_solver(solver)  # an unknown name fails before any work
    if run.probes.size == 0:
        raise DataError(f"run {run.run_id}: no probe records (did any agent run?)")
    topo = run.topo
    hosts, nic_host = topo.hosts, topo.nic_host_index
    window_s = float(window_s or run.parameters.get("window_s") or 5.0)
    marks = overload_marks(run.health, hosts, IntegrityThresholds(
        echo_timeout_s=echo_timeout_s(run.parameters)))
    keep = probes_kept(run.probes, nic_host, hosts, marks)
    probes = _rows(run.probes, keep) if keep.any() else run.probes
    pair = probes["dst_nic"] >= 0  # the rest are loop probes to a switch (loops.py)
    all_pair = run.probes["dst_nic"] >= 0
    if not all_pair.any():
        raise DataError(f"run {run.run_id}: no NIC-to-NIC probe records")
    clock = host_clock(_rows(run.probes, all_pair), nic_host, hosts, run.epoch_ns)
    usable = keep.any() and pair.any()
    if not usable:  # every probe set aside: nothing to triangulate
        probes, pair = run.probes, all_pair
    w = build_windows(_rows(probes, pair), run.flows, len(run.paths), len(topo.nics), nic_host,
                      window_s, run.epoch_ns, clock)
    add_loop_stats(w, probes[~pair], run.flows, topo, run.paths)
    findings, dropped, fdr = _findings(run, w, solver, statistic, usable, marks)
    integrity = {"probes": int(run.probes.size), "probes_set_aside": int((~keep).sum()),
                 "hosts_overloaded": sorted(h for h, m in marks.items() if m.overloaded),
                 "hosts_with_health": len(marks), "triangulated": bool(usable),
                 "probes_to_agents_not_running": {h: m.probes_outside_alive
                                                  for h, m in marks.items()
                                                  if m.probes_outside_alive},
                 "probes_answer_log_pending": {h: m.probes_log_pending for h, m in marks.items()
                                               if m.probes_log_pending}}
    table = health_table(topo, run.paths, w)
    return Analysis(findings, clock, w, solver, table, _clock_summary(run, clock, all_pair), integrity,
                    measurability(table, dropped, fdr))


def _rows(records: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The records where `mask` holds; the array itself when it holds everywhere (a 1,280 x 8
    run's 5 M records are 270 MB a copy, and most runs keep every probe)."""
    return records if mask.all() else records[mask]


def _findings(run: RunData, w, solver: str, statistic: str, usable: bool, marks) -> tuple[list, list, float]:
    """(findings, network findings not significant, the false-discovery rate): triangulated ones
    kept by significance, a host's own delay as a note, dead links, probe warnings."""
    topo = run.topo
    delay = w.path_p50_us if statistic == "p50" else w.path_p99_us
    stats = WindowStats(w.path_sent, w.path_lost, delay)
    raw = triangulate(topo, run.paths, stats, solver=solver) if usable else []
    for f in raw:
        f.setdefault("category", "network")
    tests = max(1, sum(el.type in ("link", "nic", "switch", "host") for el in topo.elements)
                * w.path_sent.shape[0] * 2)
    fdr = float(run.parameters.get("fdr") or DEFAULT_FDR)
    findings, dropped = significant(raw, tests, fdr)
    findings = [host_delay_note(f) if is_host_side(f) else f for f in findings]
    disc = Discovery(run.paths, run.flows, 0, 0, run.switch_results)
    have = {(f["element"]["type"], f["element"]["id"]) for f in findings}
    for f in dead_link_findings(topo, disc):
        if ("link", f["element"]["id"]) not in have:
            f.setdefault("category", "network")
            findings.append(f)
    findings += overload_findings(marks, run.parameters.get("rate"))
    budget = budget_finding(run.parameters.get("plan") or {})
    if budget:
        findings.append(budget)
    findings.sort(key=sort_key)
    return findings, dropped, fdr


def _clock_summary(run: RunData, clock, all_pair) -> dict:
    nic_host = run.topo.nic_host_index
    pairs = _rows(run.probes, all_pair)
    span = float((pairs["t_send"].max() - pairs["t_send"].min()) * 1e-9)
    seen = np.zeros(len(run.topo.hosts), dtype=bool)  # a flag per host, not a sort of every probe
    seen[nic_host[pairs["src_nic"]]] = True
    seen[nic_host[pairs["dst_nic"]]] = True
    probed = np.flatnonzero(seen)
    csum = {"hosts": int(probed.size),
            "synchronized": int(np.isfinite(clock.offset[probed]).sum()),
            "pairs": len(clock.pairs),
            "max_pair_residual_us": round(float(np.nanmax(np.abs(clock.residual))) * 1e6, 2)
            if len(clock.residual) else None}
    if run.clock_truth:
        csum["truth"] = clock_error(clock, run.topo.hosts, run.clock_truth, run.epoch_ns, span)
    return csum


def exit_code(data: dict) -> int:
    """EXIT_FAILURES for a network finding, EXIT_WARNINGS for probe warnings only (an overloaded
    agent, a rate above the budget: the measurement, not the network), else EXIT_OK."""
    categories = [f.get("category", "network") for f in data.get("findings", [])]
    if any(c != "probe" for c in categories):
        return EXIT_FAILURES
    return EXIT_WARNINGS if categories else EXIT_OK


def echo_timeout_s(parameters: dict) -> float:
    """The agents' echo timeout for a run: configured, or the agent's rule max(linger, 0.5)."""
    try:
        value = float(parameters.get("echo_timeout_s") or max(float(parameters.get("linger", 1.0)),
                                                              0.5))
    except (TypeError, ValueError):
        return 1.0
    return min(10.0, max(0.1, value)) if value == value else 1.0


def run_window(window_s: float | None, duration: float | None, linger: float = 1.0) -> float | None:
    """The analysis window of a run: a window as long as the run would leave its last probes alone
    in a second, useless window, so such a run is one window covering it and its linger."""
    if window_s and duration and window_s >= duration:
        return duration + linger
    return window_s


def reanalyze(file: str | Path, solver: str | None = None, out: str | Path | None = None) -> dict:
    """`audit analyze`: a stored run analysed again (its own solver unless one is given), written to
    `out` when given; the JSON object of to_dict()."""
    started = time.monotonic()
    run = read_run(file)
    p = run.parameters
    solver = solver or p.get("solver") or "nnls"
    window = run_window(p.get("window_s"), p.get("duration"), p.get("linger", 1.0))
    result = analyze(run, solver, window, p.get("statistic", "p50"))
    path = write_run(Path(out).expanduser(), run, result) if out else None
    return to_dict(run, result, path, time.monotonic() - started)


def health_table(topo: Topology, paths: PathTable, w) -> dict:
    """Per switch-to-switch link direction, NIC cable direction and switch: probes over it (traced
    paths count 1, candidate rows their crossing probability), lost %, median path delay."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a path dead in every window: NaN
        p50 = np.nanmedian(np.where(w.path_sent > 0, w.path_p50_us, np.nan), axis=0) \
            if w.path_sent.shape[0] else np.full(len(paths), np.nan)
    st = element_stats(paths.matrix(topo.n_elements), w.path_sent.sum(axis=0), w.path_lost.sum(axis=0),
                       p50, (50.0,))
    rows = {"links": [], "switches": []}
    for e, el in enumerate(topo.elements):
        if el.type not in ("link", "switch"):
            continue
        sent, lost, median = st["sent"][e], st["lost"][e], st["delay"][0, e]
        entry = {"id": el.id, "probes": int(round(sent)),
                 "loss_pct": round(100 * lost / sent, 3) if sent else None,
                 "paths": int(st["paths"][e]),
                 "p50_us": round(float(median), 1) if np.isfinite(median) else None}
        if el.type == "link":
            entry["direction"] = el.direction
            rows["links"].append(entry)
        else:
            entry["tier"] = topo.switch_tier.get(el.id, 0)
            rows["switches"].append(entry)
    return rows


def measurability(table: dict, dropped: list[dict], fdr: float,
                  confidence: float = 0.95) -> dict:
    """The loss floor per element kind (rule of three at `confidence`: the smallest loss its probes
    can tell from zero), the elements never probed, and losses seen but not significant: those are
    "not measurable with this run", neither missed nor raised."""
    from fleetctl.mesh.plan import loss_floor

    out: dict = {"confidence": confidence, "fdr": fdr}
    for kind in ("links", "switches"):
        rows = table.get(kind) or []
        probed = [r for r in rows if r["probes"] > 0]
        if not probed:
            continue
        floors = loss_floor(np.array([r["probes"] for r in probed]), confidence) * 100
        worst = int(np.argmax(floors))
        out[kind] = {"loss_floor_pct_median": round(float(np.median(floors)), 4),
                     "loss_floor_pct_max": round(float(floors[worst]), 4),
                     "least_probed": probed[worst].get("direction") or probed[worst]["id"],
                     "unprobed": [r.get("direction") or r["id"] for r in rows
                                  if r["probes"] == 0][:50]}
        below = []
        for r, fl in zip(probed, floors):
            if r["loss_pct"] and r["loss_pct"] <= fl:
                below.append({"element": r.get("direction") or r["id"], "loss_pct": r["loss_pct"],
                              "loss_floor_pct": round(float(fl), 4)})
        out[kind]["below_floor"] = below[:50]
    out["not_significant"] = [
        {"element": f["element"]["id"], "metric": f["metric"],
         "loss_pct_bad_median": (f.get("evidence") or {}).get("loss_pct_bad_median"),
         "q_value": f["significance"]["q_value"]} for f in dropped][:50]
    return out


def to_dict(run: RunData, a: Analysis, path: Path | None = None,
            elapsed: float | None = None) -> dict:
    """The JSON object of `audit --mesh --format json` and `audit analyze`."""
    probes = run.probes
    sent = int(probes.size)
    lost = int((probes["lost"] != 0).sum())
    out = {
        "schema": "fleetctl.mesh/1",
        "run_id": run.run_id,
        "cluster": run.cluster,
        "file": str(path) if path else None,
        "summary": {
            "nics": len({int(x) for x in probes["src_nic"]}),
            "pairs": len({(int(a), int(b)) for a, b in zip(probes["src_nic"], probes["dst_nic"])
                          if b >= 0}),
            "loops": int((run.flows["dst_nic"] < 0).sum()),
            "flows": int(len(run.flows)), "paths": len(run.paths),
            "paths_traced": int(run.paths.traced.sum()),
            "probes": sent, "lost": lost, "loss_pct": round(100 * lost / max(1, sent), 4),
            "windows": int(a.windows.path_sent.shape[0]), "window_s": a.windows.window_s,
            "solver": a.solver, "findings": len(a.findings),
            "network_findings": sum(f.get("category") != "probe" for f in a.findings),
            "probe_warnings": sum(f.get("category") == "probe" for f in a.findings),
            "plan": run.parameters.get("plan"),
            "loss_floor": a.measurability,
            "integrity": a.integrity,
        },
        "findings": a.findings,
        "clock": a.clock_summary,
        "health": a.health,
        "parameters": run.parameters,
        "discovery": run.discovery,
        "agents": run.agents,
        "warnings": run.warnings,
    }
    if elapsed is not None:
        out["elapsed_s"] = round(elapsed, 2)
    return out


def write_run(path: str | Path, run: RunData, a: Analysis) -> Path:
    """The HDF5 run file (store.RunWriter: .tmp, fsync, rename). Extra root attributes (optional
    in schema 1): `agents`, `discovery`, `switch_probes`, `clock_truth` as JSON."""
    path = Path(path)
    w = a.windows
    if w.pair_src is None:  # the analysis needs paths only; the file keeps what each pair saw
        pair = run.probes["dst_nic"] >= 0
        add_pair_figures(w, run.probes[pair], len(run.topo.nics), run.topo.nic_host_index,
                         run.epoch_ns, a.clock)
    with RunWriter(path, run_id=run.run_id, cluster=run.cluster, parameters=run.parameters,
                   epoch_ns=run.epoch_ns) as wr:
        wr.write_topology(run.topo)
        wr.write_paths(run.paths)
        wr.write_flows(run.flows)
        wr.append_probes(run.probes)
        wr.write_windows(w)
        wr.write_clock(a.clock)
        wr.write_findings(a.findings, a.solver)
        if run.health:
            wr.write_health(run.health, list(dict.fromkeys(run.topo.nic_host)))
        for name, value in (("agents", run.agents), ("discovery", run.discovery),
                            ("switch_probes", run.switch_results),
                            ("clock_truth", run.clock_truth)):
            wr.f.attrs[name] = json.dumps(value, sort_keys=True)
    return path


def read_run(path: str | Path) -> RunData:
    """A stored run back as RunData (the reader validates the file first)."""
    from fleetctl.store.reader import open_run

    with open_run(path) as r:
        attrs = r.attrs
        topo = r.topology()

        def extra(name, default):
            try:
                return json.loads(attrs.get(name) or "null") or default
            except ValueError:
                raise DataError(f"{path}: root attribute {name!r} is not JSON") from None

        return RunData(run_id=str(attrs.get("run_id", "")), cluster=str(attrs.get("cluster", "")),
                       topo=topo, paths=r.paths(), flows=r.flows(), probes=r.probes(),
                       epoch_ns=int(attrs.get("epoch_ns", 0)), parameters=attrs["parameters"],
                       switch_results=extra("switch_probes", {}), agents=extra("agents", {}),
                       discovery=extra("discovery", {}), clock_truth=extra("clock_truth", None),
                       health=r.health())
