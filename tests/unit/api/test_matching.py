"""Label selectors and tolerations against their documented semantics (property-based)."""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import given

from custom_scheduler.api import labels
from custom_scheduler.api.model import Taint, Toleration

KEYS = st.sampled_from(["app", "tier", "zone", "gpu"])
VALUES = st.sampled_from(["a", "b", "c", "1", "10"])
LABELSETS = st.dictionaries(KEYS, VALUES, max_size=4)


@given(LABELSETS, st.dictionaries(KEYS, VALUES, max_size=3))
def test_match_labels_is_subset(node_labels: dict[str, str], match: dict[str, str]) -> None:
    sel = labels.compile_selector({"matchLabels": match})
    assert sel.matches(node_labels) == all(node_labels.get(k) == v for k, v in match.items())


@given(LABELSETS, KEYS, st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist"]), st.sets(VALUES, min_size=1))
def test_expression_semantics(lbls: dict[str, str], key: str, op: str, values: set[str]) -> None:
    expr = {"key": key, "operator": op}
    if op in ("In", "NotIn"):
        expr["values"] = sorted(values)  # type: ignore[assignment]
    got = labels.compile_selector({"matchExpressions": [expr]}).matches(lbls)
    want = {
        "In": key in lbls and lbls[key] in values,
        "NotIn": key not in lbls or lbls[key] not in values,
        "Exists": key in lbls,
        "DoesNotExist": key not in lbls,
    }[op]
    assert got == want


@given(LABELSETS)
def test_empty_selector_matches_everything_and_null_nothing(lbls: dict[str, str]) -> None:
    assert labels.compile_selector({}).matches(lbls)
    assert not labels.compile_selector(None).matches(lbls)


@given(st.integers(-50, 50), st.integers(-50, 50), st.sampled_from(["Gt", "Lt"]))
def test_gt_lt_compare_integers(have: int, want: int, op: str) -> None:
    expr = {"key": "n", "operator": op, "values": [str(want)]}
    term = labels.compile_node_selector_term({"matchExpressions": [expr]})
    assert term.matches("node", {"n": str(have)}) == (have > want if op == "Gt" else have < want)
    assert not term.matches("node", {"n": "not-a-number"})


EFFECTS = st.sampled_from(["", "NoSchedule", "PreferNoSchedule", "NoExecute"])


@given(
    st.sampled_from(["", "k1", "k2"]),
    st.sampled_from(["Equal", "Exists", ""]),
    st.sampled_from(["", "v1", "v2"]),
    EFFECTS,
    st.sampled_from(["k1", "k2"]),
    st.sampled_from(["", "v1", "v2"]),
    EFFECTS.filter(bool),
)
def test_toleration_semantics(tk: str, op: str, tv: str, te: str, k: str, v: str, e: str) -> None:
    tol = Toleration(tk, op or "Equal", tv, te)
    taint = Taint(k, v, e)
    effect_ok = te in ("", e)
    # Exists matches any value (and any key when the key is empty); Equal needs key and value.
    want = effect_ok and (tk in ("", k) if op == "Exists" else (tk == k and tv == v))
    assert tol.tolerates(taint) == want
