"""Every numeric option refuses nan, inf and out-of-range values with click's usage error (exit 3),
before any site file is read or any work is done."""

from __future__ import annotations

import pytest

from fleetctl.cli import run


@pytest.mark.parametrize("args", [
    ["exec", "n1", "--timeout", "nan", "--", "true"],
    ["exec", "n1", "--timeout", "inf", "--", "true"],
    ["exec", "n1", "--timeout", "1e308", "--", "true"],
    ["exec", "n1", "--connect-timeout", "nan", "--", "true"],
    ["exec", "n1", "--fanout", "0", "--", "true"],
    ["hook", "prolog", "--budget", "nan"],
    ["hook", "prolog", "--budget", "inf"],
    ["hook", "prolog", "--budget", "-1"],
    ["hook", "epilog", "--budget", "1e308"],
    ["audit", "n1", "--budget", "nan"],
    ["audit", "n1", "--budget", "-inf"],
    ["audit", "n1", "--mesh", "--rate", "nan"],
    ["audit", "n1", "--mesh", "--duration", "1e308"],
    ["lab", "fault", "add", "n1:gpu0", "--temp", "99999999999999999999"],
    ["lab", "fault", "add", "leaf1--spine1", "--loss", "nan"],
])
def test_numeric_options_refuse_nan_inf_and_out_of_range(args, capsys, tmp_path, monkeypatch):
    assert run(args) == 3
    err = capsys.readouterr().err
    assert "Invalid value" in err and "Traceback" not in err, err
