"""The human audit report folds nodes with the same problems into one block (as `clush -b` does) and
`--wide` gives each node its own; JSON is unchanged (tests/cli/test_audit_cli.py)."""

from __future__ import annotations

from types import SimpleNamespace

from rich.console import Console

from fleetctl.cli.audit.render import render


def node(name, status="ok", results=(), error="", transport="ok"):
    return {"node": name, "status": status, "action": "inspect-hardware" if status == "fail" else "none",
            "level": "standard", "escalated_from": [], "transport": transport, "error": error,
            "results": [{"code": code, "status": st, "subject": subject, "message": message}
                        for code, st, subject, message in results]}


def report_text(nodes, *, wide=False, changes=None) -> str:
    summary = {"status": "fail", "nodes": len(nodes), "fail": sum(n["status"] == "fail" for n in nodes),
               "error": sum(n["status"] == "error" for n in nodes), "warn": 0,
               "ok": sum(n["status"] == "ok" for n in nodes)}
    report = SimpleNamespace(cluster="t", level="standard", simulated=False, fleet=[], actions={},
                             changes={"nodes": changes} if changes else None)
    console = Console(record=True, width=200, color_system=None)
    render(console, report, {"nodes": nodes, "summary": summary, "elapsed_s": 1.0}, wide=wide)
    return console.export_text()


LINK_DOWN = [("nic.link", "fail", "eth1", "eth1 is down (carrier lost)"), ("nic.counters", "ok", "eth0", "ok")]


def fleet():
    nodes = [node(f"n{i:02d}") for i in range(1, 49)]
    for i in range(3, 23):  # the same fault on 20 nodes
        nodes[i - 1] = node(f"n{i:02d}", "fail", LINK_DOWN)
    nodes[29] = node("n30", "fail", [("nic.link", "fail", "eth0", "eth0 is down (carrier lost)")])
    for i in (40, 41):
        nodes[i - 1] = node(f"n{i}", "error", error=f"connect to 10.0.0.{i}:22 timed out after 10 s",
                            transport="unreachable")
    return nodes


def test_the_same_fault_on_twenty_nodes_is_one_block():
    text = report_text(fleet())
    assert text.count("n[03-22] (20)") == 1
    assert text.count("nic.link eth1: eth1 is down") == 1
    assert "n30" in text and "nic.link eth0: eth0 is down" in text  # a different problem: its own block
    assert text.count("n[40-41] (2)") == 1 and "unreachable: connect to <address>:22 timed out" in text
    assert len(text.splitlines()) <= 10, text


def test_wide_gives_every_node_its_block():
    text = report_text(fleet(), wide=True)
    assert text.count("nic.link eth1: eth1 is down") == 20
    assert "n[03-22]" not in text


def test_the_same_change_on_many_nodes_is_one_line():
    change = {"status": ["ok", "fail"], "new": ["nic.link"], "resolved": []}
    changes = {f"n{i:02d}": change for i in range(3, 23)}
    changes["n30"] = {"status": ["fail", "ok"], "new": [], "resolved": ["nic.link"]}
    text = report_text(fleet(), changes=changes)
    assert "n[03-22]: ok -> fail; new: nic.link" in text and "n30: fail -> ok; resolved: nic.link" in text
    assert text.count("ok -> fail") == 1
    assert report_text(fleet(), changes=changes, wide=True).count("ok -> fail") == 20
