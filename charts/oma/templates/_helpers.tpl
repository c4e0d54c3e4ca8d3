{{- define "oma.labels" -}}
app.kubernetes.io/name: oma
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "oma.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "oma.operatorName" -}}
{{ .Release.Name }}-operator
{{- end -}}

{{/* Cluster-scoped objects (admission policies, the ClusterRole) carry the namespace too: a
release of the same name in another namespace has its own. */}}
{{- define "oma.clusterName" -}}
{{ .Release.Name }}-{{ .Release.Namespace }}
{{- end -}}

{{- define "oma.runnerServiceAccount" -}}
{{ .Values.runner.serviceAccountName | default (printf "%s-runner" .Release.Name) }}
{{- end -}}


{{- define "oma.checkMetrics" -}}
{{- $m := .Values.metrics -}}
{{- if and $m.enabled (eq (int $m.port) (int .Values.operator.livenessPort)) -}}
{{- fail "metrics.port must differ from operator.livenessPort (both are the operator's)" -}}
{{- end -}}
{{- if and $m.serviceMonitor.enabled (not $m.enabled) -}}
{{- fail "metrics.serviceMonitor.enabled needs metrics.enabled" -}}
{{- end -}}
{{- if and $m.runners.podMonitor.enabled (not $m.runners.enabled) -}}
{{- fail "metrics.runners.podMonitor.enabled needs metrics.runners.enabled" -}}
{{- end -}}
{{- end -}}

{{/* operator.env may not set what the chart sets from its own values. */}}
{{- define "oma.checkOperatorEnv" -}}
{{- $own := dict "POD_ID" "" "OMA_RUNNER_IMAGE" "image.repository/image.tag" "OMA_PROGRESS_SECONDS" "operator.progressSeconds" "OMA_API_QPS" "operator.apiQPS" "OMA_API_BURST" "operator.apiBurst" "OMA_EVENTS" "operator.events" "OMA_CREATOR_POLICY" "approvals.creatorPolicy" "OMA_RUNNER_SERVICE_ACCOUNT" "runner.serviceAccountName" "OMA_RUNNER_IMAGE_PULL_SECRETS" "imagePullSecrets" "OMA_MAX_RUNNING_PER_NAMESPACE" "concurrency.perNamespace" "OMA_MAX_RUNNING_PER_PROVIDER" "concurrency.perProvider" "OMA_LOG_FORMAT" "logging.format" "OMA_LOG_LEVEL" "logging.level" "OMA_TTL_SECONDS_AFTER_FINISHED" "retention.ttlSecondsAfterFinished" "OMA_DELETE_STORE_RECORDS" "retention.deleteStoreRecords" "OMA_RUNNER_OTLP_ENDPOINT" "tracing.otlpEndpoint" "OMA_LEADER_ELECTION" "operator.leaderElection.enabled" "OMA_LEADER_ELECTION_LEASE" "" "OMA_LEADER_ELECTION_NAMESPACE" "" "OMA_LEADER_ELECTION_IDENTITY" "" "OMA_LEASE_DURATION_SECONDS" "operator.leaderElection.leaseDurationSeconds" "OMA_LEASE_RENEW_DEADLINE_SECONDS" "operator.leaderElection.renewDeadlineSeconds" "OMA_LEASE_RETRY_PERIOD_SECONDS" "operator.leaderElection.retryPeriodSeconds" -}}
{{- range .Values.operator.env -}}
{{- if hasKey $own .name -}}
{{- $use := get $own .name -}}
{{- fail (printf "operator.env may not set %s: the chart sets it%s" .name (ternary "" (printf "; use %s" $use) (eq $use ""))) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Leader election: more than one replica needs it, and its durations must keep one leader
(the operator checks them again: lease > renew deadline > 1.2 x retry period). */}}
{{- define "oma.checkLeaderElection" -}}
{{- $le := .Values.operator.leaderElection -}}
{{- if and (gt (int .Values.operator.replicas) 1) (not $le.enabled) -}}
{{- fail "operator.replicas above 1 needs operator.leaderElection.enabled: without it every replica would act" -}}
{{- end -}}
{{- if $le.enabled -}}
{{- if not (lt (float64 $le.renewDeadlineSeconds) (float64 $le.leaseDurationSeconds)) -}}
{{- fail "operator.leaderElection.renewDeadlineSeconds must be under leaseDurationSeconds" -}}
{{- end -}}
{{- if not (lt (mulf 1.2 (float64 $le.retryPeriodSeconds)) (float64 $le.renewDeadlineSeconds)) -}}
{{- fail "operator.leaderElection.retryPeriodSeconds x 1.2 must be under renewDeadlineSeconds" -}}
{{- end -}}
{{- end -}}
{{- end -}}
