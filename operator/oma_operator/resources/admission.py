"""Admission policies the API server enforces for approvals (generated, never edited by hand).

    python -m oma_operator.resources.admission  # rewrites deploy/admission-policies.yaml and
                                                # the chart's templates/admission-policies.yaml

- ``approval-decisions`` (ValidatingAdmissionPolicy): only whoever holds the ``publish`` verb on
  ``approvaldecisions`` (the operator) creates them; whoever moves a decision out of Pending
  writes their own user name as ``spec.reviewer``, is one of the resource's ``reviewers`` (user
  or group) and not one of its ``excludedReviewers``.
- ``teamrun-creator`` (MutatingAdmissionPolicy + ValidatingAdmissionPolicy): the API server
  records who created a TeamRun in its ``oma.dev/created-by`` annotation, which nobody can set
  to anyone else or change (separation of duties rests on it).
- ``teamrun-editors`` (MutatingAdmissionPolicy, validated by ``teamrun-creator``): the API
  server appends whoever changes what a TeamRun executes (a work field of its spec, not a hold
  field) to its ``oma.dev/edited-by`` annotation, one user per line, which nobody can set at
  creation, shorten or change (separation of duties excludes them as it does the creator).
- ``teamrun-references`` (ValidatingAdmissionPolicy): whoever creates a TeamRun, or changes its
  spec, must be able to ``get`` every Secret and ConfigMap it hands to its runner pod (store,
  model keys, ``runner.env``): a TeamRun grants nothing its author does not have.
- ``runner-pods`` (ValidatingAdmissionPolicy): only whoever holds the ``start`` verb on
  ``teamruns`` (the operator) creates a pod labelled ``oma.dev/teamrun``, or gives a pod that
  label; only the node (and Kubernetes' controllers) writes such a pod's status; only the
  operator or Kubernetes deletes a live one: the operator records how a TeamRun's attempt
  ended from such a pod, so a forged one, or a forged status, could end someone else's run.

The reviewer lists are read from the *old* object: a change cannot widen its own check.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from oma_operator.resources.cel import all_unchanged
from oma_operator.resources.models import (
    CREATOR_ANNOTATION,
    EDITORS_ANNOTATION,
    GROUP,
    VERSION,
    work_fields,
)

ADMISSION = "admissionregistration.k8s.io/v1"
PUBLISH_VERB = "publish"  # the RBAC verb that lets a user create ApprovalDecisions
START_VERB = "start"  # the RBAC verb (on teamruns) that lets a user create runner pods
# What names a runner pod's run and attempt (oma_operator.runs.rules.pods).
POD_LABELS = ("oma.dev/teamrun", "oma.dev/attempt")
RELEASE = "__RELEASE__"  # the name prefix: "oma" in deploy/, the Helm release in the chart
REPO = Path(__file__).resolve().parents[3]
DEPLOY_FILE = REPO / "deploy" / "admission-policies.yaml"
CHART_FILE = REPO / "charts" / "oma" / "templates" / "admission-policies.yaml"

DECIDING = "request.operation == 'UPDATE' && oldObject.spec.decision != object.spec.decision"
MAY_PUBLISH = (
    f"authorizer.group('{GROUP}').resource('approvaldecisions')"
    f".namespace(request.namespace).check('{PUBLISH_VERB}').allowed()"
)
NAMED_REVIEWER = (
    "!has(oldObject.spec.reviewers) || "
    "(has(oldObject.spec.reviewers.users) && "
    "request.userInfo.username in oldObject.spec.reviewers.users) || "
    "(has(oldObject.spec.reviewers.groups) && has(request.userInfo.groups) && "
    "request.userInfo.groups.exists(g, g in oldObject.spec.reviewers.groups))"
)
NOT_EXCLUDED = (
    "!has(oldObject.spec.excludedReviewers) || "
    "!(request.userInfo.username in oldObject.spec.excludedReviewers)"
)


MAY_START = (
    f"authorizer.group('{GROUP}').resource('teamruns')"
    f".namespace(request.namespace).check('{START_VERB}').allowed()"
)


def _label(obj: str, key: str) -> str:
    return (
        f"(has({obj}.metadata.labels) && '{key}' in {obj}.metadata.labels"
        f" ? {obj}.metadata.labels['{key}'] : '')"
    )


def _annotation(obj: str, key: str = CREATOR_ANNOTATION) -> str:
    return (
        f"(has({obj}.metadata.annotations) && '{key}' in {obj}.metadata.annotations"
        f" ? {obj}.metadata.annotations['{key}'] : '')"
    )


# An update that changes what the TeamRun executes (a work field of its spec).
WORK_CHANGED = f"!({all_unchanged('object.spec', 'oldObject.spec', work_fields())})"
EDITORS_BEFORE = _annotation("oldObject", EDITORS_ANNOTATION)
# The editors after this request: the ones before, and the user unless already among them.
EDITORS_AFTER = (
    f"{EDITORS_BEFORE} == '' ? request.userInfo.username : "
    f"(request.userInfo.username in {EDITORS_BEFORE}.split('\\n') ? {EDITORS_BEFORE} : "
    f"{EDITORS_BEFORE} + '\\n' + request.userInfo.username)"
)


def _rule(
    resources: str | list[str], *operations: str, group: str = GROUP, version: str = VERSION
) -> dict[str, Any]:
    return {
        "resourceRules": [
            {
                "apiGroups": [group],
                "apiVersions": [version],
                "operations": list(operations),
                "resources": [resources] if isinstance(resources, str) else resources,
            }
        ]
    }


def _check(expression: str, message: str) -> dict[str, Any]:
    return {"expression": expression, "message": message, "reason": "Forbidden"}


def approval_decisions_policy() -> dict[str, Any]:
    return {
        "apiVersion": ADMISSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": f"{RELEASE}-approval-decisions"},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": _rule("approvaldecisions", "CREATE", "UPDATE"),
            "variables": [{"name": "deciding", "expression": DECIDING}],
            "validations": [
                _check(
                    f"request.operation != 'CREATE' || {MAY_PUBLISH}",
                    "only the oma operator creates ApprovalDecisions (creating one needs the "
                    f"'{PUBLISH_VERB}' verb on approvaldecisions.{GROUP}); reviewers decide by "
                    "updating the one the operator published",
                ),
                _check(
                    "request.operation != 'CREATE' || object.spec.decision == 'Pending'",
                    "an ApprovalDecision is created Pending: its reviewer decides it afterwards",
                ),
                _check(
                    "!variables.deciding || (has(object.spec.reviewer) && "
                    "object.spec.reviewer == request.userInfo.username)",
                    "spec.reviewer must be your own user name when you set the decision",
                ),
                _check(
                    f"!variables.deciding || {NAMED_REVIEWER}",
                    "you are not a reviewer of this request: only the users and groups in its "
                    "spec.reviewers may decide it",
                ),
                _check(
                    f"!variables.deciding || {NOT_EXCLUDED}",
                    "you created this TeamRun or changed what it executes, and its approvals "
                    "require separation of duties: someone else must decide",
                ),
                _check(
                    "!variables.deciding || !has(oldObject.status) || "
                    "!has(oldObject.status.recorded) || !oldObject.status.recorded",
                    "this request is already decided (status.decision, by status.reviewer; "
                    "'expired' when nobody decided it in time): a decision set now would not "
                    "count",
                ),
            ],
        },
    }


def creator_mutation() -> dict[str, Any]:
    return {
        "apiVersion": ADMISSION,
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": f"{RELEASE}-teamrun-creator"},
        "spec": {
            "failurePolicy": "Fail",
            "reinvocationPolicy": "Never",
            "matchConstraints": _rule("teamruns", "CREATE"),
            "mutations": [
                {
                    "patchType": "ApplyConfiguration",
                    "applyConfiguration": {
                        "expression": "Object{metadata: Object.metadata{annotations: "
                        f"{{'{CREATOR_ANNOTATION}': request.userInfo.username}}}}}}"
                    },
                }
            ],
        },
    }


def editors_mutation() -> dict[str, Any]:
    return {
        "apiVersion": ADMISSION,
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": f"{RELEASE}-teamrun-editors"},
        "spec": {
            "failurePolicy": "Fail",
            "reinvocationPolicy": "Never",
            "matchConstraints": _rule("teamruns", "UPDATE"),
            # Holding, cancelling or retaining a run makes nobody its author.
            "matchConditions": [{"name": "work-changed", "expression": WORK_CHANGED}],
            "mutations": [
                {
                    "patchType": "ApplyConfiguration",
                    "applyConfiguration": {
                        "expression": "Object{metadata: Object.metadata{annotations: "
                        f"{{'{EDITORS_ANNOTATION}': {EDITORS_AFTER}}}}}}}"
                    },
                }
            ],
        },
    }


def creator_policy() -> dict[str, Any]:
    return {
        "apiVersion": ADMISSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": f"{RELEASE}-teamrun-creator"},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": _rule("teamruns", "CREATE", "UPDATE"),
            "validations": [
                _check(
                    "request.operation != 'CREATE' || "
                    f"{_annotation('object')} in ['', request.userInfo.username]",
                    f"the {CREATOR_ANNOTATION} annotation records who created the TeamRun: it "
                    "can only be your own user name (the API server sets it)",
                ),
                _check(
                    "request.operation != 'UPDATE' || "
                    f"{_annotation('object')} == {_annotation('oldObject')}",
                    f"the {CREATOR_ANNOTATION} annotation cannot be changed",
                ),
                _check(
                    "request.operation != 'CREATE' || "
                    f"{_annotation('object', EDITORS_ANNOTATION)} == ''",
                    f"the {EDITORS_ANNOTATION} annotation records who changed what a TeamRun "
                    "executes (the API server sets it): a new TeamRun has none",
                ),
                _check(
                    "request.operation != 'UPDATE' || !request.userInfo.username.contains('\\n') "
                    f"|| !({WORK_CHANGED})",
                    "your user name has a line break: the API server cannot record it as one of "
                    f"the TeamRun's editors ({EDITORS_ANNOTATION} holds one name per line), so "
                    "it cannot let you change what the TeamRun executes",
                ),
                _check(
                    "request.operation != 'UPDATE' || "
                    f"{_annotation('object', EDITORS_ANNOTATION)} in "
                    f"[{EDITORS_BEFORE}, {EDITORS_AFTER}]",
                    f"the {EDITORS_ANNOTATION} annotation cannot be changed: the API server "
                    "appends whoever changes what the TeamRun executes",
                ),
            ],
        },
    }


def _same_oma_annotations() -> str:
    """The oma.dev/ annotations (the operator trusts some, e.g. its watchdog's) unchanged,
    whatever the order of the maps."""
    old, new = "oldObject.metadata.annotations", "object.metadata.annotations"
    return (
        f"(!has({old}) || {old}.all(k, !k.startsWith('oma.dev/') || "
        f"(has({new}) && k in {new} && {new}[k] == {old}[k]))) && "
        f"(!has({new}) || {new}.all(k, !k.startsWith('oma.dev/') || "
        f"(has({old}) && k in {old})))"
    )


# Who keeps a runner pod's status and deletes it as Kubernetes itself does: the node that runs
# it (the kubelet: the NodeRestriction plugin holds it to its own pods), the scheduler, and the
# controllers (node lifecycle, pod and namespace garbage collection, disruption conditions),
# which act as service accounts of kube-system (kube-controller-manager
# --use-service-account-credentials) or, without that flag, as system:kube-controller-manager.
KUBERNETES_ITSELF = (
    "(has(request.userInfo.groups) && 'system:nodes' in request.userInfo.groups) || "
    "request.userInfo.username in ['system:kube-scheduler', 'system:kube-controller-manager'] || "
    "request.userInfo.username.startsWith('system:serviceaccount:kube-system:')"
)
SUBRESOURCE = "(has(request.subResource) ? request.subResource : '')"
_ENDED = "['Succeeded', 'Failed']"


def _has_label(obj: str, key: str) -> str:
    return f"(has({obj}.metadata.labels) && '{key}' in {obj}.metadata.labels)"


def runner_pods_policy() -> dict[str, Any]:
    """A runner pod's end is a TeamRun attempt's end: only the operator makes such pods or
    changes what they run, only Kubernetes itself writes their status, and only the operator
    or Kubernetes deletes a live one (an eviction stays open: the Eviction API deletes the pod
    without this policy, and a drain is a disruption)."""
    same_labels = " && ".join(
        f"{_label('oldObject', k)} == {_label('object', k)}"
        f" && {_has_label('oldObject', k)} == {_has_label('object', k)}"
        for k in POD_LABELS
    )
    # What others may still do to a runner pod: metadata the garbage collector and tools touch
    # (owner references, finalizers, other labels and annotations); never its spec (image,
    # activeDeadlineSeconds, ephemeral containers), its oma labels or oma annotations.
    harmless = (
        f"request.operation == 'UPDATE' && {SUBRESOURCE} == '' && "
        f"object.spec == oldObject.spec && {same_labels} && {_same_oma_annotations()}"
    )
    old_phase = "oldObject.status.phase"
    ended = f"has(oldObject.status) && has({old_phase}) && {old_phase} in {_ENDED}"
    return {
        "apiVersion": ADMISSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": f"{RELEASE}-runner-pods"},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": _rule(
                ["pods", "pods/ephemeralcontainers", "pods/status"],
                "CREATE",
                "UPDATE",
                "DELETE",
                group="",
                version="v1",
            ),
            # Every other pod is left alone (and a failing policy cannot stop it). A label with
            # an empty value marks a runner pod too: the operator watches the key.
            "matchConditions": [
                {
                    "name": "runner-pod",
                    "expression": "(request.operation != 'DELETE' && "
                    f"{_has_label('object', POD_LABELS[0])}) || "
                    "(request.operation != 'CREATE' && "
                    f"{_has_label('oldObject', POD_LABELS[0])})",
                }
            ],
            "validations": [
                _check(
                    f"request.operation == 'DELETE' || {SUBRESOURCE} == 'status' || "
                    f"({harmless}) || {MAY_START}",
                    f"only the oma operator creates runner pods or changes what they run (a pod "
                    f"labelled {POD_LABELS[0]}: creating one, labelling one, changing its spec, "
                    f"its oma.dev/ labels or annotations, or adding an ephemeral container needs "
                    f"the '{START_VERB}' verb on teamruns.{GROUP}): the operator records how a "
                    "TeamRun's attempt ended from such a pod",
                ),
                _check(
                    f"{SUBRESOURCE} != 'status' || {KUBERNETES_ITSELF} || {MAY_START}",
                    "only the node that runs a runner pod (and Kubernetes' own controllers) "
                    "writes its status: the operator records how a TeamRun's attempt ended "
                    "from it",
                ),
                _check(
                    f"request.operation != 'DELETE' || ({ended}) || {KUBERNETES_ITSELF} || "
                    f"{MAY_START}",
                    "only the oma operator deletes a running runner pod (deleting one ends its "
                    f"TeamRun's attempt; it needs the '{START_VERB}' verb on teamruns.{GROUP}): "
                    "suspend or cancel the run instead (oma suspend / oma cancel), or evict "
                    "the pod (a drain) where a disruption is meant",
                ),
            ],
        },
    }


SPEC = "object.spec"
_ENV = f"(has({SPEC}.runner) && has({SPEC}.runner.env) ? {SPEC}.runner.env : [])"
# The Secrets and ConfigMaps a TeamRun hands to its runner pod, by name, each once.
SECRET_NAMES = (
    f"((has({SPEC}.store.redis) ? [{SPEC}.store.redis.urlSecretRef.name] : []) + "
    f"(has({SPEC}.store.postgres) ? [{SPEC}.store.postgres.dsnSecretRef.name] : []) + "
    f"{SPEC}.team.agents.filter(a, has(a.model.apiKeySecretRef))"
    ".map(a, a.model.apiKeySecretRef.name) + "
    f"(has({SPEC}.coordinator) && has({SPEC}.coordinator.model.apiKeySecretRef) ? "
    f"[{SPEC}.coordinator.model.apiKeySecretRef.name] : []) + "
    f"{_ENV}.filter(e, has(e.valueFrom) && has(e.valueFrom.secretKeyRef))"
    ".map(e, e.valueFrom.secretKeyRef.name)).distinct()"
)
CONFIGMAP_NAMES = (
    f"{_ENV}.filter(e, has(e.valueFrom) && has(e.valueFrom.configMapKeyRef))"
    ".map(e, e.valueFrom.configMapKeyRef.name).distinct()"
)
# An authorizer check costs a third of an expression's CEL budget, and a policy evaluation has
# about 28 of them: one check of the whole namespace, then one per distinct name, this many.
MAX_SECRETS, MAX_CONFIGMAPS = 12, 4


def _may_get(resource: str, name: str | None = None) -> str:
    check = f"authorizer.group('').resource('{resource}').namespace(request.namespace)"
    return check + (f".name({name})" if name else "") + ".check('get').allowed()"


def _reference_checks(variable: str, resource: str, kind: str, limit: int) -> list[dict[str, Any]]:
    names = f"variables.{variable}"
    skip = f"!variables.granting || variables.{variable}ReadAll"
    checks = [
        {
            "expression": f"{skip} || size({names}) <= {limit}",
            "messageExpression": f"'a TeamRun may reference at most {limit} {kind}s, this one "
            f"references ' + string(size({names}))",
            "reason": "Invalid",
        }
    ]
    checks += [
        {
            "expression": f"{skip} || size({names}) <= {k} || "
            + _may_get(resource, f"{names}[{k}]"),
            "messageExpression": f"'you cannot read (get) {kind} ' + {names}[{k}] + ', which "
            "this TeamRun would hand to its runner pod: reference only what you may read'",
            "reason": "Forbidden",
        }
        for k in range(limit)
    ]
    return checks


def references_policy() -> dict[str, Any]:
    """A TeamRun grants its runner pod what it names: its author must be able to read it."""
    return {
        "apiVersion": ADMISSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": f"{RELEASE}-teamrun-references"},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": _rule("teamruns", "CREATE", "UPDATE"),
            "variables": [
                {
                    # Metadata edits (labels, the operator's finalizers) grant nothing new.
                    "name": "granting",
                    "expression": "request.operation == 'CREATE' || object.spec != oldObject.spec",
                },
                {"name": "secrets", "expression": SECRET_NAMES},
                {"name": "secretsReadAll", "expression": _may_get("secrets")},
                {"name": "configMaps", "expression": CONFIGMAP_NAMES},
                {"name": "configMapsReadAll", "expression": _may_get("configmaps")},
            ],
            "validations": [
                *_reference_checks("secrets", "secrets", "Secret", MAX_SECRETS),
                *_reference_checks("configMaps", "configmaps", "ConfigMap", MAX_CONFIGMAPS),
            ],
        },
    }


def _binding(policy: dict[str, Any]) -> dict[str, Any]:
    kind = policy["kind"] + "Binding"
    spec: dict[str, Any] = {"policyName": policy["metadata"]["name"]}
    if kind.startswith("Validating"):
        spec["validationActions"] = ["Deny"]
    return {
        "apiVersion": ADMISSION,
        "kind": kind,
        "metadata": dict(policy["metadata"]),
        "spec": spec,
    }


# (chart value that enables them, documents)
GROUPS: list[tuple[str, list[dict[str, Any]]]] = [
    ("reviewerPolicy", [approval_decisions_policy()]),
    ("creatorPolicy", [creator_mutation(), editors_mutation(), creator_policy()]),
    ("referencePolicy", [references_policy()]),
    ("runnerPodPolicy", [runner_pods_policy()]),
]
VALUES_OF = {"referencePolicy": "teamRuns", "runnerPodPolicy": "teamRuns"}  # else "approvals"


def documents(prefix: str = "oma") -> list[dict[str, Any]]:
    """Every policy and its binding, named ``<prefix>-...``."""
    text = yaml.safe_dump_all(
        _with_bindings([d for _, docs in GROUPS for d in docs]), sort_keys=False
    )
    return list(yaml.safe_load_all(text.replace(RELEASE, prefix)))


def _with_bindings(policies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [doc for policy in policies for doc in (policy, _binding(policy))]


HEADER = (
    "# Generated by `python -m oma_operator.resources.admission` from "
    "oma_operator.resources.admission.\n"
)


def render_deploy() -> str:
    return HEADER + yaml.safe_dump_all(documents(), sort_keys=False)


# MutatingAdmissionPolicy is GA (admissionregistration.k8s.io/v1) from Kubernetes 1.36: on an
# older cluster the chart stops with what to do instead of failing on an unknown kind.
# (KubeVersion, not APIVersions.Has: helm template's default API list lacks the kind.)
CREATOR_POLICY_GUARD = """{{- if semverCompare "<1.36.0-0" .Capabilities.KubeVersion.Version }}
{{- fail (printf "approvals.creatorPolicy needs Kubernetes 1.36 or newer (MutatingAdmissionPolicy, \
admissionregistration.k8s.io/v1); this cluster is %s. Set approvals.creatorPolicy=false: \
TeamRuns asking for approvals.separationOfDuties then end Failed (CreatorUnknown), all others \
run as usual" .Capabilities.KubeVersion.Version) }}
{{- end }}
"""


RUNNER_PODS_BINDING = (
    '  policyName: {{ include "oma.clusterName" . }}-runner-pods\n  validationActions:\n  - Deny\n'
)
# A release's operator makes runner pods in its own namespace (unless it watches all): another
# release elsewhere, whose Role may predate the 'start' verb, is not held to this one's policy.
RELEASE_NAMESPACES = """{{- if not .Values.operator.watchAllNamespaces }}
  matchResources:
    namespaceSelector:
      matchLabels:
        kubernetes.io/metadata.name: {{ .Release.Namespace }}
{{- end }}
"""


def render_chart() -> str:
    parts = [HEADER]
    for value, policies in GROUPS:
        text = yaml.safe_dump_all(_with_bindings(policies), sort_keys=False)
        # One labels line per document: a policy and its binding share a name.
        text = text.replace(
            "\nmetadata:\n  name: ",
            '\nmetadata:\n  labels: {{- include "oma.labels" . | nindent 4 }}\n  name: ',
        )
        text = text.replace(RELEASE, '{{ include "oma.clusterName" . }}')
        values = VALUES_OF.get(value, "approvals")
        condition = f".Values.{values}.{value}"
        guard = ""
        if value == "creatorPolicy":  # true: installed here; "external": installed elsewhere
            condition, guard = f'eq (toString {condition}) "true"', CREATOR_POLICY_GUARD
        if value == "runnerPodPolicy":
            text = text.replace(RUNNER_PODS_BINDING, RUNNER_PODS_BINDING + RELEASE_NAMESPACES)
        parts.append(f"{{{{- if {condition} }}}}\n{guard}---\n{text}{{{{- end }}}}\n")
    return "".join(parts)


def main() -> None:
    for path, text in ((DEPLOY_FILE, render_deploy()), (CHART_FILE, render_chart())):
        if len(sys.argv) > 1 and sys.argv[1] == "--check":
            if path.read_text(encoding="utf-8") != text:
                raise SystemExit(f"{path} is stale: run python -m oma_operator.resources.admission")
            continue
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path.relative_to(REPO)}")


if __name__ == "__main__":
    main()
