"""A node's result document is untrusted input: check it in this one place before anything uses it.

A node (or whatever answers in its place) may print anything: a result without a code, `results`
that is not a list, a count that is a list, a megabyte of message. The audit, the drain decision,
fleet consistency, the Prometheus file and the report all index into the document, so a malformed
one used to crash the controller (KeyError, TypeError) and stop the drain loop for every node.

    doc = parse_document(stdout, rc, stderr)   # stdout of the payload -> checked document
    doc = check_document(doc)                  # a document from anywhere (in-process run, a file)

Both raise DataError with a message that names the field; the caller marks that node `error` and
goes on with the others. The shape checked here is docs/checks.md ("Result document"); unknown keys
are allowed (forward compatibility) but every value fleetctl reads has its type and a size bound.
"""

from __future__ import annotations

import math
import re

from fleetctl.checks.builder import LEVELS, parse_payload_output
from fleetctl.checks.payload.common import ACTIONS, STATUSES, worst_status
from fleetctl.errors import DataError

SCHEMA = "fleetctl.checks/1"
CODE = re.compile(r"^[a-z][a-z0-9_.\-]{0,79}$")

MAX_OUTPUT_CHARS = 16 * 1024 * 1024  # the payload prints a few kB to a few hundred kB
MAX_RESULTS = 5000
MAX_MESSAGE = 4096
MAX_TEXT = 1024  # subject, versions, names
MAX_ITEMS = 4096  # entries of a facts table (NICs, ports, GPUs)


class _Bad(Exception):
    """Internal: where and what; turned into one DataError."""


def parse_document(stdout: str, rc: int | None = 0, stderr: str = "") -> dict:
    """The checked document a payload printed, or DataError saying what came back instead."""
    if len(stdout) > MAX_OUTPUT_CHARS:
        raise DataError(f"node payload printed {len(stdout)} characters (more than "
                        f"{MAX_OUTPUT_CHARS}): not a result document")
    try:
        doc = parse_payload_output(stdout, rc, stderr)
    except RecursionError:  # `[[[[...` nested deeper than json can follow
        raise DataError("node payload printed JSON nested too deeply: not a result document") from None
    return check_document(doc)


def check_document(doc) -> dict:
    """`doc` if it has the shape of a result document; DataError naming the first bad field."""
    try:
        _document(doc)
    except _Bad as exc:
        raise DataError(f"malformed result document: {exc}") from None
    except RecursionError:
        raise DataError("malformed result document: nested too deeply") from None
    return doc


def _document(doc) -> None:
    _expect(isinstance(doc, dict), "", "is not a JSON object", doc)
    _expect(doc.get("schema") == SCHEMA, "schema", f"is not {SCHEMA!r}", doc.get("schema"))
    _choice(doc, "status", STATUSES, "")
    _choice(doc, "action", ACTIONS, "")
    if "level" in doc:
        _choice(doc, "level", LEVELS, "")
    for key in ("complete", "simulated"):
        if key in doc:
            _expect(isinstance(doc[key], bool), key, "is not true/false", doc[key])
    results = doc.get("results")
    _expect(isinstance(results, list), "results", "is not a list", results)
    _expect(len(results) <= MAX_RESULTS, "results", f"has more than {MAX_RESULTS} entries", None)
    for i, r in enumerate(results):
        _result(r, f"results[{i}]")
    worst = worst_status(r["status"] for r in results if r["status"] != "skipped")
    _expect(doc["status"] == worst, "status",
            f"says {doc['status']!r} but its worst result is {worst!r}", None)
    _facts(doc.get("facts", {}))


