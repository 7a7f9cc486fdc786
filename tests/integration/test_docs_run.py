"""Every fleetctl command line in the docs that can run on the lab runs there, as written, and
fleetctl does the job it describes: exit 0, 1 or 2 (never 3, "fleetctl could not do the job"), no
traceback. The lines that cannot run here are each given a reason below (another cluster's nodes, a
system path, a synopsis with [OPTIONS], the lab's own up/down, ...), and test_docs_commands.py still
parses them. The README's block runs in test_readme_walkthrough.py."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fleetctl.lab import faults
from tests.support.docs import LINES  # the same extraction as the parse test

pytestmark = pytest.mark.lab

MARK = "@@docs-rc="


def why_not_run(doc: str, line: str) -> str | None:
    """None when the line runs on the 4-host lab as written; else why it cannot."""
    command = line.split("  #")[0].strip()
    rules = [
        (doc == "README.md", "the README's block runs top to bottom in test_readme_walkthrough.py"),
        (re.search(r"\[(--|ID\]|NODESET|OPTIONS)|\.\.\.|\[--format json\]", command) is not None,
         "a synopsis ([OPTIONS], ...), not a command line"),
        (re.search(r"\blab (up|down)\b", command) is not None, "the session fixture owns the lab's up and down"),
        (re.search(r"(?<![:\w])gpu\[?\d|node\[01-16\]|@racks|@cpu|@job:|leaf\[1-8\]", command) is not None,
         "names another cluster's nodes, switches or groups"),
        (re.search(r"\s/(etc|var)/", command) is not None, "writes or reads a system path of a real cluster"),
        (re.search(r"\bsnapshot \w+ 4242", command) is not None,
         "needs job 4242 with snapshots (test_snapshot_lab.py)"),
        (re.search(r"\blens (run|stop|status)\b", command) is not None,
         "starts, stops or needs the lens daemon (test_lens_lab.py)"),
        (command.startswith("fleetctl explain"), "needs an audit report act consumed (test_act_lab.py explains one)"),
        ("--ibnetdiscover" in command, "reads an InfiniBand fabric dump (tests/data/real; test_discover.py)"),
        (re.search(r"audit analyze run\.h5", command) is not None,
         "reads the run file another line writes (the README walk-through runs the pair)"),
        ("--mesh-only --duration 10" in command, "the README walk-through runs it"),
    ]
    for matched, reason in rules:
        if matched:
            return reason
    return None


def runnable() -> list[tuple[str, str]]:
    return [(doc, line) for doc, line in LINES if why_not_run(doc, line) is None]


def test_every_documented_line_runs_or_says_why_not():
    reasons = {why_not_run(doc, line) for doc, line in LINES} - {None}
    assert len(runnable()) >= 20, runnable()
    assert all(reasons), reasons


def test_documented_commands_run_on_the_lab(lab, tmp_path):
    env = {**lab.command_env(), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "NO_COLOR": "1", "COLUMNS": "200"}
    shutil.copy(lab.site_file, tmp_path / "site.toml")  # `site discover --diff site.toml`
    lines = [line.split("  #")[0].strip() for _, line in runnable()]
    script = "".join(f"timeout 120 {line} </dev/null 2>&1\necho '{MARK}'$?\n" for line in lines)
    try:
        out = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=1500).stdout
    finally:
        faults.clear()
    chunks = out.split(MARK)
    failed = []
    for i, line in enumerate(lines):
        rc = int(chunks[i + 1].partition("\n")[0])
        body = chunks[i].split("\n", 1)[1] if i else chunks[i]
        if rc not in (0, 1, 2) or "Traceback" in body:
            failed.append((line, rc, body[-600:]))
    assert not failed, failed
