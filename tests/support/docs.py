"""The fleetctl command lines in the documentation's code blocks (README.md, docs/*.md,
prolog_epilog/README.md), for the tests that parse them (tests/cli/test_docs_commands.py) and run
them on the lab (tests/integration/test_docs_run.py)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", ROOT / "prolog_epilog" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```[\w-]*\n(.*?)^```", re.M | re.S)


def command_lines():
    for doc in DOCS:
        for block in FENCE.findall(doc.read_text()):
            text = block.replace("\\\n", " ")
            prompted = any(ln.lstrip().startswith("$ ") for ln in text.splitlines())
            for line in text.splitlines():
                if prompted and not line.lstrip().startswith("$ "):  # a console block: the rest is output
                    continue
                line = line.strip().removeprefix("$ ").removeprefix("# ").strip()
                inner = re.search(r"\$\((fleetctl[^)]*)\)", line)
                if inner:
                    line = inner.group(1)
                if re.match(r"^(sudo\s+)?([A-Z_]+=\S+\s+)*fleetctl\s", line):
                    yield doc.relative_to(ROOT).as_posix(), line


LINES = sorted(set(command_lines()))


def words_of(line: str) -> list[str]:
    try:
        words = shlex.split(line, comments=True)
    except ValueError:  # an unbalanced quote in prose-like lines: the first words are enough
        words = line.split("#")[0].split()
    for stop in ("|", ">", ">>", "2>>", "&&", ";", "&"):
        if stop in words:
            words = words[:words.index(stop)]
    words = [w for w in words if w != "sudo" and not re.match(r"^[A-Z_]+=", w)]
    words = [w for w in words if not re.match(r"^[0-9]?>{1,2}", w)]  # redirections written together
    return words[1:words.index("--")] if "--" in words else words[1:]
