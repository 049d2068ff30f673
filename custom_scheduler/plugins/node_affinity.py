"""NodeAffinity: ``spec.nodeSelector`` and node affinity, plus scheduler-enforced affinity from args.

**Filter.** A node must match the pod's ``nodeSelector`` (every key equal) *and* its required node
affinity terms (ORed; inside a term every ``matchExpressions`` and ``matchFields`` requirement must
hold; a term with no requirements matches nothing; a required affinity with no terms matches no node).
The profile's ``addedAffinity`` (NodeAffinityArgs) is checked first and reported separately, so an
operator can tell "this profile only uses pool X" apart from the pod's own constraints. Node labels
cannot be changed by evicting pods, so both rejections are UnschedulableAndUnresolvable.

**PreFilter.** Returns Skip when there is nothing to check. When every required term pins
``metadata.name In [...]`` (DaemonSet pods do), the candidate nodes are narrowed to those names with
:meth:`CycleState.restrict_nodes`, so the Filter runs on a handful of nodes instead of thousands; terms
that pin disjoint names give ``pod affinity terms conflict``.

**Score.** The sum of the weights of the matching preferred terms (the pod's and ``addedAffinity``'s),
normalised so the best node gets 100. PreScore returns Skip when there are no preferred terms.

Selectors are compiled once per pod (PreFilter/PreScore) with :mod:`custom_scheduler.api.labels`. As in
kube-scheduler, a required term that does not parse (bad operator, invalid label value) never matches
rather than failing the pod; invalid preferred terms are an error. :func:`required_node_affinity_matches`
and :func:`compile_required_node_affinity` are the pure helpers other plugins (topology spread's
``nodeAffinityPolicy: Honor``) reuse.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import orjson

from custom_scheduler.api import labels
from custom_scheduler.api.model import Node, Pod
from custom_scheduler.errors import FieldError
from custom_scheduler.framework import arrays, registry
from custom_scheduler.framework import cluster_events as ce
from custom_scheduler.framework.interface import Handle
from custom_scheduler.framework.types import (
    SKIP,
    SUCCESS,
    Code,
    CycleState,
    NodeInfo,
    NodeScore,
    Snapshot,
    StateKey,
    Status,
)
from custom_scheduler.plugins import args_reader, helpers, signers

NAME = "NodeAffinity"

ERR_REASON_POD = "node(s) didn't match Pod's node affinity/selector"
ERR_REASON_ENFORCED = "node(s) didn't match scheduler-enforced node affinity"
ERR_REASON_CONFLICT = "pod affinity terms conflict"
ERR_REASON_INVALID_NODE_INFO = "invalid nodeInfo: node not found"

OBJECT_NAME_FIELD = "metadata.name"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
MAX_PREFERRED_WEIGHT = 100

PreferredTerms = tuple[tuple[int, labels.NodeSelectorTerm], ...]

# --- selector validation and compilation ---------------------------------------------------------


def node_selector_term_errors(doc: object, path: str) -> list[FieldError]:
    """Why ``doc`` is not a valid ``NodeSelectorTerm`` (what kube-scheduler's parser rejects)."""
    if not isinstance(doc, Mapping):
        return [FieldError(path, "must be an object")]
    errs: list[FieldError] = []
    for j, expr in enumerate(doc.get("matchExpressions") or ()):
        errs.extend(_requirement_errors(expr, f"{path}.matchExpressions[{j}]", field_selector=False))
    for j, expr in enumerate(doc.get("matchFields") or ()):
        errs.extend(_requirement_errors(expr, f"{path}.matchFields[{j}]", field_selector=True))
    return errs


def _requirement_errors(expr: object, path: str, *, field_selector: bool) -> list[FieldError]:
    if not isinstance(expr, Mapping):
        return [FieldError(path, "must be an object")]
    key = expr.get("key")
    op = expr.get("operator")
    values = expr.get("values") or []
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        return [FieldError(f"{path}.values", "must be a list of strings")]
    if field_selector:
        return _field_requirement_errors(key, op, values, path)
    errs: list[FieldError] = []
    if not isinstance(key, str):
        errs.append(FieldError(f"{path}.key", "must be a string"))
    else:
        errs.extend(FieldError(f"{path}.key", m) for m in args_reader.qualified_name_errors(key))
    return errs + _label_values_errors(op, values, path)


def _field_requirement_errors(key: object, op: object, values: list[str], path: str) -> list[FieldError]:
    """``matchFields``: only ``metadata.name``, with In or NotIn and exactly one value."""
    errs: list[FieldError] = []
    if key != OBJECT_NAME_FIELD:
        errs.append(FieldError(f"{path}.key", f'Unsupported value: {key!r}: supported values: "{OBJECT_NAME_FIELD}"'))
    if op not in (labels.IN, labels.NOT_IN):
        errs.append(FieldError(f"{path}.operator", f'Unsupported value: {op!r}: supported values: "In", "NotIn"'))
    elif len(values) != 1:
        errs.append(FieldError(f"{path}.values", "must have one element"))
    return errs


def _label_values_errors(op: object, values: list[str], path: str) -> list[FieldError]:
    """``matchExpressions``: the operator, and the values it takes (upstream's messages)."""
    errs: list[FieldError] = []
    if op in (labels.IN, labels.NOT_IN):
        if not values:
            errs.append(FieldError(f"{path}.values", "for 'in', 'notin' operators, values set can't be empty"))
        for k, v in enumerate(values):
            errs.extend(FieldError(f"{path}.values[{k}]", m) for m in args_reader.label_value_errors(v))
    elif op in (labels.EXISTS, labels.DOES_NOT_EXIST):
        if values:
            errs.append(FieldError(f"{path}.values", "values set must be empty for exists and does not exist"))
    elif op in (labels.GT, labels.LT):
        if len(values) != 1:
            errs.append(FieldError(f"{path}.values", "for 'Gt', 'Lt' operators, exactly one value is required"))
        else:
            try:
                int(values[0])
            except ValueError:
                errs.append(FieldError(f"{path}.values[0]", "for 'Gt', 'Lt' operators, the value must be an integer"))
    else:
        ops = ", ".join(
            f'"{o}"' for o in (labels.IN, labels.NOT_IN, labels.EXISTS, labels.DOES_NOT_EXIST, labels.GT, labels.LT)
        )
        errs.append(FieldError(f"{path}.operator", f"Unsupported value: {op!r}: supported values: {ops}"))
    return errs


def compile_term(doc: Mapping[str, Any]) -> labels.NodeSelectorTerm:
    """Validate and compile one ``NodeSelectorTerm``.

    Raises:
        labels.SelectorError: when the term is invalid.
    """
    errs = node_selector_term_errors(doc, "term")
    if errs:
        raise labels.SelectorError(str(errs[0]))
    return labels.compile_node_selector_term(doc)


def _compile_term_or_none(doc: Any) -> labels.NodeSelectorTerm | None:
    """A required term; an invalid one compiles to None, which never matches (upstream's leniency)."""
    try:
        return compile_term(doc) if isinstance(doc, Mapping) else None
    except labels.SelectorError:
        return None


def compile_preferred(docs: Sequence[Mapping[str, Any]]) -> PreferredTerms:
    """``preferredDuringSchedulingIgnoredDuringExecution`` → (weight, term), dropping weight-0 terms.

    Raises:
        labels.SelectorError: when a preference is invalid.
    """
    for d in docs:
        compile_term(d.get("preference") or {})
    return tuple((w, t) for w, t in labels.compile_preferred_terms(docs) if w != 0)


def preferred_score(terms: PreferredTerms, node: Node) -> int:
    return sum(w for w, t in terms if t.matches(node.name, node.labels))


# Rejections are shared constants, stamped with the plugin's name: Filter returns them on
# thousands of nodes per cycle.
_REJECT_ENFORCED = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (ERR_REASON_ENFORCED,), NAME)
_REJECT_POD = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (ERR_REASON_POD,), NAME)


