"""NodeAffinity: kube-scheduler's filter, PreFilter and score tables, args validation, properties."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from custom_scheduler.api import labels
from custom_scheduler.errors import ConfigError
from custom_scheduler.framework.types import SKIP, SUCCESS, Code, CycleState, NodeScore, Status
from custom_scheduler.plugins import node_affinity as na
from tests.builders import PodBuilder, make_node
from tests.unit.plugins.support import bare, fake_handle, node_info, scores

MISMATCH = Status.unresolvable("node(s) didn't match Pod's node affinity/selector")
ENFORCED = Status.unresolvable("node(s) didn't match scheduler-enforced node affinity")


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    e: dict[str, Any] = {"key": key, "operator": op}
    if values:
        e["values"] = list(values)
    return e


def term(*exprs: dict[str, Any], fields: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    t: dict[str, Any] = {}
    if exprs:
        t["matchExpressions"] = list(exprs)
    if fields:
        t["matchFields"] = list(fields)
    return t


def name_in(*names: str) -> dict[str, Any]:
    return expr("metadata.name", "In", *names)


def required(*terms: dict[str, Any]) -> PodBuilder:
    return bare().required_node_affinity(*terms)


def added(raw: dict[str, Any]) -> na.NodeAffinityArgs:
    return na.parse_args({"addedAffinity": raw}, "args")


FILTER_CASES = [
    pytest.param(bare(), {}, "n", None, SUCCESS, id="no-selector"),
    pytest.param(bare().node_selector(foo="bar"), {}, "n", None, MISMATCH, id="missing-labels"),
    pytest.param(bare().node_selector(foo="bar"), {"foo": "bar"}, "n", None, SUCCESS, id="same-labels"),
    pytest.param(
        bare().node_selector(foo="bar"), {"foo": "bar", "baz": "blah"}, "n", None, SUCCESS, id="node-labels-superset"
    ),
    pytest.param(
        bare().node_selector(foo="bar", baz="blah"), {"foo": "bar"}, "n", None, MISMATCH, id="node-labels-subset"
    ),
    pytest.param(
        required(term(expr("foo", "In", "bar", "value2"))), {"foo": "bar"}, "n", None, SUCCESS, id="in-operator-matches"
    ),
    pytest.param(
        required(term(expr("kernel-version", "Gt", "0204"))),
        {"kernel-version": "0206"},
        "n",
        None,
        SUCCESS,
        id="gt-operator-matches",
    ),
    pytest.param(
        required(term(expr("mem-type", "NotIn", "DDR", "DDR2"))),
        {"mem-type": "DDR3"},
        "n",
        None,
        SUCCESS,
        id="notin-operator-matches",
    ),
    pytest.param(
        required(term(expr("GPU", "Exists"))),
        {"GPU": "NVIDIA-GRID-K1"},
        "n",
        None,
        SUCCESS,
        id="exists-operator-matches",
    ),
    pytest.param(
        required(term(expr("foo", "In", "value1", "value2"))),
        {"foo": "bar"},
        "n",
        None,
        MISMATCH,
        id="affinity-does-not-match",
    ),
    pytest.param(
        bare().affinity(
            {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": None}}}
        ),
        {"foo": "bar"},
        "n",
        None,
        MISMATCH,
        id="nil-node-selector-terms-match-nothing",
    ),
    pytest.param(required(), {"foo": "bar"}, "n", None, MISMATCH, id="empty-node-selector-terms-match-nothing"),
    pytest.param(required(term()), {"foo": "bar"}, "n", None, MISMATCH, id="empty-term-matches-nothing"),
    pytest.param(
        bare().affinity({"nodeAffinity": {}}), {"foo": "bar"}, "n", None, SUCCESS, id="affinity-without-required"
    ),
    pytest.param(
        bare().affinity({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}),
        {},
        "n",
        None,
        SUCCESS,
        id="affinity-with-nil-required",
    ),
    pytest.param(
        required(term(expr("GPU", "Exists"), expr("GPU", "NotIn", "AMD", "INTER"))),
        {"GPU": "NVIDIA-GRID-K1"},
        "n",
        None,
        SUCCESS,
        id="expressions-anded-match",
    ),
    pytest.param(
        required(term(expr("GPU", "Exists"), expr("GPU", "In", "AMD", "INTER"))),
        {"GPU": "NVIDIA-GRID-K1"},
        "n",
        None,
        MISMATCH,
        id="expressions-anded-do-not-match",
    ),
    pytest.param(
        required(term(expr("foo", "In", "bar", "value2")), term(expr("diffkey", "In", "wrong", "value2"))),
        {"foo": "bar"},
        "n",
        None,
        SUCCESS,
        id="terms-ored",
    ),
    pytest.param(
        required(term(expr("foo", "Exists"))).node_selector(foo="bar"),
        {"foo": "bar"},
        "n",
        None,
        SUCCESS,
        id="affinity-and-node-selector-both-match",
    ),
    pytest.param(
        required(term(expr("foo", "Exists"))).node_selector(foo="bar"),
        {"foo": "barrrrrr"},
        "n",
        None,
        MISMATCH,
        id="affinity-matches-but-node-selector-does-not",
    ),
    pytest.param(
        required(term(expr("foo", "NotIn", "invalid value: ___@#$%^"))),
        {"foo": "bar"},
        "n",
        None,
        MISMATCH,
        id="invalid-value-in-term-never-matches",
    ),
    pytest.param(
        required(term(expr("foo", "Bogus", "x"))),
        {"foo": "x"},
        "n",
        None,
        MISMATCH,
        id="invalid-operator-never-matches",
    ),
    pytest.param(
        required(term(expr("foo", "Bogus", "x")), term(expr("foo", "In", "x"))),
        {"foo": "x"},
        "n",
        None,
        SUCCESS,
        id="invalid-term-does-not-spoil-valid-one",
    ),
    pytest.param(
        required(term(expr("n", "Gt", "abc"))), {"n": "5"}, "n", None, MISMATCH, id="gt-non-integer-value-never-matches"
    ),
    pytest.param(
        required(term(fields=(name_in("node_1"),))), {}, "node_1", None, SUCCESS, id="match-fields-in-matches"
    ),
    pytest.param(
        required(term(fields=(name_in("node_1"),))), {}, "node_2", None, MISMATCH, id="match-fields-in-does-not-match"
    ),
    pytest.param(
        required(term(fields=(expr("metadata.name", "NotIn", "node_1"),))),
        {},
        "node_2",
        None,
        SUCCESS,
        id="match-fields-notin",
    ),
    pytest.param(
        required(term(fields=(name_in("node_1"),)), term(expr("foo", "In", "bar"))),
        {"foo": "bar"},
        "node_2",
        None,
        SUCCESS,
        id="two-terms-fields-miss-expressions-match",
    ),
    pytest.param(
        required(term(expr("foo", "In", "bar"), fields=(name_in("node_1"),))),
        {"foo": "bar"},
        "node_2",
        None,
        MISMATCH,
        id="one-term-fields-miss-expressions-match",
    ),
    pytest.param(
        required(term(expr("foo", "In", "bar"), fields=(name_in("node_1"),))),
        {"foo": "bar"},
        "node_1",
        None,
        SUCCESS,
        id="one-term-both-match",
    ),
    pytest.param(
        required(term(fields=(name_in("node_1"),)), term(expr("foo", "In", "not-match-to-bar"))),
        {"foo": "bar"},
        "node_2",
        None,
        MISMATCH,
        id="two-terms-neither-matches",
    ),
    pytest.param(
        required(term(expr("zone", "In", "foo"))),
        {"zone": "foo"},
        "node_2",
        {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term(fields=(name_in("node_2"),))]}},
        SUCCESS,
        id="matches-added-and-pod-affinity",
    ),
    pytest.param(
        required(term(expr("zone", "In", "bar"))),
        {"zone": "foo"},
        "node_2",
        {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term(fields=(name_in("node_2"),))]}},
        MISMATCH,
        id="matches-added-but-not-pod-affinity",
    ),
    pytest.param(
        bare(),
        {"zone": "foo"},
        "node_2",
        {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term(expr("zone", "In", "bar"))]}},
        ENFORCED,
        id="does-not-match-added-affinity",
    ),
    pytest.param(
        required(term(expr("zone", "In", "bar"))),
        {"zone": "foo"},
        "node_2",
        {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term(expr("zone", "In", "bar"))]}},
        ENFORCED,
        id="added-affinity-reported-first",
    ),
]


@pytest.mark.parametrize(("pod", "node_labels", "node_name", "added_affinity", "want"), FILTER_CASES)
def test_filter(
    pod: PodBuilder, node_labels: dict[str, str], node_name: str, added_affinity: Any, want: Status
) -> None:
    node = make_node(node_name).labels(**node_labels).build()
    args = added(added_affinity) if added_affinity else None
    pl = na.NodeAffinity(args, fake_handle())
    p = pod.build()
    ni = node_info(node)
    # Without PreFilter (the plugin computes the state itself, as upstream's fallback does) ...
    assert pl.filter(CycleState(), p, ni) == want
    # ... and with it, unless PreFilter says there is nothing to check.
    state = CycleState()
    pre = pl.pre_filter(state, p, [ni])
    if pre == SUCCESS:
        assert pl.filter(state, p, ni) == want
    if added_affinity is None:
        assert na.required_node_affinity_matches(p, node) is (want == SUCCESS)


@pytest.mark.parametrize(
    ("pod", "added_affinity", "want_status", "want_nodes"),
    [
        pytest.param(bare(), None, SKIP, None, id="nothing-to-check-skips"),
        pytest.param(bare().affinity({"nodeAffinity": {}}), None, SKIP, None, id="affinity-without-required-skips"),
        pytest.param(bare().node_selector(a="b"), None, SUCCESS, None, id="node-selector-only"),
        pytest.param(
            bare(),
            {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term(expr("a", "Exists"))]}},
            SUCCESS,
            None,
            id="added-affinity-prevents-skip",
        ),
        pytest.param(required(), None, SUCCESS, None, id="empty-terms-no-restriction"),
        pytest.param(
            required(term(fields=(name_in("node1"),))), None, SUCCESS, {"node1"}, id="metadata-name-restricts-nodes"
        ),
        pytest.param(
            required(term(fields=(name_in("node1"),)), term(fields=(name_in("node2"),))),
            None,
            SUCCESS,
            {"node1", "node2"},
            id="union-over-terms",
        ),
        pytest.param(
            required(term(fields=(name_in("node1"), name_in("node1")))),
            None,
            SUCCESS,
            {"node1"},
            id="intersection-within-term",
        ),
        pytest.param(
            required(term(fields=(name_in("node1"), name_in("node2")))),
            None,
            Status.unresolvable("pod affinity terms conflict"),
            None,
            id="conflicting-names-in-term",
        ),
        pytest.param(
            required(term(fields=(name_in("node1"),)), term(expr("a", "Exists"))),
            None,
            SUCCESS,
            None,
            id="a-term-without-name-removes-restriction",
        ),
        pytest.param(
            required(term(fields=(expr("metadata.name", "NotIn", "node1"),))),
            None,
            SUCCESS,
            None,
            id="notin-does-not-restrict",
        ),
    ],
)
def test_pre_filter(pod: PodBuilder, added_affinity: Any, want_status: Status, want_nodes: set[str] | None) -> None:
    pl = na.NodeAffinity(added(added_affinity) if added_affinity else None, fake_handle())
    state = CycleState()
    assert pl.pre_filter(state, pod.build(), []) == want_status
    assert state.node_names == want_nodes


def test_filter_without_node_is_an_error() -> None:
    pl = na.NodeAffinity(None, fake_handle())
    assert pl.filter(CycleState(), bare().build(), node_info(None)).code is Code.ERROR


def preferred(*weighted: tuple[int, dict[str, Any]]) -> PodBuilder:
    b = bare()
    for w, t in weighted:
        b.preferred_node_affinity(w, t)
    return b


AFFINITY1 = ((2, term(expr("foo", "In", "bar"))),)
AFFINITY2 = (
    (2, term(expr("foo", "In", "bar"))),
    (4, term(expr("key", "In", "value"))),
    (5, term(expr("foo", "In", "bar"), expr("key", "In", "value"), expr("az", "In", "az1"))),
)
LABEL1 = {"foo": "bar"}
LABEL2 = {"key": "value"}
LABEL3 = {"az": "az1"}
LABEL4 = {"abc": "az11", "def": "az22"}
LABEL5 = {"foo": "bar", "key": "value", "az": "az1"}


@pytest.mark.parametrize(
    ("pod", "nodes", "added_affinity", "want"),
    [
        pytest.param(bare(), [LABEL1, LABEL2, LABEL3], None, [0, 0, 0], id="no-affinity-all-equal"),
        pytest.param(preferred(*AFFINITY1), [LABEL4, LABEL2, LABEL3], None, [0, 0, 0], id="no-node-matches-preferred"),
        pytest.param(preferred(*AFFINITY1), [LABEL1, LABEL2, LABEL3], None, [100, 0, 0], id="only-first-matches"),
        # raw 2, 11, 4 → 100·2/11 = 18, 100, 100·4/11 = 36.
        pytest.param(preferred(*AFFINITY2), [LABEL1, LABEL5, LABEL2], None, [18, 100, 36], id="different-priorities"),
        pytest.param(
            bare(),
            [LABEL1, LABEL2],
            {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 2, "preference": AFFINITY1[0][1]}]},
            [100, 0],
            id="added-affinity",
        ),
        pytest.param(
            preferred(*AFFINITY1),
            [LABEL1, LABEL2, LABEL5],
            {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 3, "preference": term(expr("key", "In", "value"))}
                ]
            },
            [40, 60, 100],
            id="added-affinity-and-pod-affinity",
        ),
        pytest.param(
            preferred((0, term(expr("foo", "In", "bar")))),
            [LABEL1, LABEL2],
            None,
            [0, 0],
            id="zero-weight-terms-ignored",
        ),
        pytest.param(preferred((7, term())), [LABEL1, LABEL2], None, [0, 0], id="empty-preference-matches-nothing"),
    ],
)
def test_score(pod: PodBuilder, nodes: list[dict[str, str]], added_affinity: Any, want: list[int]) -> None:
    infos = [node_info(make_node(f"machine{i}").labels(**lbl).build()) for i, lbl in enumerate(nodes)]
    pl = na.NodeAffinity(added(added_affinity) if added_affinity else None, fake_handle(infos))
    assert scores(pl, pod.build(), infos) == want


def test_pre_score_skips_without_preferred_terms() -> None:
    pl = na.NodeAffinity(None, fake_handle())
    assert pl.pre_score(CycleState(), required(term(expr("a", "Exists"))).build(), []) == SKIP
    assert pl.pre_score(CycleState(), preferred(*AFFINITY1).build(), []) == SUCCESS
    with_added = na.NodeAffinity(
        added({"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": AFFINITY1[0][1]}]}),
        fake_handle(),
    )
    assert with_added.pre_score(CycleState(), bare().build(), []) == SUCCESS


def test_invalid_preferred_term_raises() -> None:
    """Invalid preferred terms are an error (kube-scheduler returns an ERROR status from PreScore)."""
    pl = na.NodeAffinity(None, fake_handle())
    with pytest.raises(labels.SelectorError):
        pl.pre_score(CycleState(), preferred((1, term(expr("a", "Bogus")))).build(), [])


# --- args ------------------------------------------------------------------------------------------

A = "profiles[0].pluginConfig[2].args.addedAffinity"
REQ = f"{A}.requiredDuringSchedulingIgnoredDuringExecution"
PREF = f"{A}.preferredDuringSchedulingIgnoredDuringExecution"
OPERATORS = '"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"'
QUALIFIED_NAME_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
)
LABEL_VALUE_MSG = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', " + (
    "and must start and end with an alphanumeric character"
)


def test_parse_args_valid() -> None:
    raw = {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term(expr("pool", "In", "batch"))]},
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 10, "preference": term(expr("ssd", "Exists"))}],
    }
    assert na.parse_args({"addedAffinity": raw}, "args") == na.NodeAffinityArgs(raw)
    assert na.parse_args(None, "args") == na.NodeAffinityArgs()
    assert na.parse_args({"kind": "NodeAffinityArgs"}, "args") == na.NodeAffinityArgs()


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        pytest.param(
            {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [term(expr("foo", "Bogus", "x"))]
                }
            },
            [
                (
                    f"{REQ}.nodeSelectorTerms[0].matchExpressions[0].operator",
                    f"Unsupported value: 'Bogus': supported values: {OPERATORS}",
                )
            ],
            id="bad-operator",
        ),
        pytest.param(
            {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [term(expr("a", "Exists")), term(expr("foo", "In"))]
                }
            },
            [
                (
                    f"{REQ}.nodeSelectorTerms[1].matchExpressions[0].values",
                    "for 'in', 'notin' operators, values set can't be empty",
                )
            ],
            id="in-without-values",
        ),
        pytest.param(
            {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term(expr("a", "Exists", "x"))]}},
            [
                (
                    f"{REQ}.nodeSelectorTerms[0].matchExpressions[0].values",
                    "values set must be empty for exists and does not exist",
                )
            ],
            id="exists-with-values",
        ),
        pytest.param(
            {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [term(expr("a", "Gt", "1", "2"))]
                }
            },
            [
                (
                    f"{REQ}.nodeSelectorTerms[0].matchExpressions[0].values",
                    "for 'Gt', 'Lt' operators, exactly one value is required",
                )
            ],
            id="gt-with-two-values",
        ),
        pytest.param(
            {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term(expr("a", "Lt", "x"))]}},
            [
                (
                    f"{REQ}.nodeSelectorTerms[0].matchExpressions[0].values[0]",
                    "for 'Gt', 'Lt' operators, the value must be an integer",
                )
            ],
            id="lt-non-integer",
        ),
        pytest.param(
            {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [term(fields=(expr("metadata.uid", "In", "x"),))]
                }
            },
            [
                (
                    f"{REQ}.nodeSelectorTerms[0].matchFields[0].key",
                    "Unsupported value: 'metadata.uid': supported values: \"metadata.name\"",
                )
            ],
            id="match-fields-bad-key",
        ),
        pytest.param(
            {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [term(fields=(name_in("a", "b"),))]
                }
            },
            [(f"{REQ}.nodeSelectorTerms[0].matchFields[0].values", "must have one element")],
            id="match-fields-two-values",
        ),
        pytest.param(
            {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}},
            [(f"{REQ}.nodeSelectorTerms", "must have at least one node selector term")],
            id="required-without-terms",
        ),
        pytest.param(
            {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 101, "preference": term(expr("a", "In", "b c"))}
                ]
            },
            [
                (f"{PREF}[0].weight", "must be in the range 0-100"),
                (
                    f"{PREF}[0].preference.matchExpressions[0].values[0]",
                    LABEL_VALUE_MSG,
                ),
            ],
            id="preferred-bad-weight-and-value",
        ),
        pytest.param(
            {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [term(expr("bad key!", "Exists"))]
                }
            },
            [
                (
                    f"{REQ}.nodeSelectorTerms[0].matchExpressions[0].key",
                    "name part " + QUALIFIED_NAME_MSG,
                )
            ],
            id="invalid-label-key",
        ),
        pytest.param(
            {"requiredDuringSchedulingIgnoredDuringExecution": {"terms": []}},
            [
                (f"{REQ}.terms", "unknown field (known fields: nodeSelectorTerms)"),
                (f"{REQ}.nodeSelectorTerms", "must have at least one node selector term"),
            ],
            id="unknown-field",
        ),
    ],
)
def test_parse_args_errors(raw: dict[str, Any], want: list[tuple[str, str]]) -> None:
    with pytest.raises(ConfigError) as exc:
        na.parse_args({"addedAffinity": raw}, "profiles[0].pluginConfig[2].args")
    assert [(e.path, e.message) for e in exc.value.errors] == want


# --- properties ------------------------------------------------------------------------------------


@given(st.lists(st.integers(min_value=0, max_value=100 * 50), min_size=1, max_size=50))
def test_normalized_scores_in_range_and_order_kept(raw: list[int]) -> None:
    pl = na.NodeAffinity(None, fake_handle())
    result = [NodeScore(f"n{i}", s) for i, s in enumerate(raw)]
    assert pl.normalize_score(CycleState(), bare().build(), result) == SUCCESS
    out = [s.score for s in result]
    assert all(0 <= s <= 100 for s in out)
    for i in range(len(raw)):
        for j in range(len(raw)):
            if raw[i] <= raw[j]:
                assert out[i] <= out[j]
    assert max(out) == (100 if max(raw) > 0 else 0)
