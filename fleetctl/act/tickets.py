"""Service requests: the ladder's last rung, for a node fleetctl will not put back by itself (a
suspect, or a fault no remediation clears). A ticket is a JSON file in `state_dir/tickets/`, written
atomically and named by the action id, carrying the evidence bundle a vendor's support asks for:
the detection, the node's incident history with its mean time between incidents, and fleetctl's
recent decisions on the node. With `act.service_webhook` it is also POSTed there; the file is
written first, so a failed POST loses nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

from fleetctl.atomic import write_atomic

SCHEMA = "fleetctl.ticket/1"
MAX_DECISIONS = 50  # of the node's recent action records in one ticket


def ticket_body(action_id: str, detection: dict, history: dict, decisions: list[dict], now: float) -> dict:
    history = {**history, "incidents": history["incidents"][-MAX_DECISIONS:]}
    return {"schema": SCHEMA, "id": action_id, "time": round(now, 3), "node": history["node"],
            "detection": detection, "history": history, "decisions": decisions[-MAX_DECISIONS:]}


def file_ticket(state_dir: str, body: dict, webhook: str = "", timeout_s: float = 5.0) -> dict:
    """Write the ticket (and POST it when a webhook is set); returns where it went."""
    path = Path(state_dir) / "tickets" / f"{body['id']}.json"
    write_atomic(path, json.dumps(body, indent=2, sort_keys=True) + "\n", mode=0o640)
    out = {"ticket": str(path)}
    if webhook:
        from fleetctl.act.notify import post
        from fleetctl.errors import NotifyError

        try:
            out["posted"] = post(webhook, body, timeout_s)
        except NotifyError as exc:  # the ticket is filed; the record says the POST failed
            out["post_error"] = exc.message
    return out