@dataclass(frozen=True, slots=True)
class RequiredNodeAffinity:
    """A pod's ``nodeSelector`` AND its required node affinity, compiled."""

    node_selector: labels.Selector | None = None
    """From ``spec.nodeSelector``; None when the pod has none."""
    terms: tuple[labels.NodeSelectorTerm | None, ...] | None = None
    """Required terms (None entries never match); None when the pod has no required affinity."""

    def matches(self, node: Node) -> bool:
        if self.node_selector is not None and not self.node_selector.matches(node.labels):
            return False
        if self.terms is None:
            return True
        name, node_labels = node.name, node.labels
        for t in self.terms:  # noqa: SIM110 - hot path
            if t is not None and t.matches(name, node_labels):
                return True
        return False


def _node_affinity(pod: Pod) -> Mapping[str, Any]:
    a = pod.affinity
    na = a.get("nodeAffinity") if a else None
    return na if isinstance(na, Mapping) else {}


def compile_required_node_affinity(pod: Pod) -> RequiredNodeAffinity:
    """Compile ``pod``'s nodeSelector and required node affinity once, for matching many nodes."""
    selector = labels.selector_from_set(pod.node_selector) if pod.node_selector else None
    required = _node_affinity(pod).get(REQUIRED)
    terms = None
    if isinstance(required, Mapping):
        terms = tuple(_compile_term_or_none(t) for t in required.get("nodeSelectorTerms") or ())
    return RequiredNodeAffinity(selector, terms)


