"""Typed views of the Kubernetes objects the operator reads: a TeamRun with its status, a runner
Pod, an ApprovalDecision, the operator's leader-election Lease (pure).

They are ``TypedDict``s over the JSON the API server sends, as kopf's ``RawBody``: no copy, no
parsing, and mypy refuses a misspelt key (``status["pahse"]``) or a phase that is not one. Every
key is optional, as on the wire: an object may lack its status, a field its value, so a reader
still writes ``.get(...)`` where the API may leave a key out. A TeamRun's spec is parsed once
into ``models.TeamRunSpec`` (``specs.spec_of``); what the view gives of it is the raw mapping.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypedDict, cast

from oma_operator.resources.phases import ConditionType, Phase

ConditionStatus = Literal["True", "False", "Unknown"]


class OwnerReference(TypedDict, total=False):
    apiVersion: str
    kind: str
    name: str
    uid: str
    controller: bool
    blockOwnerDeletion: bool


class ObjectMeta(TypedDict, total=False):
    name: str
    namespace: str
    uid: str
    resourceVersion: str
    generation: int
    creationTimestamp: str
    deletionTimestamp: str
    labels: dict[str, str]
    annotations: dict[str, str]
    finalizers: list[str]
    ownerReferences: list[OwnerReference]


class Condition(TypedDict, total=False):
    """One of a TeamRun's conditions, one per type."""

    type: ConditionType
    status: ConditionStatus
    reason: str
    message: str
    lastTransitionTime: str
    observedGeneration: int


class TeamRunStatus(TypedDict, total=False):
    """What the operator writes (the CRD's status schema, ``crdgen._status_schema``)."""

    runId: str
    attempt: int
    phase: Phase
    queuedAt: str
    startTime: str
    completionTime: str
    output: dict[str, Any]
    observedGeneration: int
    conditions: list[Condition]
    attempts: list[dict[str, Any]]  # the attempt log: free-form records (runs.rules.status)
    disruptions: int
    failures: int
    oomKills: int
    taskSummary: str
    turns: int
    pendingApprovals: int
    budget: dict[str, Any]  # oma.budget.state.BudgetReport's wire form
    budgetSummary: str
    lastCheckpointAt: str
    checkpointSaved: bool
    nextAttemptAfter: str
    modelOutageSince: str
    toolChangedSince: str
    stoppedForHold: str
    workDigest: str
    retries: list[dict[str, Any]]  # the retry log (runs.retries)
    message: str


class TeamRunBody(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: dict[str, Any]  # parsed once into TeamRunSpec by specs.spec_of
    status: TeamRunStatus


class PodStatus(TypedDict, total=False):
    """The part of a pod's status the operator reads to tell how an attempt ended."""

    phase: str
    reason: str
    message: str
    startTime: str
    nominatedNodeName: str
    conditions: list[dict[str, Any]]
    containerStatuses: list[dict[str, Any]]
    initContainerStatuses: list[dict[str, Any]]


class PodBody(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: dict[str, Any]  # built by runs.rules.pods.runner_pod; read back only for its node
    status: PodStatus


class DecisionStatus(TypedDict, total=False):
    """What the operator writes on an ApprovalDecision (``crdgen._decision_status_schema``)."""

    verified: bool
    recorded: bool
    decision: str
    resolution: str
    reviewer: str
    reason: str
    decidedAt: str
    message: str
    expiresAt: str


class DecisionBody(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: dict[str, Any]  # parsed by models.ApprovalDecisionSpec where it is trusted
    status: DecisionStatus


class LeaseSpec(TypedDict, total=False):
    """A ``coordination.k8s.io/v1`` Lease's spec as the API server keeps it. Anyone allowed to
    write the Lease may put anything here (the schema checks types, not sense): the elector
    reads it through ``election.rules.read_record``, which trusts none of it."""

    holderIdentity: str
    leaseDurationSeconds: int
    acquireTime: str  # MicroTime, e.g. 2026-01-02T03:04:05.123456Z
    renewTime: str
    leaseTransitions: int


class LeaseBody(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: LeaseSpec


def teamrun_view(raw: Mapping[str, Any]) -> TeamRunBody:
    """A raw TeamRun (a kopf body, a watch event's object) as a typed view, copied shallowly
    so that a later change to ``raw`` by kopf does not show through."""
    return cast(TeamRunBody, dict(raw))


def pod_view(raw: Mapping[str, Any]) -> PodBody:
    """A raw runner Pod as a typed view (a shallow copy, as ``teamrun_view``)."""
    return cast(PodBody, dict(raw))


def decision_view(raw: Mapping[str, Any]) -> DecisionBody:
    """A raw ApprovalDecision as a typed view (a shallow copy, as ``teamrun_view``)."""
    return cast(DecisionBody, dict(raw))
