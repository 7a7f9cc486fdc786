"""Shell completion (README): click's completion protocol through fleetctl's lazy command table."""

from __future__ import annotations

import os
import subprocess
import sys


def complete(words: str) -> list[str]:
    env = dict(os.environ, COMP_WORDS=words, COMP_CWORD=str(len(words.split()) - 1),
               _FLEETCTL_COMPLETE="bash_complete")
    out = subprocess.run([sys.executable, "-m", "fleetctl"], env=env, capture_output=True, text=True,
                         timeout=60).stdout
    return [line.split(",", 1)[1] for line in out.splitlines() if "," in line]


def test_commands_and_options_complete():
    assert complete("fleetctl au") == ["audit"]
    assert "--level" in complete("fleetctl audit --le")
    assert "events" in complete("fleetctl lens ev")