def required_node_affinity_matches(pod: Pod, node: Node) -> bool:
    """Whether ``node`` satisfies ``pod``'s nodeSelector and required node affinity.

    Compiles the pod's selectors on every call; loops over many nodes should call
    :func:`compile_required_node_affinity` once and use :meth:`RequiredNodeAffinity.matches`.
    """
    return compile_required_node_affinity(pod).matches(node)


def _pinned_node_names(terms: Sequence[Any]) -> set[str] | None:
    """The union over terms of the ``metadata.name In`` names; None when some term pins no name."""
    union: set[str] = set()
    for term in terms:
        names: set[str] | None = None
        for req in (term.get("matchFields") or ()) if isinstance(term, Mapping) else ():
            if req.get("key") == OBJECT_NAME_FIELD and req.get("operator") == labels.IN:
                values = set(req.get("values") or ())
                names = values if names is None else names & values
        if names is None:
            return None
        union |= names
    return union


# --- args ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeAffinityArgs:
    added_affinity: Mapping[str, Any] | None = field(default=None, hash=False)
    """A ``NodeAffinity`` applied to every pod of the profile (``addedAffinity``); None for none."""


def parse_args(raw: Mapping[str, Any] | None, path: str) -> NodeAffinityArgs:
    """Parse and validate ``NodeAffinityArgs``.

    Raises:
        ConfigError: listing every invalid field, with paths below ``path``.
    """
    r = args_reader.ArgsReader(path)
    doc = r.mapping(raw, path, fields=("addedAffinity",), kind="NodeAffinityArgs")
    added = doc.get("addedAffinity")
    if added is None:
        r.raise_errors()
        return NodeAffinityArgs()
    ap = f"{path}.addedAffinity"
    affinity = r.mapping(added, ap, fields=(REQUIRED, PREFERRED))
    if affinity.get(REQUIRED) is not None:
        rp = f"{ap}.{REQUIRED}"
        required = r.mapping(affinity[REQUIRED], rp, fields=("nodeSelectorTerms",))
        terms = r.items(required, "nodeSelectorTerms", rp)
        if not terms and isinstance(affinity[REQUIRED], Mapping):
            r.error(f"{rp}.nodeSelectorTerms", "must have at least one node selector term")
        for i, term in enumerate(terms):
            r.errors.extend(node_selector_term_errors(term, f"{rp}.nodeSelectorTerms[{i}]"))
    for i, item in enumerate(r.items(affinity, PREFERRED, ap)):
        pp = f"{ap}.{PREFERRED}[{i}]"
        pref = r.mapping(item, pp, fields=("weight", "preference"))
        weight = r.integer(pref, "weight", pp, 0)
        if not 0 <= weight <= MAX_PREFERRED_WEIGHT:
            r.error(f"{pp}.weight", f"must be in the range 0-{MAX_PREFERRED_WEIGHT}")
        if isinstance(item, Mapping):
            r.errors.extend(node_selector_term_errors(pref.get("preference") or {}, f"{pp}.preference"))
    r.raise_errors()
    return NodeAffinityArgs(dict(affinity))


# --- plugin --------------------------------------------------------------------------------------

PRE_FILTER_KEY: StateKey[RequiredNodeAffinity] = StateKey(f"PreFilter{NAME}")
PRE_SCORE_KEY: StateKey[PreferredTerms] = StateKey(f"PreScore{NAME}")


