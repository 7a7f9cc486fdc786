"""The layering of docs/architecture.md, enforced over the AST of every module of fleetctl.

A package may import only packages of a lower rank (never one of its own rank: checks, mesh and
analysis stay independent of one another); only cli/ imports click or rich; outside lab/ and cli/
(production code) nothing imports the lab but the imports listed in LAB_INTERFACES, and nothing
runs nsenter but the modules listed in NSENTER_USERS; no import cycle between top-level packages,
and no ring among the modules of one package. Imports inside functions count like the others.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "fleetctl"

# Rank of every top-level package or module of fleetctl (docs/architecture.md, "Layers").
RANKS = {
    # ground (__init__: the root package, which holds only the version; _version: written by
    # scripts/package from git, imported by __init__ when a built artefact carries it)
    "_version": -1,
    "__init__": 0, "errors": 0, "nodeset": 1, "atomic": 1, "filekit": 1, "registry": 1, "extras": 1, "lazy": 1, "model": 2,
    "nodegroups": 2,
    "config": 3,
    # reach
    "fanout": 4, "slurm": 4, "store": 4, "inventory": 5,
    # detect (independent of one another)
    "checks": 6, "mesh": 6, "analysis": 6,
    # detect, composed: one probe run = mesh + analysis; discover = fan-out + tracer -> a site file
    "meshrun": 7, "discover": 7,
    # act; the lab sits beside the act layer
    "audit": 8, "snapshot": 8, "lab": 8, "failover": 8, "lens": 8,
    # signals from inside training jobs: their events go into lens's event log
    "recovery": 9,
    # the loop: spares build on audit; act (policies, explain) on lens, snapshot and spares
    "spares": 9, "act": 10,
    # every domain's reader of the site file, for `config check`
    "sitecheck": 11,
    # face
    "cli": 12, "entry": 13, "__main__": 14,  # entry: the hooks' fast path (audit), else the CLI
}
FACE = {"cli", "entry", "__main__"}
UI_LIBRARIES = {"click", "rich"}
LAB_USERS = {"lab", "cli"}  # the lab itself and the command line; tests and benchmarks are outside fleetctl/

# The only ways production code reaches the lab: (importing module, imported module) -> why.
LAB_INTERFACES: dict[tuple[str, str], str] = {
    # none: the lab's injected clocks reach the probe engine as plain data (lab.clock_file)
}

# Production modules that run `nsenter` (an argv word), with the documented feature that needs it.
NSENTER_USERS = {
    "fleetctl.fanout.local": "access.local.netns (docs/exec.md, docs/configuration.md): each node's "
                             "command in its network namespace",
    "fleetctl.fanout.stream": "the same option for the local transport's long-running streams (lens)",
}


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__" and len(parts) > 2:
            parts = parts[:-1]
        yield ".".join(parts), path


def _imports(path: Path):
    """(imported module, line) for every absolute import in the file, nested ones included."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module, node.lineno
            if node.module == "fleetctl":  # from fleetctl import x: x may be a package or module
                for alias in node.names:
                    if (PACKAGE / alias.name).is_dir() or (PACKAGE / f"{alias.name}.py").is_file():
                        yield f"fleetctl.{alias.name}", node.lineno


def _top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _graph():
    edges: dict[str, dict[str, list[str]]] = {}
    for module, path in _modules():
        src = _top(module)
        for target, line in _imports(path):
            if target.split(".")[0] != "fleetctl":
                continue
            dst = _top(target) if target != "fleetctl" else "__init__"
            if dst != src:
                edges.setdefault(src, {}).setdefault(dst, []).append(f"{module}:{line} -> {target}")
    return edges


def test_every_package_has_a_layer():
    tops = {_top(m) for m, _ in _modules()}
    missing = sorted(tops - set(RANKS))
    assert not missing, f"new top-level packages {missing}: give them a layer in docs/architecture.md " \
                        "and a rank in RANKS"


def test_only_cli_imports_click_or_rich():
    bad = [f"{module}:{line} imports {target}" for module, path in _modules()
           if _top(module) not in FACE
           for target, line in _imports(path) if target.split(".")[0] in UI_LIBRARIES]
    assert not bad, "domain packages must not import click or rich:\n" + "\n".join(bad)


def test_imports_go_down_the_layers():
    bad = [w for src, targets in _graph().items() for dst, where in targets.items()
           if RANKS.get(dst, 99) >= RANKS.get(src, -1) for w in where if _key(w) not in LAB_INTERFACES]
    assert not bad, "imports against the layering of docs/architecture.md:\n" + "\n".join(bad)


def _key(where: str) -> tuple[str, str]:
    """("fleetctl.mesh.collect", "fleetctl.lab.clock") of "fleetctl.mesh.collect:201 -> fleetctl.lab.clock"."""
    return where.split(":")[0], where.split(" -> ")[1]


