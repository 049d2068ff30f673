"""InterPodAffinity's PreFilter counting checks a label before the full match (affinity_terms.in_gate):
the counts equal a full match of every existing pod, for any required (anti-)affinity terms."""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
from hypothesis import given, settings

from custom_scheduler.framework.pod_tally import row_entries
from custom_scheduler.framework.types import NodeInfo
from custom_scheduler.plugins import inter_pod_affinity as ipa
from custom_scheduler.plugins.affinity_terms import NamespaceLabels, compile_pod_terms, matches_all
from tests.builders import make_node, make_pod
from tests.unit.plugins.support import fake_handle
from tests.unit.plugins.test_queueing_hints import KEYS, REQUIREMENT, TERM, VALUES, _term

LABELS = st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=3)
IN = st.tuples(st.sampled_from(KEYS), st.just("In"), st.lists(st.sampled_from(VALUES), min_size=2, max_size=3))
#: Mostly In expressions (the gate's case), sometimes after matchLabels or other operators.
IN_TERM = st.tuples(
    st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=1),
    st.lists(st.one_of(IN, REQUIREMENT), min_size=1, max_size=2),
    st.just(False),
)
TERMS = st.lists(st.one_of(IN_TERM, TERM), max_size=2)


def _no_labels(namespace: str) -> dict[str, str]:
    return {}


def _reference(req_aff: Any, req_anti: Any, ni: NodeInfo) -> dict[Any, int]:
    labels = ni.node.labels if ni.node is not None else {}
    out: dict[Any, int] = {}
    for existing in ni.pods.values():
        if matches_all(req_aff, existing, _no_labels):
            for t in req_aff:
                if t.topology_key in labels:
                    key = ("a", t.topology_key, labels[t.topology_key])
                    out[key] = out.get(key, 0) + 1
        for t in req_anti:
            if t.topology_key in labels and t.matches(existing, _no_labels):
                key = ("x", t.topology_key, labels[t.topology_key])
                out[key] = out.get(key, 0) + 1
    return out


@settings(max_examples=300, deadline=None)
@given(TERMS, TERMS, st.lists(LABELS, max_size=8))
def test_gated_counts_equal_a_full_match(aff: list[Any], anti: list[Any], pods: list[dict[str, str]]) -> None:
    b = make_pod("incoming")
    for t in aff:
        b.pod_affinity("podAffinity", _term(*t))
    for t in anti:
        b.pod_affinity("podAntiAffinity", _term(*t))
    terms = compile_pod_terms(b.build(), strict=False)
    ni = NodeInfo(make_node("n1").build())
    for i, labels in enumerate(pods):
        ni.add_pod(make_pod(f"p{i}").labels(**labels).node("n1").build())
    row = row_entries(
        ipa._incoming_rows(terms.required_affinity, terms.required_anti_affinity, NamespaceLabels(fake_handle()))
    )
    got: dict[Any, int] = {}
    for key, n in row(ni):
        got[key] = got.get(key, 0) + n
    assert got == _reference(terms.required_affinity, terms.required_anti_affinity, ni)
