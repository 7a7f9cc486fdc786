"""The file kit: bounded reads of untrusted files and JSON (fleetctl/filekit)."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetctl.errors import DataError
from fleetctl.filekit import MAX_JSON_DEPTH, clean_text, loads_json, read_bytes, read_json, read_text


class Mine(DataError):
    kind = "mine"


def test_deep_json_is_the_callers_error_never_recursion():
    for text in ("[" * 60_000, "[" * 60_000 + "]" * 60_000, '{"a":' * 5000 + "1" + "}" * 5000):
        with pytest.raises(Mine, match="nested deeper"):
            loads_json(text, "entry", error=Mine)


def test_depth_bound_is_exact():
    assert loads_json("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH, "x") == \
        eval("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH)
    with pytest.raises(DataError):
        loads_json("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1), "x")


def test_bad_json_and_kind():
    for bad in (b"\xff\xfe", "{", "nan-ish", ""):
        with pytest.raises(DataError, match="not valid JSON"):
            loads_json(bad, "x")
    with pytest.raises(DataError, match="not a JSON object"):
        loads_json("[1]", "x", kind=dict)


def test_files_that_are_not_regular_are_refused(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(DataError, match="not a regular file"):
        read_bytes(fifo, "state", max_bytes=10)  # returns at once: never blocks on the FIFO
    target = tmp_path / "target"
    target.write_text("{}")
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(DataError, match="symbolic link"):
        read_json(link, "state", max_bytes=10)
    with pytest.raises(DataError, match="not a regular file"):
        read_bytes(tmp_path, "state", max_bytes=10)


def test_size_bound_and_missing(tmp_path):
    big = tmp_path / "big"
    big.write_bytes(b"x" * 101)
    with pytest.raises(DataError, match="larger than 100 bytes"):
        read_bytes(big, "state", max_bytes=100)
    assert read_bytes(big, "state", max_bytes=101) == b"x" * 101
    assert read_text(tmp_path / "none", "state", max_bytes=1, missing_ok=True) is None
    with pytest.raises(DataError, match="no such state"):
        read_text(tmp_path / "none", "state", max_bytes=1)
    (tmp_path / "bin").write_bytes(b"\xff")
    with pytest.raises(DataError, match="not UTF-8"):
        read_text(tmp_path / "bin", "state", max_bytes=10)


def test_owner_check(tmp_path):
    path = tmp_path / "f"
    path.write_text("{}")
    assert read_json(path, "f", max_bytes=10, owners=(os.getuid(),)) == {}
    with pytest.raises(DataError, match="belongs to uid"):
        read_json(path, "f", max_bytes=10, owners=(os.getuid() + 12345,))


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=2000))
def test_clean_text_is_one_printable_bounded_line(text):
    out = clean_text(text, 100)
    assert out.isprintable() and "\n" not in out
    assert len(out) <= 101


@settings(max_examples=300, deadline=None)
@given(st.recursive(st.none() | st.integers() | st.text(max_size=5),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=3), c, max_size=3),
                    max_leaves=200))
def test_any_json_loads_or_is_refused_for_depth(obj):
    import json

    text = json.dumps(obj)
    try:
        assert loads_json(text, "x") == obj
    except DataError as exc:
        assert "nested deeper" in exc.message
