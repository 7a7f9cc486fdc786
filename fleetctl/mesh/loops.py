"""Loop probes: from a NIC to a neighbouring switch and back, to tell apart links that NIC-to-NIC
paths always cross together.

In a 2-leaf fabric every path over spine S crosses leaf1->S together with S->leaf2 (and leaf2->S
with S->leaf1): from NIC pairs alone, a fault on one is indistinguishable from its twin. A loop
NIC -> leaf -> S -> leaf -> NIC crosses both directions of one uplink only, which breaks the tie.
The agent sends its probe (same format, same MAC) to a closed port of the switch's address; the
switch's ICMP port-unreachable comes back into the socket's error queue (IP_RECVERR), carrying
our probe, so the record is found by its slot and the MAC proves it is ours.

Only loops whose switch probe in discovery arrived are probed (a dead link is a discovery
finding already). Loops are part of the run: flows with dst_nic = -1 and a path row
[NIC, NIC->leaf, leaf, leaf->S, S, S->leaf, leaf->NIC] (the repeated leaf and NIC left out),
their probes stored with lost = 3 when unanswered. Their delay is the round trip, mapped onto
the one-way scale of NIC paths with as many link directions (the switch's ICMP answer is slower
than forwarding; only differences between loops matter).

Switches of a production fabric often police ICMP: `MeshOptions.loops = False` turns them off.
"""

from __future__ import annotations

import numpy as np

from fleetctl.mesh.discovery import Discovery, NicAddress
from fleetctl.model.cluster import Cluster
from fleetctl.model.fabric import FLOW_DTYPE, PathTable, Topology, group_quantiles


def plan_loops(topo: Topology, cluster: Cluster, disc: Discovery, usable: dict[str, NicAddress],
               first_flow: int, loop_port: int) -> tuple[Discovery, list[list]]:
    """Add loop flows and paths for every reached switch probe. Returns the extended discovery
    and the agents' loop list [[flow, nic index, switch address], ...]."""
    by_index = {i.index: (nic, i) for nic, i in usable.items()}
    rows = [(disc.paths.row(i), disc.paths.weights[disc.paths.indptr[i]:disc.paths.indptr[i + 1]])
            for i in range(len(disc.paths))]
    src, dst = list(disc.paths.src_nic), list(disc.paths.dst_nic)
    traced = list(disc.paths.traced)
    flows, loops = [], []
    for key, reached in sorted(disc.switch_results.items()):
        nic_idx, _, lid = key[1:].partition(":")
        if not reached or int(nic_idx) not in by_index or lid not in topo.links:
            continue
        nic, info = by_index[int(nic_idx)]
        sw_pos = topo.switch_of(nic)
        own = list(topo.switch_tier)[sw_pos]
        a, b = topo.links[lid]
        other = b if a == own else a
        cable = topo.links_between(nic, own)[0]
        elems = [topo.index("nic", nic), topo.link_dir(cable, nic, own), topo.index("switch", own),
                 topo.link_dir(lid, own, other), topo.index("switch", other),
                 topo.link_dir(lid, other, own), topo.link_dir(cable, own, nic)]
        rows.append((np.array(elems, dtype=np.int64), np.ones(len(elems))))
        src.append(info.index)
        dst.append(info.index)
        traced.append(True)
        flow = first_flow + len(flows)
        flows.append((flow, info.index, -1, loop_port, len(rows) - 1, -1))
        loops.append([flow, info.index, cluster.switches[other].address])
    if not flows:
        return disc, []
    table = PathTable.from_rows(rows, src, dst, traced)
    all_flows = np.concatenate([disc.flows, np.array(flows, dtype=FLOW_DTYPE)])
    return Discovery(table, all_flows, disc.traced_flows, disc.total_flows, disc.switch_results,
                     disc.errors), loops


def add_loop_stats(w, probes: np.ndarray, flows: np.ndarray, topo: Topology,
                   paths: PathTable) -> None:
    """Fill the loop paths' columns of the windows (in place) from the loop probes."""
    if probes.size == 0:
        return
    n_w, n_p = w.path_sent.shape
    pos = {int(f): i for i, f in enumerate(flows["flow"])}
    path = flows["fwd_path"][[pos[int(f)] for f in probes["flow"]]].astype(np.int64)
    start = int(w.start_ns[0])
    win = np.clip((probes["t_send"] - start) // int(round(w.window_s * 1e9)), 0, n_w - 1)
    key = win.astype(np.int64) * n_p + path
    lost = probes["lost"] != 0
    rtt = np.where(lost, np.nan, (probes["t_recv"] - probes["t_send"]) * 1e-3)
    sent = np.bincount(key, minlength=n_w * n_p).reshape(n_w, n_p)
    nlost = np.bincount(key, weights=lost, minlength=n_w * n_p).reshape(n_w, n_p)
    q = group_quantiles(key, rtt, [0.5, 0.99], n_w * n_p).reshape(2, n_w, n_p)
    place_loop_figures(w, np.unique(path), sent, nlost, q, topo, paths)


def place_loop_figures(w, loop_cols: np.ndarray, sent: np.ndarray, nlost: np.ndarray,
                       q: np.ndarray, topo: Topology, paths: PathTable) -> None:
    """Put the loop paths' figures ((W, P) sent and lost, (2, W, P) round-trip p50/p99 in us)
    into the windows: a loop's round trip is the switch's answer time plus two hops, so it is
    moved onto the delay scale of the NIC-pair paths with as many links."""
    n_w = w.path_sent.shape[0]
    hops = _link_counts(topo, paths)
    for wi in range(n_w):
        loop_p50 = q[0, wi, loop_cols]
        if not np.isfinite(loop_p50).any():
            continue
        centre = np.nanmedian(loop_p50)
        pair_cols = np.setdiff1d(np.flatnonzero(w.path_sent[wi] > 0), loop_cols)
        same = pair_cols[hops[pair_cols] == hops[loop_cols[0]]]
        ref = same if same.size else pair_cols
        target = np.nanmedian(w.path_p50_us[wi, ref]) if ref.size and \
            np.isfinite(w.path_p50_us[wi, ref]).any() else 0.0
        w.path_p50_us[wi, loop_cols] = q[0, wi, loop_cols] - centre + target
        w.path_p99_us[wi, loop_cols] = q[1, wi, loop_cols] - centre + target
    w.path_sent[:, loop_cols] = sent[:, loop_cols]
    w.path_lost[:, loop_cols] = nlost[:, loop_cols]


def _link_counts(topo: Topology, paths: PathTable) -> np.ndarray:
    is_link = topo.element_types() == 0
    inc = paths.matrix(topo.n_elements)
    return np.rint(np.asarray(inc[:, np.flatnonzero(is_link)].sum(axis=1)).ravel()).astype(int)
