"""The one registry shape (fleetctl.registry): unknown names list the choices, a backend whose
import fails is still known and its error shows only when it is chosen."""

from __future__ import annotations

import sys

import pytest

from fleetctl.errors import ConfigError, UsageError
from fleetctl.registry import Registry


def test_decorator_and_lazy_path_register_and_resolve():
    reg = Registry("widget")

    @reg.register("round", help="a round one")
    class Round:
        pass

    reg.register("path", "pathlib:PurePosixPath")
    assert reg.names() == ["path", "round"]
    assert reg.get("round") is Round
    assert reg.get("path").__name__ == "PurePosixPath"
    assert reg.meta("round") == {"help": "a round one"}
    assert "round" in reg and "square" not in reg


def test_unknown_name_lists_the_choices():
    reg = Registry("widget")
    reg.register("b", "pathlib:Path")
    reg.register("a", "pathlib:Path")
    with pytest.raises(UsageError, match=r"unknown widget 'c'; choose one of a, b\Z"):
        reg.get("c")


def test_error_class_and_key_are_the_registry_s():
    reg = Registry("Slurm backend", error=ConfigError, key="slurm.backend")
    with pytest.raises(ConfigError, match="slurm.backend: unknown Slurm backend 'x'") as info:
        reg.get("x")
    assert info.value.key == "slurm.backend"


def test_failing_import_shows_only_when_chosen(monkeypatch):
    reg = Registry("transport")
    reg.register("good", "pathlib:Path")
    reg.register("broken", "fleetctl_no_such_module_xyz:Thing", install_hint="pip install thing")
    assert reg.names() == ["broken", "good"]  # still registered
    assert reg.get("good").__name__ == "Path"  # choosing another backend never sees the failure
    with pytest.raises(UsageError, match="transport 'broken' is not available: No module named "
                                         "'fleetctl_no_such_module_xyz'") as info:
        reg.get("broken")
    assert info.value.hint == "pip install thing"
    with pytest.raises(UsageError, match="not available"):  # and again: the failure is remembered
        reg.get("broken")


def test_registered_with_an_error_shows_it_only_when_chosen():
    reg = Registry("solver")

    @reg.register("fast", error=ImportError("No module named 'scipy'"))
    class Fast:
        pass

    @reg.register("plain")
    class Plain:
        pass

    assert reg.get("plain") is Plain
    with pytest.raises(UsageError, match="solver 'fast' is not available: No module named 'scipy'"):
        reg.get("fast")


def test_decorator_modules_load_on_first_lookup(tmp_path, monkeypatch):
    (tmp_path / "h9reg_good.py").write_text(
        "from h9reg_host import reg\n@reg.register('g')\nclass G: pass\n")
    (tmp_path / "h9reg_bad.py").write_text("import fleetctl_no_such_dependency_xyz\n")
    (tmp_path / "h9reg_host.py").write_text(
        "from fleetctl.registry import Registry\nreg = Registry('solver', modules=('h9reg_good', 'h9reg_bad'))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import h9reg_host

    try:
        assert "h9reg_good" not in sys.modules  # nothing imported until asked
        assert h9reg_host.reg.names() == ["g"]
        assert h9reg_host.reg.get("g").__name__ == "G"
        with pytest.raises(UsageError, match=r"unknown solver 'x'; choose one of g; not loaded: "
                                             r"h9reg_bad \(No module named 'fleetctl_no_such_dependency_xyz'\)"):
            h9reg_host.reg.get("x")
    finally:
        for name in ("h9reg_good", "h9reg_bad", "h9reg_host"):
            sys.modules.pop(name, None)


def test_duplicate_and_malformed_registrations_are_refused():
    reg = Registry("widget")
    reg.register("a", "pathlib:Path")
    with pytest.raises(ValueError, match="already registered"):
        reg.register("a", "pathlib:PurePath")
    with pytest.raises(ValueError, match="not 'module:attribute'"):
        reg.register("b", "pathlib.Path")


def test_the_four_axes_use_it():
    from fleetctl.analysis.solvers import solvers
    from fleetctl.cli import commands
    from fleetctl.fanout.registry import transports
    from fleetctl.slurm import backends

    for reg in (solvers, commands, transports, backends):
        assert isinstance(reg, Registry)
    assert {"ssh", "srun", "local"} <= set(transports.names())
    assert "cli" in backends.names()
    assert {"nnls", "l1", "vote", "netbouncer", "flock"} <= set(solvers.names())
    assert {"audit", "config", "exec", "hook", "inventory", "lab"} <= set(commands.names())
