"""What to do after a run: which nodes to escalate to the next level, what changed between two runs.

`suspects()` serves `fleetctl audit --escalate`; `changes()` serves the Slurm Epilog (the document of
the job's Prolog against the one taken after the job: new Xids, ECC increases, carrier flaps).
"""

from __future__ import annotations

from fleetctl.checks.payload.common import RANK, result

LEVELS = ("quick", "standard", "deep")
HARDWARE_ACTIONS = ("reset-gpu", "reboot", "inspect-hardware")


def next_level(level: str) -> str | None:
    i = LEVELS.index(level)
    return LEVELS[i + 1] if i + 1 < len(LEVELS) else None


def suspects(docs: dict) -> list[str]:
    """Nodes worth a deeper look: a warning, or a check that could not finish (error, budget).

    A node that already failed has its verdict; a node that did not answer is a transport matter."""
    return sorted(node for node, doc in docs.items()
                  if doc and any(r["status"] in ("warn", "error") for r in doc.get("results", ())))


def hardware_failures(doc: dict) -> list[dict]:
    """The failed results that mean broken hardware (GPU reset, reboot, inspection): what a Prolog may
    refuse a job for. Configuration mismatches (action `drain`) and unfinished checks are not."""
    return [r for r in (doc or {}).get("results", ())
            if r["status"] == "fail" and r["action"] in HARDWARE_ACTIONS]


def result_key(r: dict) -> tuple[str, str]:
    """Which check a result is, across two runs: (code, subject). GPU results cover all GPUs in one
    record whose subject names the GPUs at fault, so they are keyed by code alone."""
    return r["code"], "" if r["code"].startswith("gpu.") else r.get("subject", "")


def _by_key(doc: dict | None) -> dict:
    return {result_key(r): r for r in (doc or {}).get("results", ())}


def compare(before: dict | None, after: dict | None) -> tuple[list[tuple[dict | None, dict]], list[dict]]:
    """The one "what got worse" between two check documents (or {"results": [...]}), by result_key:
    (worse, resolved): worse = [(the result before or None, the result now)] for every check whose
    status rose (a check new since then counts as `ok` before); resolved = the results that did not
    pass before and are gone or pass now."""
    old, new = _by_key(before), _by_key(after)
    worse = [(old.get(key), r) for key, r in new.items()
             if RANK[r["status"]] > RANK[old[key]["status"] if key in old else "ok"]]
    resolved = [r for key, r in old.items()
                if RANK[r["status"]] > 0 and RANK[new[key]["status"] if key in new else "ok"] == 0]
    return worse, resolved


def changes(before: dict, after: dict) -> list[dict]:
    """Results that got worse from `before` to `after`, plus counter increases judged as changes."""
    old, new = _by_key(before), _by_key(after)
    worse, _ = compare(before, after)
    out = []
    for prev, r in worse:
        out.append(dict(r, code="change." + r["code"],
                        message=r["message"] + (f" (was {prev['status']})" if prev else " (new)")))
    ecc = _ecc_increases(old.get(("gpu.ecc", "")), new.get(("gpu.ecc", "")))
    if ecc:  # the per-GPU counter rises say more than the status change of the aggregate record
        out = [r for r in out if r["code"] != "change.gpu.ecc"] + ecc
    return out + _carrier_increases(old, new)


def _ecc_increases(before: dict | None, after: dict | None) -> list[dict]:
    if not before or not after:
        return []
    out = []
    for gpu, counts in after["evidence"].items():
        prev = before["evidence"].get(gpu) or {}
        for counter in ("volatile_sbe", "volatile_dbe"):
            a, b = counts.get(counter), prev.get(counter)
            if a is not None and b is not None and a > b:
                dbe = counter.endswith("dbe")
                out.append(result("change.gpu.ecc", "fail" if dbe else "warn",
                                  f"{gpu}: {counter} rose from {b} to {a} during the job",
                                  "reset-gpu" if dbe else "none",
                                  {"counter": counter, "before": b, "after": a}, subject=gpu))
    return out


def _carrier_increases(old: dict, new: dict) -> list[dict]:
    out = []
    for (code, subject), r in new.items():
        if code != "nic.counters" or (code, subject) not in old:
            continue
        a = (r["evidence"].get("values") or {}).get("carrier_changes")
        b = (old[(code, subject)]["evidence"].get("values") or {}).get("carrier_changes")
        if a is not None and b is not None and a > b:
            out.append(result("change.nic.carrier", "warn",
                              f"{subject}: carrier changed {a - b} times during the job",
                              "inspect-hardware", {"before": b, "after": a}, subject=subject))
    return out
