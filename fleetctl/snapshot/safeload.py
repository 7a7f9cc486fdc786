"""Reading a DCP checkpoint without running its writer's code.

torch.distributed.checkpoint keeps its index (`.metadata`) as a pickle, and `FileSystemReader`
unpickles it with `pickle.load`: whoever can plant that file runs code in every rank that restores.
`SafeReader` reads it with an unpickler that knows only the classes DCP's own metadata is made of
(dataclasses of `torch.distributed.checkpoint.metadata`, `_StorageInfo`, `torch.Size`, dtypes,
layouts, `pathlib` paths); anything else is an UnpicklingError, reported as a snapshot that failed to
load. The ownership rule (catalog.trust_problem) comes first; this is the second wall.
"""

from __future__ import annotations

import dataclasses
import enum
import pickle

import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint import metadata as dcp_metadata

_ALLOWED = {
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),
    ("pathlib", "PosixPath"),
    ("pathlib", "PurePosixPath"),
    ("collections", "OrderedDict"),
}


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) in _ALLOWED:
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), (torch.dtype, torch.layout,
                                                                         torch.memory_format)):
            return getattr(torch, name)
        if module == dcp_metadata.__name__:
            obj = getattr(dcp_metadata, name, None)
            if isinstance(obj, type) and (dataclasses.is_dataclass(obj) or issubclass(obj, enum.Enum)):
                return obj
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a checkpoint index: refused")


def load_metadata(stream) -> dcp_metadata.Metadata:
    meta = _MetadataUnpickler(stream).load()
    if not isinstance(meta, dcp_metadata.Metadata):
        raise pickle.UnpicklingError(f"the checkpoint index holds a {type(meta).__name__}, not Metadata")
    return meta


class SafeReader(FileSystemReader):
    """FileSystemReader whose read_metadata unpickles only checkpoint-index classes."""

    def read_metadata(self, *args, **kwargs):
        if hasattr(self, "_get_metadata_path"):  # torch >= 2.7 (per-rank metadata files)
            path = self._get_metadata_path(kwargs.get("rank"))
        else:
            path = self.fs.concat_path(self.path, ".metadata")
        with self.fs.create_stream(path, "rb") as stream:
            meta = load_metadata(stream)
        if getattr(meta, "storage_meta", None) is None:
            meta.storage_meta = dcp_metadata.StorageMeta()
        meta.storage_meta.load_id = self.load_id
        return meta
