"""The file kit: how fleetctl reads a file somebody else may have written (bounded, never through a
link, never a FIFO, JSON nesting bounded) and how it appends JSON lines. Ground layer: it needs only
`fleetctl.errors`. Every reader takes the error class to raise, so a domain keeps its own error kind
(SnapshotError, DataError, ...) while the rules stay in one place.

    data = read_bytes(path, "action log", max_bytes=64 << 20)          # None when missing_ok
    doc = read_json(path, "registry entry", max_bytes=64 << 10, kind=dict, error=SnapshotError)
    obj = loads_json(line, "event record")                             # nesting <= MAX_JSON_DEPTH
"""

from fleetctl.filekit.jsonl import append_line, read_lines, read_lines_from, write_whole
from fleetctl.filekit.read import (MAX_JSON_DEPTH, clean_text, json_too_deep, loads_json, open_regular,
                                   read_bytes, read_json, read_text)

__all__ = ["MAX_JSON_DEPTH", "append_line", "read_lines", "read_lines_from", "write_whole", "clean_text", "json_too_deep", "loads_json", "open_regular", "read_bytes",
           "read_json", "read_text"]