def _result(r, where: str) -> None:
    _expect(isinstance(r, dict), where, "is not an object", r)
    code = r.get("code")
    _expect(isinstance(code, str) and CODE.match(code) is not None, f"{where}.code",
            "is missing or not a check code (lower-case letters, digits, '.', '_', '-')", code)
    _choice(r, "status", STATUSES, where)
    _choice(r, "action", ACTIONS, where)
    _text(r.get("message"), f"{where}.message", MAX_MESSAGE)
    _text(r.get("subject", ""), f"{where}.subject", MAX_TEXT)
    if "simulated" in r:
        _expect(isinstance(r["simulated"], bool), f"{where}.simulated", "is not true/false", None)
    if "evidence" in r:
        _expect(isinstance(r["evidence"], dict), f"{where}.evidence", "is not an object", None)


# What fleet consistency and the report read from `facts` (docs/checks.md): key -> type check.
def _num(v) -> bool:
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v))


def _int(v) -> bool:
    return v is None or (isinstance(v, int) and not isinstance(v, bool))


def _str(v) -> bool:
    return v is None or (isinstance(v, str) and len(v) <= MAX_TEXT)


def _strs(v) -> bool:
    return v is None or (isinstance(v, list) and len(v) <= MAX_ITEMS and all(_str(s) and s is not None
                                                                           for s in v))


_GPU = {"count": _int, "models": _strs, "driver_version": _str, "cuda_version": _str,
        "vbios_versions": _strs, "source": _str}
_HOST = {"cpus": _int, "memory_gb": _num, "kernel": _str, "nvidia_kernel_module": _str}
_NIC = {"firmware": _str, "mtu": _int, "rate_gbps": _num}
_PORT = {"rate_gbps": _num, "link_layer": _str}
_PCIE = {"width": _int, "max_width": _int, "speed_gts": _num, "max_speed_gts": _num}
_DEEP = {"nccl_busbw_gbs": _num}


def _facts(facts) -> None:
    _expect(isinstance(facts, dict), "facts", "is not an object", facts)
    _table(facts.get("gpu"), _GPU, "facts.gpu")
    _table(facts.get("host"), _HOST, "facts.host")
    nics = facts.get("nics")
    for name, nic in _mapping(nics, "facts.nics"):
        where = f"facts.nics.{name}"
        _table(nic, _NIC, where)
        for port, p in _mapping(nic.get("ports"), f"{where}.ports"):
            _table(p, _PORT, f"{where}.ports.{port}")
        _table(nic.get("pcie"), _PCIE, f"{where}.pcie")
    deep = facts.get("deep")
    _table(deep, _DEEP, "facts.deep")
    for nic, gbps in _mapping((deep or {}).get("ib_write_bw_gbps"), "facts.deep.ib_write_bw_gbps"):
        _expect(_num(gbps), f"facts.deep.ib_write_bw_gbps.{nic}", "is not a number", gbps)


def _table(value, spec: dict, where: str) -> None:
    if value is None:
        return
    _expect(isinstance(value, dict), where, "is not an object", value)
    for key, ok in spec.items():
        if key in value:
            _expect(ok(value[key]), f"{where}.{key}", "has the wrong type or size", value[key])


def _mapping(value, where: str):
    if value is None:
        return []
    _expect(isinstance(value, dict), where, "is not an object", value)
    _expect(len(value) <= MAX_ITEMS, where, f"has more than {MAX_ITEMS} entries", None)
    for key in value:
        _expect(len(str(key)) <= MAX_TEXT, where, f"has a key longer than {MAX_TEXT} characters", None)
    return list(value.items())


def _choice(obj: dict, key: str, allowed: tuple, where: str) -> None:
    name = f"{where}.{key}" if where else key
    _expect(obj.get(key) in allowed if isinstance(obj.get(key), str) else False, name,
            f"is not one of {', '.join(allowed)}", obj.get(key))


def _text(value, where: str, limit: int) -> None:
    _expect(isinstance(value, str), where, "is not a string", value)
    _expect(len(value) <= limit, where, f"is longer than {limit} characters", None)


def _expect(ok: bool, where: str, what: str, value) -> None:
    if not ok:
        shown = "" if value is None else f" (got {_show(value)})"
        raise _Bad(f"{where or 'the document'} {what}{shown}")


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
