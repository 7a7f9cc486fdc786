"""Coordinated, verified snapshots of (multi-node) PyTorch training jobs, restored after a failure.

    from fleetctl.snapshot import Snapshotter
    snap = Snapshotter(model, optimizer, extra_state={"data": loader_state}, directory=DIR, keep=3)
    start = snap.restore()                      # None on a fresh start, else the restored iteration
    for it in range((start or -1) + 1, steps):
        train_one(it)
        snap.step(it)                           # snapshots when asked (CLI, drain) or when due
    snap.close()

The on-disk format (layout, manifest, verification, LATEST, retention) is pure Python and needs no
torch: the CLI uses it to list, verify and prune. Only `Snapshotter` imports torch, on first use.
Nothing here imports click or rich. Design and limits: docs/snapshot.md.
"""

from __future__ import annotations

from fleetctl.errors import SnapshotError


def __getattr__(name: str):
    # torch is imported only by a training process that asks for the Snapshotter.
    if name == "Snapshotter":
        from fleetctl.snapshot.snapshotter import Snapshotter

        return Snapshotter
    raise AttributeError(name)


__all__ = ["SnapshotError", "Snapshotter"]
