"""Write the node bundle: one executable zipapp holding fleetctl and the pure-Python parts of what a
node imports (click, rich and its pygments/markdown-it/mdurl, ClusterShell, PyYAML without its C
speedups), with their licence files under licenses/. For nodes that must not get a venv:

    install -m 0755 fleetctl-VERSION.pyz /usr/local/lib/fleetctl.pyz
    /usr/local/lib/fleetctl.pyz audit --local          (the node's /usr/bin/python3, >= 3.11)

Modules are stored with unchecked-hash .pyc beside them, compiled by this Python: a node of the same
Python minor version imports them without compiling (the Prolog's path); another version compiles
from the stored sources in memory. Run with the venv's Python: python scripts/node_bundle.py OUT.pyz
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import io
import os
import py_compile
import sys
import tempfile
import zipfile
from pathlib import Path

# distribution -> the top-level packages it contributes (what the node path imports)
BUNDLED = {"click": ["click"], "rich": ["rich"], "pygments": ["pygments"],
           "markdown-it-py": ["markdown_it"], "mdurl": ["mdurl"], "ClusterShell": ["ClusterShell"],
           "PyYAML": ["yaml"]}
INTERPRETER = "/usr/bin/python3 -I"  # isolated: no PYTHONPATH, user site or cwd (root in a Prolog)
MAIN = "from fleetctl.entry import main\nmain()\n"
# The whole fleetctl package goes in: the CLI's command table lists every command, a node's included.
SKIP_SUFFIXES = (".so", ".pyd", ".pyc", ".c", ".h")


def package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"node_bundle: {name} is not installed in {sys.prefix}")
    return Path(list(spec.submodule_search_locations)[0])


def _compiled(source: Path) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "m.pyc"
        py_compile.compile(str(source), cfile=str(target), doraise=True,
                           invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
        return target.read_bytes()


def add_package(zf: zipfile.ZipFile, root: Path) -> int:
    count = 0
    for path in sorted(root.rglob("*")):
        if path.is_dir() or "__pycache__" in path.parts or path.suffix in SKIP_SUFFIXES:
            continue
        arcname = str(Path(root.name) / path.relative_to(root))
        zf.write(path, arcname)
        if path.suffix == ".py":
            zf.writestr(arcname + "c", _compiled(path))  # zipimport reads module.pyc beside module.py
        count += 1
    return count


def add_licences(zf: zipfile.ZipFile, dist_name: str) -> None:
    dist = importlib.metadata.distribution(dist_name)
    for f in dist.files or []:
        if any(word in str(f).upper() for word in ("LICEN", "COPYING")):
            zf.writestr(f"licenses/{dist_name}-{dist.version}/{Path(str(f)).name}", f.read_text())


def build(out: Path) -> int:
    buffer = io.BytesIO()
    files = 0
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("__main__.py", MAIN)
        files += add_package(zf, package_dir("fleetctl"))
        for dist_name, packages in BUNDLED.items():
            for name in packages:
                files += add_package(zf, package_dir(name))
            add_licences(zf, dist_name)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_bytes(f"#!{INTERPRETER}\n".encode() + buffer.getvalue())
    os.chmod(tmp, 0o755)
    os.replace(tmp, out)
    return files


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python scripts/node_bundle.py OUT.pyz")
    target = Path(sys.argv[1])
    n = build(target)
    print(f"node bundle: {target} ({n} files, {target.stat().st_size // 1024} KiB)")
