"""Discover's round trip as a property (issue 20, defect 2): whatever text nodes report (kernel and
driver versions, GPU models, LLDP errors), discover -> write -> parse never creates structure: the
parsed site file has exactly the tables and keys of a discovery with plain values, and each reported
string written as a value comes back unchanged."""

from __future__ import annotations

import os
import sys
import tomllib

from hypothesis import given
from hypothesis import strategies as st

from fleetctl.config import parse_site
from fleetctl.discover.classes import build_classes
from fleetctl.discover.fabric import assign_ids, assign_tiers, from_lldp
from fleetctl.discover.facts import choose_fabric_nics, parse_facts
from fleetctl.discover.run import Discovery
from fleetctl.errors import DataError
from tests.support.fuzz import fuzz_settings

sys.path.insert(0, os.path.dirname(__file__))
from test_discover import lab_docs, site_text  # noqa: E402

INJECTIONS = ["\n[lens]\nwindow_s = 0.2\n", "\r\n[access.ssh]\nhost_key_policy = \"ignore\"\r\n",
              "x\n[[act.policies]]\nname = \"evil\"\nsource = \"audit\"\nactions = [\"drain\"]\n",
              "\u2028[act]\u2029enabled = true", '"""', "'''", '\\"', "# ]] [[", "\x7f\x00\x1b[31m",
              "\"\n[act]\nenabled = true\n#"]
HOSTILE = st.one_of(st.sampled_from(INJECTIONS),
                    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=200),
                    st.builds(lambda a, b: a + b, st.sampled_from(INJECTIONS), st.text(max_size=20)))


def _discover(kernel: str, driver: str, model: str, lldp_error: str) -> str:
    hosts, switches = lab_docs()
    hosts["node2"]["kernel"] = kernel
    for doc in hosts.values():
        doc["gpus"].update(driver_version=driver, model=model)
    hosts["node3"]["lldp"] = {"text": hosts["node3"]["lldp"]["text"], "error": None}
    hosts["node4"]["lldp"]["error"] = lldp_error
    d = Discovery()
    d.facts = {n: parse_facts(v, n) for n, v in hosts.items()}
    d.switch_facts = {n: parse_facts(v, n) for n, v in switches.items()}
    for f in d.facts.values():
        choose_fabric_nics(f)
        f.notes.append(f"reported: {kernel}")
    d.classes = build_classes(d.facts)
    from_lldp(d.facts, d.switch_facts, d.fabric)
    assign_tiers(d.fabric)
    assign_ids(d.fabric)
    d.notes = [f"node note {kernel}"]
    return site_text(d)


def _shape(value):
    """Tables and keys, with every leaf value replaced by its type."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(v) for v in value]
    return type(value).__name__


PLAIN = _discover("6.1.0", "550.54", "NVIDIA H100 80GB HBM3", "")


@fuzz_settings(200)
@given(kernel=HOSTILE, driver=HOSTILE, model=HOSTILE, lldp_error=HOSTILE)
def test_no_reported_string_ever_becomes_structure(kernel, driver, model, lldp_error):
    try:
        text = _discover(kernel, driver, model, lldp_error)
    except DataError:
        return  # refused as input (too long, not valid Unicode, ...): nothing is written
    doc = tomllib.loads(text)
    plain = tomllib.loads(PLAIN)
    plain["node_classes"][0]["name"] = doc["node_classes"][0]["name"]  # named after the GPU model
    assert _shape(doc) == _shape(plain) or _same_but_gpu_values(doc, plain)
    assert set(doc) == set(plain)
    assert doc.get("lens") is None and doc.get("act") is None
    gpus = doc["node_classes"][0].get("gpus", {})
    if gpus.get("model") is not None:
        assert gpus["model"] == model
    parse_site(text, "discovered.toml")  # and the schema takes it


def _same_but_gpu_values(doc, plain) -> bool:
    """An empty GPU model or driver is left out of the [node_classes.gpus] table: the same
    structure otherwise."""
    a, b = dict(doc), dict(plain)
    a["node_classes"] = [{k: v for k, v in c.items() if k != "gpus"} for c in doc["node_classes"]]
    b["node_classes"] = [{k: v for k, v in c.items() if k != "gpus"} for c in plain["node_classes"]]
    return _shape(a) == _shape(b)


def test_the_injections_alone_each_stay_data():
    for text in INJECTIONS:
        written = _discover(text, text, "NVIDIA H100 80GB HBM3", text)
        doc = tomllib.loads(written)
        assert set(doc) == set(tomllib.loads(PLAIN)), text
        assert doc["node_classes"][0]["gpus"]["driver_version"] == text if "driver_version" in \
            doc["node_classes"][0]["gpus"] else True
