"""Host-memory copies of a training state, for replicas (resilient.py): a copy that later steps
cannot change. CPU tensors are cloned; GPU tensors are copied into pinned (page-locked) buffers,
kept and reused from one replica to the next.

Why pinned and reused: on an H200 (2026-12-04, benchmarks/device/nccl_abort_probe.py) copying
2 GB from the GPU into pageable memory ran at 1.2 GB/s (the loop blocked 2 s per replica of a 3 GB
model and Adam state), into pinned buffers at 54-55 GB/s; but allocating those 2 GB of pinned
memory took 1.35 s, so a replica's buffers go back to the pool once its copy is dropped
(`give_back`) and the next replica reuses them. Where pinned memory cannot be had (no CUDA, the
pinned limit reached), GPU tensors are copied into pageable memory as before.
"""

from __future__ import annotations

import copy
from typing import Any

import torch


class HostCopier:
    def __init__(self, pinned: bool = True) -> None:
        self._free: dict[tuple, list[torch.Tensor]] = {}  # (shape, dtype) -> pinned buffers
        self.pinned = pinned  # False (or once pinned memory was refused): pageable copies

    def copy(self, value: Any) -> Any:
        """A host copy of `value` (tensors, dicts, lists, tuples, plain values, else deep-copied);
        GPU tensors' copies are complete when this returns."""
        devices: set[torch.device] = set()
        out = self._copy(value, devices)
        for device in devices:  # the copies were queued on each device's current stream
            torch.cuda.current_stream(device).synchronize()
        return out

    def give_back(self, value: Any) -> None:
        """`value` (a copy from `copy`) is no longer used: its pinned buffers serve the next copy."""
        if isinstance(value, torch.Tensor):
            if value.device.type == "cpu" and value.is_pinned():
                self._free.setdefault((tuple(value.shape), value.dtype), []).append(value)
        elif isinstance(value, dict):
            for v in value.values():
                self.give_back(v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                self.give_back(v)

    def _copy(self, value: Any, devices: set) -> Any:
        if isinstance(value, torch.Tensor):
            t = value.detach()
            if t.device.type == "cpu":
                return t.clone()
            buf = self._buffer(t) if t.device.type == "cuda" else None
            if buf is None:
                return t.to("cpu", copy=True)
            buf.copy_(t, non_blocking=True)  # after the step's kernels on the same stream
            devices.add(t.device)
            return buf
        if isinstance(value, dict):
            return {k: self._copy(v, devices) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self._copy(v, devices) for v in value)
        if isinstance(value, (int, float, str, bool, bytes, type(None))):
            return value
        return copy.deepcopy(value)

    def _buffer(self, t: torch.Tensor) -> torch.Tensor | None:
        free = self._free.get((tuple(t.shape), t.dtype))
        if free:
            return free.pop()
        if not self.pinned:
            return None
        try:
            return torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
        except RuntimeError:  # no CUDA host allocator, or the pinned limit: pageable from now on
            self.pinned = False
            return None
