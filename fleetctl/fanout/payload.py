"""Python payloads: ship a self-contained, stdlib-only script to every node and run it there.

The script travels on stdin to `python3 - ARGS...`, so nothing is installed on the nodes and nothing
is pasted into a shell line (the arguments are argv words, quoted wherever a shell sits in between).
Inside the script, `sys.argv[1:]` holds the arguments and the environment variable FLEETCTL_NODE names
the node it runs for (every transport sets it). Audit and probe code build on this:

    results = run_python(transport, nodes, Path("collect.py"), ["--level", "quick"], timeout=30)
    for r in results:
        data = json_output(r)  # the parsed JSON the script printed, or None (r.status/r.error say why)

The one way to make such a script from fleetctl's own modules (the node checks, the probe agent,
the path tracer): `bundle()` joins modules of a package, then `with_node_fill()` (a per-node
argument) or `with_config()` (a configuration embedded in the text, never in argv) adapt it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from importlib import resources
from pathlib import Path

from fleetctl.errors import UsageError
from fleetctl.fanout.base import OnResult, Transport
from fleetctl.fanout.result import ERROR, OK, HostResult


LOCAL_MARK = "# payload-local"  # a line only the in-process copy needs (its fleetctl imports)
FUTURE = "from __future__ import annotations"
CONFIG_MARKER = "_EMBEDDED_CONFIG = None"

# Put after the `from __future__` line: fill `{node}` in the first argument from FLEETCTL_NODE, so one
# argument serves every node of a fan-out call.
NODE_FILL = (
    "import os as _os, sys as _sys, json as _json\n"
    "_n = _os.environ.get('FLEETCTL_NODE') or _os.uname().nodename.split('.')[0]\n"
    "if len(_sys.argv) > 1:\n"
    "    _sys.argv[1] = _sys.argv[1].replace('{node}', _json.dumps(_n)[1:-1])\n"
)


def bundle(package: str, parts: Sequence[str], title: str) -> str:
    """One self-contained, standard-library-only script: the modules `parts` of `package`, in order
    (each may use only names of those before it), lines marked `# payload-local` left out."""
    pkg = resources.files(package)
    out = [f"# fleetctl {title}: " + " + ".join(f"{p}.py" for p in parts) + ", generated, do not edit.\n"
           + FUTURE + "\n"]
    for name in parts:
        kept = [line for line in pkg.joinpath(f"{name}.py").read_text().splitlines()
                if LOCAL_MARK not in line and line.strip() != FUTURE]
        out.append(f"\n# ---- {name}.py\n" + "\n".join(kept) + "\n")
    source = "".join(out)
    if "import fleetctl" in source or "from fleetctl" in source:
        raise AssertionError(f"{package}: a payload module imports fleetctl on a line without {LOCAL_MARK}")
    return source


def with_node_fill(source: str) -> str:
    """The script with NODE_FILL run first (after its `from __future__` line)."""
    head, found, tail = source.partition(FUTURE + "\n")
    return head + found + NODE_FILL + tail if found else NODE_FILL + source


def with_config(source: str, config: dict) -> str:
    """The script with `config` embedded as JSON in place of its `_EMBEDDED_CONFIG = None` line
    (secrets such as a run's key travel in the text on stdin, never in argv)."""
    if CONFIG_MARKER not in source:
        raise AssertionError(f"payload has no {CONFIG_MARKER!r} line")
    return source.replace(CONFIG_MARKER, f"_EMBEDDED_CONFIG = {json.dumps(json.dumps(config))}", 1)


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


def _loads(text: str) -> object:
    """json.loads, with a document nested past the interpreter's stack a ValueError like any other
    bad output (a node can print one: it must not end the whole fan-out with a RecursionError)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply", text[:80], 0) from None


def last_json_document(text: str) -> object:
    """The JSON document a payload printed last. Payloads print compact JSON on one line, but srun's
    `--label` mode cuts long output lines into labelled pieces, which the srun transport returns as
    separate lines: when the last line is no document, the lines from the first one that opens an
    object are joined again (compact JSON holds no raw newline, so joining restores it exactly).
    At most two parses, whatever the output. ValueError when there is no document."""
    lines = text.strip().splitlines()
    if not lines:
        raise json.JSONDecodeError("empty output", text, 0)
    try:
        return _loads(lines[-1])
    except ValueError as exc:
        first_error = exc
    start = next((i for i, line in enumerate(lines[:-1]) if line.startswith("{")), None)
    if start is None:
        raise first_error
    try:
        return _loads("".join(lines[start:]))
    except ValueError:
        raise first_error from None


def json_output(result: HostResult) -> object | None:
    """The JSON document a payload printed on stdout, or None when the host did not run it to
    completion. A host that exited 0 but printed something else is turned into an `error` result in
    place, so callers see one clear message instead of a JSON traceback."""
    if result.status != OK:
        return None
    try:
        return last_json_document(result.stdout)
    except ValueError as exc:
        first = result.stdout.strip().splitlines()[:1]
        result.status = ERROR
        result.error = f"payload output is not JSON ({exc.msg}): {first[0][:120] if first else 'empty'}"
        return None
