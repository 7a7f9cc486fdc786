"""A node-side install (no [ssh], no [mesh] extra) runs what a node runs, and the controller commands
name the extra they need instead of a traceback. numpy, scipy, h5py and paramiko are made
unimportable in a child interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
BLOCKED = ("numpy", "scipy", "h5py", "paramiko")

RUN = """
import sys
class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ImportError("No module named %r" % name)
sys.meta_path.insert(0, Blocker())
from fleetctl.cli import run
code = run(sys.argv[1:])
loaded = sorted({{m.split(".")[0] for m in sys.modules}} & set({blocked!r}))
print("LOADED=" + ",".join(loaded), file=sys.stderr)
sys.exit(code)
"""


@pytest.fixture
def site(tmp_path):
    (tmp_path / "n1").mkdir()
    (tmp_path / "n1" / "kern.log").write_text("")
    path = tmp_path / "site.toml"
    path.write_text(f'[cluster]\nname = "t"\n[access]\ntransport = "local"\n[checks]\n'
                    f'kernel_log = "{tmp_path}/{{node}}/kern.log"\n'
                    '[[node_classes]]\nname = "c"\nnodes = "n1"\nmounts = ["/"]\n')
    return path


def fleetctl(*args, cwd: Path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETCTL_")}
    env.update(PYTHONPATH=str(ROOT), SLURMD_NODENAME="n1", FLEETCTL_HOOK_STATE_DIR=str(cwd / "state"),
               NO_COLOR="1")
    return subprocess.run([sys.executable, "-c", RUN.format(blocked=BLOCKED), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args", [
    ["audit", "--local", "--level", "quick"],
    ["audit", "n1", "--level", "quick"],
    ["config", "check"],
    ["exec", "-t", "local", "n1", "--", "true"],
])
def test_node_side_commands_need_no_extra(site, args):
    out = fleetctl("--site", str(site), *args, cwd=site.parent)
    assert out.returncode == 0, out.stderr
    assert "LOADED=\n" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("args, extra", [
    (["audit", "n1", "--mesh-only"], "mesh"),
    (["audit", "analyze", "run.h5"], "mesh"),
    (["audit", "n1", "-t", "ssh"], "ssh"),
])
def test_controller_commands_name_their_extra(site, args, extra):
    out = fleetctl("--site", str(site), *args, cwd=site.parent)
    assert out.returncode == 3, out.stderr
    assert f"hint: pip install 'fleetctl[{extra}]'" in out.stderr and "Traceback" not in out.stderr
