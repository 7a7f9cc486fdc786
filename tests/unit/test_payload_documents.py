"""Reading back the one JSON document a payload printed, also when srun's `--label` mode has cut its
long line into pieces (seen in the lab: a check document of a few KiB arrived as several lines)."""

from __future__ import annotations

import json

import pytest

from fleetctl.checks.builder import parse_payload_output
from fleetctl.errors import DataError
from fleetctl.fanout.payload import json_output, last_json_document
from fleetctl.fanout.result import ERROR, OK, HostResult

DOC = {"schema": "x/1", "results": [{"message": "a" * 50, "evidence": {"k": [1, 2.5, None]}}] * 40}


def pieces(text: str, size: int) -> str:
    return "\n".join(text[i:i + size] for i in range(0, len(text), size)) + "\n"


@pytest.mark.parametrize("size", [7, 100, 1024, 10**6])
def test_a_document_cut_into_lines_is_joined_again(size):
    text = "a warning a tool printed\n" + pieces(json.dumps(DOC), size)
    assert last_json_document(text) == DOC
    assert parse_payload_output(text) == DOC
    r = HostResult("n1", OK, 0, text)
    assert json_output(r) == DOC


def test_no_document_is_an_error_not_a_guess():
    for text in ("", "plain text\n", '{"a": 1\n', pieces(json.dumps(DOC), 50)[:-30]):
        with pytest.raises(ValueError):
            last_json_document(text)
    r = HostResult("n1", OK, 0, "not json at all\n")
    assert json_output(r) is None and r.status == ERROR and "not JSON" in r.error
    with pytest.raises(DataError, match="did not print a result document"):
        parse_payload_output("oops\n")


def test_a_document_nested_past_the_stack_is_that_node_s_error_not_a_recursion_error():
    """A node printing 100k '[' (or a '{' line followed by them) must not end a fan-out."""
    for text in ("[" * 100_000 + "\n", '{"a":\n' + "[" * 100_000 + "\n"):
        with pytest.raises(ValueError):
            last_json_document(text)
        r = HostResult("n1", OK, 0, text)
        assert json_output(r) is None and r.status == ERROR and "not JSON" in r.error


@pytest.mark.parametrize("error, expected", [
    ({"a": [1, 2]}, "node payload failed: {'a': [1, 2]}"),
    (None, "node payload failed: no message"),
    ("", "node payload failed: no message"),
    (12, "node payload failed: 12"),
    ("line one\nline two\x1b[31m", "node payload failed: line one line two [31m"),
])
def test_a_nodes_own_error_is_stringified_and_one_line(error, expected):
    """A node's {"error": X} was taken verbatim: an object made the human render raise TypeError
    (after the drains), null and "" gave an error with no message."""
    from fleetctl.checks.builder import parse_payload_output

    with pytest.raises(DataError) as info:
        parse_payload_output(json.dumps({"error": error}))
    assert info.value.message == expected


@pytest.mark.parametrize("size", [50_000, 200_000, 16 << 20])
def test_a_nodes_huge_error_is_bounded(size):
    """50,000 characters made the human render take 15 s (200,000: 234 s); 16 MiB was accepted."""
    from fleetctl.checks.builder import MAX_ERROR_TEXT, parse_payload_output

    with pytest.raises(DataError) as info:
        parse_payload_output(json.dumps({"error": "x" * size}))
    assert len(info.value.message) <= MAX_ERROR_TEXT + 40
