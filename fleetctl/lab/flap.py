"""The flapping cable: `python -m fleetctl.lab.flap LINK PERIOD LABDIR` toggles LINK down and up every
PERIOD/2 seconds, rerouting at each change, until SIGTERM (then it leaves the cable up and routed) or
until the lab is gone. LABDIR is on the command line so that `down` finds it even without state.

Started by `fleetctl lab fault add LINK --flap PERIOD`; its pid is in the lab state.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from fleetctl.errors import LabError
from fleetctl.lab.topology import LabParams, build_layout


def main(argv: list[str]) -> int:
    link_id, period = argv[0], float(argv[1])
    os.environ["FLEETCTL_LAB_DIR"] = argv[2]
    from fleetctl.lab import fabric, faults, state

    st = state.load()
    layout = build_layout(LabParams(**st["params"]))
    stopping = False

    def on_term(_signum, _frame):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    down = False
    next_change = time.monotonic()
    while not stopping:
        now = time.monotonic()
        if now >= next_change:
            down = not down
            current = state.load() or st
            static_down = faults.down_links(current)
            if down:
                fabric.set_link(layout, link_id, False)
                fabric.apply_routes(layout, static_down | {link_id})
                print(f"{time.time():.3f} {link_id} down", flush=True)
            else:
                faults.restore_link(current, layout, link_id)
                print(f"{time.time():.3f} {link_id} up", flush=True)
            next_change += period / 2
        time.sleep(min(0.02, max(0.0, next_change - time.monotonic())))
    if down:
        faults.restore_link(state.load() or st, layout, link_id)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except LabError as exc:  # the lab went away under us
        print(f"flap: {exc.message}", file=sys.stderr)
        sys.exit(1)
