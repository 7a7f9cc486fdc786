"""The notify action: one JSON POST to the policy's webhook, bounded in time; no retry here (the
action log keeps the failure, and lens's durable outbox is the place for guaranteed delivery)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from fleetctl.errors import NotifyError

MAX_BODY_BYTES = 256 << 10


def post(url: str, body: dict, timeout_s: float = 5.0) -> dict:
    data = json.dumps(body, default=str).encode()[:MAX_BODY_BYTES]
    req = urllib.request.Request(url, data=data, method="POST",
                                 headers={"Content-Type": "application/json", "User-Agent": "fleetctl-act"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310 (site-configured URL)
            return {"status": resp.status}
    except urllib.error.HTTPError as exc:
        raise NotifyError(f"webhook answered HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise NotifyError(f"webhook not reached: {getattr(exc, 'reason', exc)}") from None
