"""Python payloads: ship a self-contained, stdlib-only script to every node and run it there.

The script travels on stdin to `python3 - ARGS...`, so nothing is installed on the nodes and nothing
is pasted into a shell line (the arguments are argv words, quoted wherever a shell sits in between).
Inside the script, `sys.argv[1:]` holds the arguments and the environment variable FLEETCTL_NODE names
the node it runs for (every transport sets it). Audit and probe code build on this:

    results = run_python(transport, nodes, Path("collect.py"), ["--level", "quick"], timeout=30)
    for r in results:
        data = json_output(r)  # the parsed JSON the script printed, or None (r.status/r.error say why)
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from fleetctl.errors import UsageError
from fleetctl.fanout.base import OnResult, Transport
from fleetctl.fanout.result import ERROR, OK, HostResult


def run_python(transport: Transport, nodes: Iterable[str], script: str | Path,
               args: Sequence[str] = (), *, timeout: float | None = None,
               on_result: OnResult | None = None, python: str = "python3") -> list[HostResult]:
    """Run `script` (its text, or a Path to read) with `python3 - *args` on every node."""
    if isinstance(script, Path):
        try:
            script = script.read_text()
        except OSError as exc:
            raise UsageError(f"cannot read payload {script}: {exc.strerror or exc}") from None
    if not script.strip():
        raise UsageError("empty Python payload")
    argv = [python, "-", *(str(a) for a in args)]
    return transport.run(nodes, argv, timeout=timeout, stdin=script.encode(), on_result=on_result)


def json_output(result: HostResult) -> object | None:
    """The JSON document a payload printed on stdout, or None when the host did not run it to
    completion. A host that exited 0 but printed something else is turned into an `error` result in
    place, so callers see one clear message instead of a JSON traceback."""
    if result.status != OK:
        return None
    try:
        return json.loads(result.stdout)
    except ValueError as exc:
        first = result.stdout.strip().splitlines()[:1]
        result.status = ERROR
        result.error = f"payload output is not JSON ({exc.msg}): {first[0][:120] if first else 'empty'}"
        return None
