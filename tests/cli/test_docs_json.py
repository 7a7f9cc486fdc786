"""Every JSON example in the docs is checked against what fleetctl itself accepts or writes: the lens
event and act record examples pass the validators the readers use, the result document passes the
payload's document check, and the audit report and exec output examples use only keys that a real
`audit --local` and `exec` (run here) write. A field renamed in the code fails here."""

from __future__ import annotations

import json
import re
from pathlib import Path

from fleetctl.act.actionlog import well_formed
from fleetctl.checks.document import check_document
from fleetctl.cli import run
from fleetctl.lens.eventlog import problem

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```json\n(.*?)^```", re.M | re.S)


def examples(doc: str) -> list:
    """The JSON blocks of docs/<doc>, `// comments` removed (exec.md annotates its fields)."""
    text = (ROOT / "docs" / doc).read_text()
    return [json.loads(re.sub(r"\s+//[^\n]*", "", block)) for block in FENCE.findall(text)]


def keys(value, prefix: str = "") -> set[str]:
    """Dotted key paths of objects (lists: their first element), e.g. summary.by_status."""
    if isinstance(value, list):
        return keys(value[0], prefix + "[]") if value and isinstance(value[0], dict) else set()
    if not isinstance(value, dict):
        return set()
    out = set()
    for k, v in value.items():
        path = f"{prefix}.{k}" if prefix else k
        out.add(path)
        if not (prefix.endswith("by_status") or k in ("by_status", "nodes_by_status", "env", "details")):
            out |= keys(v, path)
    return out


def test_every_docs_json_block_parses():
    blocks = [(p.name, b) for p in sorted((ROOT / "docs").glob("*.md")) for b in examples(p.name)]
    assert len(blocks) >= 8


def test_lens_event_examples_are_valid_event_records():
    events = examples("lens.md")
    assert events
    for ev in events:
        assert problem(ev) is None, (ev["id"], problem(ev))


def test_the_act_record_example_is_well_formed():
    [rec] = examples("act.md")
    assert well_formed(rec)


def test_the_result_document_example_passes_the_document_check():
    doc = examples("checks.md")[0]
    assert check_document(doc) is doc


def test_the_audit_report_example_uses_the_keys_audit_writes(capsys):
    """Top level, summary (its `<status>_nodes` keys appear with such nodes) and a node's entry and
    results: what the documented report shows, a real one has."""
    [documented] = examples("audit.md")
    rc = run(["audit", "--local", "--level", "quick", "--format", "json"])
    real = json.loads(capsys.readouterr().out)
    assert rc in (0, 1, 2)
    assert set(documented) == set(real)
    summary = {k for k in documented["summary"] if not k.endswith("_nodes")}
    assert summary == set(real["summary"]) - {k for k in real["summary"] if k.endswith("_nodes")}
    assert set(documented["nodes"][0]) <= set(real["nodes"][0]), set(documented["nodes"][0]) - set(real["nodes"][0])
    # evidence and simulated appear on results that have them
    assert set(documented["nodes"][0]["results"][0]) <= set(real["nodes"][0]["results"][0]) | {"evidence", "simulated"}


def test_the_exec_example_uses_the_keys_exec_writes(capsys):
    [documented] = examples("exec.md")
    site = str(ROOT / "site_configs" / "lab-example.toml")
    rc = run(["exec", "--site", site, "-t", "local", "--format", "json", "node1", "--", "true"])
    real = json.loads(capsys.readouterr().out)  # node1's namespace is absent here: an error result, same shape
    assert rc in (0, 2, 3) and real["results"]
    assert keys(documented) == keys(real), (sorted(keys(documented) ^ keys(real)))
