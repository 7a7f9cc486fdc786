"""What each rank saves beside the model and optimizer: RNG states, the iteration, the data position.

Stored with torch.save and read back with `weights_only=True`, so only tensors and plain Python values
go in (no pickled classes): the numpy RNG state is turned into lists for that reason.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Any

import torch

from fleetctl.errors import SnapshotError


def capture_rng() -> dict:
    out: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    try:
        import numpy as np

        name, keys, pos, has_gauss, cached = np.random.get_state()
        out["numpy"] = [name, keys.tolist(), int(pos), int(has_gauss), float(cached)]
    except ImportError:
        pass
    if torch.cuda.is_available():
        out["cuda"] = torch.cuda.get_rng_state_all()
    return out


def restore_rng(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    if "numpy" in state:
        import numpy as np

        name, keys, pos, has_gauss, cached = state["numpy"]
        np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class ExtraState:
    """The user's extra per-rank state (data-loader position, counters), in one of three shapes:

        extra_state=(get, set)                         # get() -> value, set(value)
        extra_state={"loader": sampler}                # objects with state_dict()/load_state_dict()
        extra_state={"pos": (get, set), "sampler": s}  # or a mix
    """

    def __init__(self, spec: Any):
        self.items: dict[str, tuple[Callable[[], Any], Callable[[Any], None]]] = {}
        if spec is None:
            return
        if isinstance(spec, tuple):
            spec = {"extra": spec}
        if not isinstance(spec, Mapping):
            raise SnapshotError("extra_state must be a (get, set) pair or a mapping of them / of objects "
                                "with state_dict() and load_state_dict()")
        for name, item in spec.items():
            if isinstance(item, tuple) and len(item) == 2 and all(callable(f) for f in item):
                self.items[str(name)] = item
            elif hasattr(item, "state_dict") and hasattr(item, "load_state_dict"):
                self.items[str(name)] = (item.state_dict, item.load_state_dict)
            else:
                raise SnapshotError(f"extra_state[{name!r}] is neither a (get, set) pair nor an object "
                                    "with state_dict() and load_state_dict()")

    def capture(self) -> dict:
        return {name: get() for name, (get, _) in self.items.items()}

    def restore(self, saved: dict) -> None:
        missing = sorted(set(self.items) - set(saved))
        if missing:
            raise SnapshotError(f"the snapshot has no extra state {', '.join(missing)}")
        for name, (_, put) in self.items.items():
            put(saved[name])
