"""The README's walk-through, run top to bottom as written, on the session lab.

A newcomer runs `./scripts/demo` (lab up, an Xid 79 on node2's gpu3, `audit --drain`) and then types the
README's block line by line. This test does the demo's fault and audit on the session lab (same shape:
4 hosts x 2 NICs, 2 leaves, 2 spines, 4 GPUs), then runs every line of the README block in one shell,
as a person would, and checks what each line must show. Two lines are adapted: the venv activation
(the test's interpreter is the venv) and `fleetctl lab down` (the session lab is torn down by the
fixture); `srun` gets a timeout so a walk-through that would hang fails instead.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fleetctl.lab import faults

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[2]
DEMO_STEPS = ["fleetctl lab fault add node2:gpu3 --xid 79", "fleetctl audit --level quick --drain"]
MARK = "@@walkthrough-rc="


def readme_block() -> list[str]:
    text = (ROOT / "README.md").read_text()
    start = text.index("```sh\n. .venv/bin/activate")
    block = text[start + len("```sh\n"):text.index("```", start + 5)]
    return [line for line in block.splitlines() if line.strip()]


def adapt(line: str) -> str | None:
    command = line.split("  #")[0].strip()
    if command == ". .venv/bin/activate" or command == "fleetctl lab down":
        return None
    return re.sub(r"^srun ", "timeout 60 srun ", command)


def run_lines(lines: list[str], cwd: Path, env: dict) -> list[tuple[str, int, str]]:
    """Run the lines in one bash, in order; return (line, exit code, output) for each."""
    script = "".join(f"{line}\necho '{MARK}'$?\n" for line in lines)
    out = subprocess.run(["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=600).stdout
    chunks = out.split(MARK)
    results = []
    for i, line in enumerate(lines):
        rc_text, _, _ = chunks[i + 1].partition("\n")
        body = chunks[i].split("\n", 1)[1] if i else chunks[i]
        results.append((line, int(rc_text), body))
    return results


def test_demo_steps_match_the_demo_script():
    demo = (ROOT / "scripts" / "demo").read_text()
    for step in DEMO_STEPS:
        assert step in demo, f"scripts/demo no longer runs {step!r}: update this test"


def test_readme_walkthrough_runs_top_to_bottom(lab, tmp_path):
    env = {**lab.command_env(), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "NO_COLOR": "1", "COLUMNS": "200"}
    env.pop("FLEETCTL_SITE", None)  # the walk-through's `eval "$(fleetctl lab env)"` sets it
    env.pop("SLURM_CONF", None)
    try:
        demo = run_lines(DEMO_STEPS, tmp_path, {**env, **lab.env})
        assert [rc for _, rc, _ in demo] == [0, 2], demo
        lines = [a for a in map(adapt, readme_block()) if a]
        results = run_lines(lines, tmp_path, env)
    finally:
        faults.clear()
    by_line = {line.split("  #")[0].strip(): (rc, out) for line, rc, out in results}

    def out(prefix: str, rc: int = 0) -> str:
        (line,) = [k for k in by_line if k.startswith(prefix)]
        assert by_line[line][0] == rc, (line, by_line[line])
        return by_line[line][1]

    assert re.search(r"node2 drained fleetctl:xid\.79 ", out("sinfo -N")), results
    three = out("timeout 60 srun -N3").split()
    assert sorted(three) == ["node1", "node3", "node4"], results
    assert "resumed node2" in out("fleetctl audit --resume"), results
    assert sorted(out("timeout 60 srun -N4").split()) == ["node1", "node2", "node3", "node4"], results
    assert "leaf1--spine2" in out("fleetctl audit --mesh-only", rc=2), results
    assert "leaf1--spine2" in out("fleetctl audit analyze", rc=2), results
    assert all(rc == 0 for line, rc, _ in results if "--mesh-only" not in line and "analyze" not in line), \
        results
    assert (tmp_path / "run.h5").is_file()
