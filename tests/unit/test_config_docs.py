"""The committed configuration reference is exactly what docgen makes from the schema."""

from __future__ import annotations

from pathlib import Path

from fleetctl.config.docgen import render
from fleetctl.config.schema import load_schema
from fleetctl import errors

ROOT = Path(__file__).resolve().parents[2]


def test_committed_reference_matches_the_schema():
    committed = (ROOT / "docs" / "configuration.md").read_text()
    assert committed == render(), "regenerate: python -m fleetctl.config.docgen > docs/configuration.md"


def test_every_schema_key_is_documented():
    text = render()
    _, specs = load_schema()
    for spec in specs:
        assert f"`{spec.path}`" in text or f"[{spec.path}]" in text or f"[{spec.name}]" in text, spec.path


def test_exit_codes_doc_lists_every_code_and_kind():
    text = (ROOT / "docs" / "exit-codes.md").read_text()
    for name in ("EXIT_OK", "EXIT_WARNINGS", "EXIT_FAILURES", "EXIT_ERROR", "EXIT_INTERRUPTED"):
        assert f"| {getattr(errors, name)} | `{name}` |" in text
    for cls in (errors.FleetctlError, *errors.FleetctlError.__subclasses__()):
        assert f"| `{cls.kind}` | `{cls.__name__}` |" in text