def test_lab_is_reached_only_through_its_interfaces():
    used = set()
    for src, targets in _graph().items():
        if src in LAB_USERS:
            continue
        for where in targets.get("lab", []):
            key = _key(where)
            assert key in LAB_INTERFACES, f"production code imports the lab (only lab/, cli/ and tests may): {where}"
            used.add(key)
    assert used == set(LAB_INTERFACES), f"stale LAB_INTERFACES entries: {set(LAB_INTERFACES) - used}"


def test_only_the_listed_modules_run_nsenter():
    """The lab's namespaces are entered by the lab (and the CLI's choice of it), not by production
    code; the fan-out's documented netns option is the exception."""
    found = {module for module, path in _modules() if _top(module) not in LAB_USERS
             for node in ast.walk(ast.parse(path.read_text(), str(path)))
             if isinstance(node, ast.Constant) and node.value == "nsenter"}
    assert found <= set(NSENTER_USERS), f"production code runs nsenter: {sorted(found - set(NSENTER_USERS))}"
    assert found == set(NSENTER_USERS), f"stale NSENTER_USERS entries: {set(NSENTER_USERS) - found}"


def test_no_import_cycle_between_packages():
    edges = {src: set(targets) for src, targets in _graph().items()}
    state: dict[str, int] = {}  # 1 visiting, 2 done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                cycle = path[path.index(nxt):] + [nxt] if nxt in path else [node, nxt]
                pytest.fail("import cycle between packages: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])


def _module_edges() -> dict[str, dict[str, str]]:
    """module -> {module of the same top-level package it imports: "file:line"}. `from P import m`
    names the module P.m when there is one (else P itself, e.g. its __init__'s SnapshotError)."""
    names = {module for module, _ in _modules()}
    edges: dict[str, dict[str, str]] = {}
    for module, path in _modules():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in names else node.module
                           for a in node.names]
            else:
                continue
            for target in targets:
                if target in names and target != module and _top(target) == _top(module):
                    edges.setdefault(module, {}).setdefault(target, f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    return edges


def test_no_import_ring_inside_a_package():
    """A ring among the modules of one package (a -> b -> a, also through its __init__) means neither
    can be read, tested or imported alone; the shared part belongs in a module both import."""
    edges = _module_edges()
    state: dict[str, int] = {}  # 1 visiting, 2 done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                ring = path[path.index(nxt):] + [nxt]
                pytest.fail("import ring inside a package: " + " -> ".join(
                    f"{a} ({edges[a][b]})" for a, b in zip(ring, ring[1:])) + f" -> {nxt}")
            if nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])


def test_mesh_and_analysis_do_not_import_each_other():
    edges = _graph()
    assert "analysis" not in edges.get("mesh", {}), edges["mesh"]["analysis"]
    assert "mesh" not in edges.get("analysis", {}), edges["analysis"]["mesh"]


def test_the_checker_sees_a_violation(tmp_path, monkeypatch):
    """The rules bite: a planted module importing upwards, importing click, importing the lab and
    running nsenter is reported, and so is a ring between two planted modules of one package."""
    fake = tmp_path / "fleetctl"
    (fake / "model").mkdir(parents=True)
    (fake / "lab").mkdir()
    for init in (fake / "model" / "__init__.py", fake / "lab" / "__init__.py", fake / "lab" / "state.py"):
        init.write_text("")
    (fake / "model" / "bad.py").write_text("import click\n\ndef f():\n    from fleetctl.cli import app\n"
                                          "    from fleetctl.lab import state\n    return ['nsenter', '--net=x']\n")
    (fake / "model" / "ring_a.py").write_text("from fleetctl.model import ring_b\n")
    (fake / "model" / "ring_b.py").write_text("def f():\n    from fleetctl.model.ring_a import x\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    with pytest.raises(AssertionError, match="click"):
        test_only_cli_imports_click_or_rich()
    with pytest.raises(AssertionError, match=r"fleetctl.model.bad:4 -> fleetctl.cli"):
        test_imports_go_down_the_layers()
    with pytest.raises(AssertionError, match=r"production code imports the lab .*fleetctl.model.bad:5 -> fleetctl.lab"):
        test_lab_is_reached_only_through_its_interfaces()
    with pytest.raises(AssertionError, match=r"runs nsenter: \['fleetctl.model.bad'\]"):
        test_only_the_listed_modules_run_nsenter()
    with pytest.raises(pytest.fail.Exception, match=r"ring inside a package: fleetctl.model.ring_a "
                                                    r"\(fleetctl/model/ring_a.py:1\) -> fleetctl.model.ring_b "
                                                    r"\(fleetctl/model/ring_b.py:2\) -> fleetctl.model.ring_a"):
        test_no_import_ring_inside_a_package()