class NodeAffinity:
    """PreFilter/Filter on required affinity and nodeSelector; PreScore/Score on preferred terms."""

    name: ClassVar[str] = NAME
    #: Its Filter reads only the Node, never the pods on it (see ``FilterMaskPlugin``).
    filter_reads_node_only: ClassVar[bool] = True

    def __init__(self, args: NodeAffinityArgs | None, handle: Handle) -> None:
        del handle
        self.args = args or NodeAffinityArgs()
        added = self.args.added_affinity or {}
        self._added_required: labels.NodeSelector | None = None
        if added.get(REQUIRED) is not None:
            for term in added[REQUIRED].get("nodeSelectorTerms") or ():
                compile_term(term)
            self._added_required = labels.compile_node_selector(added[REQUIRED])
        self._added_preferred = compile_preferred(added.get(PREFERRED) or ())
        self._verdicts = arrays.RowMemo()

    def sign_pod(self, pod: Pod) -> signers.Fragments:
        """What this plugin reads of the pod (opportunistic batching)."""
        return signers.node_affinity(pod)

    def events_to_register(self) -> list[ce.ClusterEventWithHint]:
        """A node added, or relabelled, that now matches the pod's required affinity (and the
        profile's addedAffinity) where it did not before."""
        return [
            ce.ClusterEventWithHint(
                ce.ClusterEvent(ce.Resource.NODE, ce.Action.ADD | ce.Action.UPDATE_NODE_LABEL), self._after_node_change
            )
        ]

    def _after_node_change(self, pod: Pod, old: Node | None, new: Node) -> ce.Hint:
        added = self._added_required
        if added is not None and not added.matches(new.name, new.labels):
            return ce.Hint.SKIP
        required = compile_required_node_affinity(pod)
        if not required.matches(new):
            return ce.Hint.SKIP
        return ce.Hint.QUEUE if old is None or not required.matches(old) else ce.Hint.SKIP

    def pre_filter(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        required = _node_affinity(pod).get(REQUIRED)
        if required is None and self._added_required is None and not pod.node_selector:
            return SKIP
        state.write(PRE_FILTER_KEY, compile_required_node_affinity(pod))
        terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
        if not terms:
            return SUCCESS
        names = _pinned_node_names(terms)
        if names is None:
            return SUCCESS
        if not names:
            return Status.unresolvable(ERR_REASON_CONFLICT)
        state.restrict_nodes(names)
        return SUCCESS

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        node = node_info.node
        if node is None:
            return Status.as_error(ERR_REASON_INVALID_NODE_INFO)
        if self._added_required is not None and not self._added_required.matches(node.name, node.labels):
            return _REJECT_ENFORCED
        required = state.get(PRE_FILTER_KEY)
        if required is None:  # PreFilter disabled in the profile: compile here, as upstream does.
            required = compile_required_node_affinity(pod)
        if not required.matches(node):
            return _REJECT_POD
        return SUCCESS

    def filter_mask(self, state: CycleState, pod: Pod, snap: Snapshot) -> arrays.Mask | bool | None:
        """:meth:`filter` for every snapshot node at once. The verdict depends only on the node
        and the pod's required affinity, which all replicas of a workload share: it is memoised
        per affinity across cycles (:class:`arrays.RowMemo`)."""
        cols: arrays.NodeArrays = snap.arrays
        required = state.get(PRE_FILTER_KEY)
        if required is None:
            return None
        key = (
            tuple(sorted(pod.node_selector.items())),
            orjson.dumps(_node_affinity(pod).get(REQUIRED), option=orjson.OPT_SORT_KEYS),
        )
        added = self._added_required

        def passes(ni: NodeInfo) -> bool:
            node = ni.node
            assert node is not None  # filter_many masks only snapshots whose rows all have a Node
            if added is not None and not added.matches(node.name, node.labels):
                return False
            return required.matches(node)

        mask: arrays.Mask = self._verdicts.values(key, cols, snap.node_list, passes)
        return mask

    def pre_score(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        preferred = compile_preferred(_node_affinity(pod).get(PREFERRED) or ())
        if not preferred and not self._added_preferred:
            return SKIP
        state.write(PRE_SCORE_KEY, preferred)
        return SUCCESS

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> int:
        node = node_info.node
        if node is None:
            return 0
        preferred = state.get(PRE_SCORE_KEY)
        if preferred is None:  # PreScore disabled in the profile: compile here, as upstream does.
            preferred = compile_preferred(_node_affinity(pod).get(PREFERRED) or ())
        return preferred_score(self._added_preferred, node) + preferred_score(preferred, node)

    def normalize_score(self, state: CycleState, pod: Pod, scores: list[NodeScore]) -> Status:
        helpers.default_normalize_score(scores, reverse=False)
        return SUCCESS

    def normalize_batch(self, state: CycleState, pod: Pod, raw: list[int]) -> list[int]:
        """:meth:`normalize_score` on the batch path (no NodeScore objects)."""
        return helpers.default_normalize_list(raw, reverse=False)


SPEC = registry.PluginSpec(NAME, factory=NodeAffinity, parse_args=parse_args)
