"""The machine-config snippets of the fix texts (formats/talos_config.py) read back as exactly what they were
made from, whatever a module parameter holds: a ``": "`` that plain YAML would read as a mapping, a ``" #"``
that would start a comment, quotes, leading dashes, numbers, ``null``, non-ASCII."""

from __future__ import annotations

from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from driver_container.formats.talos_config import module_config_snippet

BOUNDED = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TALOS = [None, "v1.13.9", "v1.14.0-beta.0", "v1.14.2"]
NAMES = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=20)
PARAMETERS = st.lists(st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40), max_size=4)
# What each form means in Talos's schema: (name, parameters) per module, parameters absent when empty.
Modules = list[tuple[str, list[str]]]


def read_back(snippet: str) -> Modules:
    documents: list[Any] = list(yaml.safe_load_all(snippet))
    if documents[0].get("kind") == "KernelModuleConfig":
        entries = documents
        assert all(d["apiVersion"] == "v1alpha1" and d["kind"] == "KernelModuleConfig" for d in documents)
    else:
        assert len(documents) == 1 and list(documents[0]) == ["machine"]
        entries = documents[0]["machine"]["kernel"]["modules"]
    assert all("parameters" not in e or e["parameters"] for e in entries)  # never an empty (null) key
    return [(e["name"], e.get("parameters", [])) for e in entries]


@BOUNDED
@given(modules=st.lists(st.tuples(NAMES, PARAMETERS), min_size=1, max_size=3), talos=st.sampled_from(TALOS))
def test_every_name_and_parameter_round_trips(modules: Modules, talos: str | None) -> None:
    assert read_back(module_config_snippet(modules, talos)) == modules


def test_the_values_that_plain_yaml_misreads_round_trip() -> None:
    tricky = ["NVreg_RegistryDwords=a: b", "x=1 #2", "- y", "'q'", '"d"', "null", "12", "yes", "", " lead", "a\nb"]
    for talos in TALOS:
        assert read_back(module_config_snippet([("nvidia", tricky)], talos)) == [("nvidia", tricky)]
