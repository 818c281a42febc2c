{{/*
Names. Kubernetes names are DNS labels, so everything is cut to 63 characters
(the scheduler's names keep room for their "-scheduler" suffix).
*/}}
{{- define "hugepage-extender.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "hugepage-extender.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "hugepage-extender.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
"<fullname>-<suffix>" within 63 characters: the full name gives way, the
suffix (what the object is) stays. Call with (dict "context" $ "suffix" "tls").
*/}}
{{- define "hugepage-extender.suffixed" -}}
{{- $base := include "hugepage-extender.fullname" .context | trunc (int (sub 62 (len .suffix))) | trimSuffix "-" }}
{{- printf "%s-%s" $base .suffix }}
{{- end }}

{{/* The secondary scheduler's objects. */}}
{{- define "hugepage-extender.scheduler.fullname" -}}
{{- include "hugepage-extender.suffixed" (dict "context" . "suffix" "scheduler") }}
{{- end }}

{{- define "hugepage-extender.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "hugepage-extender.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The ServiceAccount the extender runs as: in the sidecar topology its pod's, the
scheduler's (one pod, one ServiceAccount); otherwise the extender's own.
*/}}
{{- define "hugepage-extender.extenderIdentity" -}}
{{- if eq (include "hugepage-extender.topology" .) "sidecar" }}
{{- include "hugepage-extender.scheduler.serviceAccountName" . }}
{{- else }}
{{- include "hugepage-extender.serviceAccountName" . }}
{{- end }}
{{- end }}

{{- define "hugepage-extender.scheduler.serviceAccountName" -}}
{{- if .Values.scheduler.serviceAccount.create }}
{{- default (include "hugepage-extender.scheduler.fullname" .) .Values.scheduler.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.scheduler.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Labels. Selector labels (name, instance, component) never change over the
release's life, since a Deployment's selector is immutable; the full set adds
the version and the chart.
Call with (dict "context" $ "component" "extender").
*/}}
{{- define "hugepage-extender.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hugepage-extender.name" .context }}
app.kubernetes.io/instance: {{ .context.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "hugepage-extender.labels" -}}
helm.sh/chart: {{ include "hugepage-extender.chart" .context }}
{{ include "hugepage-extender.selectorLabels" . }}
app.kubernetes.io/version: {{ .context.Chart.AppVersion | quote }}
app.kubernetes.io/part-of: hugepage-extender
app.kubernetes.io/managed-by: {{ .context.Release.Service }}
{{- with .context.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* An image reference: the digest wins over the tag. Call with (dict "image" .Values.image "default" "<tag>"). */}}
{{- define "hugepage-extender.imageRef" -}}
{{- if .image.digest }}
{{- printf "%s@%s" .image.repository .image.digest }}
{{- else }}
{{- printf "%s:%s" .image.repository (default .default .image.tag) }}
{{- end }}
{{- end }}

{{- define "hugepage-extender.image" -}}
{{- include "hugepage-extender.imageRef" (dict "image" .Values.image "default" .Chart.AppVersion) }}
{{- end }}

{{- define "hugepage-extender.scheduler.image" -}}
{{- include "hugepage-extender.imageRef" (dict "image" .Values.scheduler.image "default" "") }}
{{- end }}

{{/* The extender's config file, exactly the extender's schema (extender/core/config.py). */}}
{{- define "hugepage-extender.configFile" -}}
{{- $config := deepCopy .Values.config }}
{{- /* resourceNames lists every size guarded; resourceName (the chart's default) then goes. */}}
{{- if $config.resourceNames }}
{{- $_ := unset $config "resourceName" }}
{{- end }}
{{- /* The scheduler's own share: the extender tells a scan cut short from a whole one by it. */}}
{{- $_ := set $config "percentageOfNodesToScore" (int .Values.scheduler.percentageOfNodesToScore) }}
{{- toYaml $config }}
{{- end }}

{{/* Every hugepage resource the extender guards: config.resourceNames, else config.resourceName. */}}
{{- define "hugepage-extender.resourceNames" -}}
{{- toJson (.Values.config.resourceNames | default (list .Values.config.resourceName)) }}
{{- end }}

{{/*
Where the extender runs (docs/install.md, "Topology"). topology "" derives it from
scheduler.mode: "sidecar" (a container in each secondary scheduler pod) or
"controlPlane" (a DaemonSet on the control-plane nodes, host network, beside the
cluster's static kube-scheduler). Both are loopback topologies: the scheduler
calls its own extender on 127.0.0.1, and nothing else can reach the verbs.
"service" (a Deployment behind a Service) only when asked for.
*/}}
{{- define "hugepage-extender.topology" -}}
{{- if .Values.topology }}
{{- .Values.topology }}
{{- else if eq .Values.scheduler.mode "own" }}
{{- "controlPlane" }}
{{- else }}
{{- "sidecar" }}
{{- end }}
{{- end }}

{{/*
The scheduler's leader Lease, NAMESPACE/NAME, that the extender follows to lift scheduling gates only
beside the scheduler that holds it (serve --leader-lease; docs/design.md, "Gates"), or "": sidecar, the
secondary scheduler's own Lease when it elects a leader; controlPlane, scheduler.own.leaderLease (kubeadm's
kube-system/kube-scheduler); service, none (no scheduler beside the extender: every replica lifts).
*/}}
{{- define "hugepage-extender.leaderLease" -}}
{{- $topology := include "hugepage-extender.topology" . }}
{{- if and (eq $topology "sidecar") .Values.scheduler.leaderElection.enabled }}
{{- printf "%s/%s" .Release.Namespace (include "hugepage-extender.scheduler.fullname" .) }}
{{- else if eq $topology "controlPlane" }}
{{- .Values.scheduler.own.leaderLease }}
{{- end }}
{{- end }}

{{/* "true" when the scheduler calls its extender on 127.0.0.1 (sidecar, controlPlane). */}}
{{- define "hugepage-extender.loopback" -}}
{{- ne (include "hugepage-extender.topology" .) "service" }}
{{- end }}

{{/*
TLS on the verbs: tls.enabled null derives it, on only for the service topology
(the verbs on a network port); on loopback nothing but the scheduler reaches them
and TLS is optional. tls.clientAuth.enabled null follows TLS. Render "true"/"false".
*/}}
{{- define "hugepage-extender.tlsOn" -}}
{{- if kindIs "bool" .Values.tls.enabled }}
{{- .Values.tls.enabled }}
{{- else }}
{{- eq (include "hugepage-extender.topology" .) "service" }}
{{- end }}
{{- end }}

{{- define "hugepage-extender.mtlsOn" -}}
{{- if kindIs "bool" .Values.tls.clientAuth.enabled }}
{{- .Values.tls.clientAuth.enabled }}
{{- else }}
{{- include "hugepage-extender.tlsOn" . }}
{{- end }}
{{- end }}

{{/* The Service's in-cluster DNS name. */}}
{{- define "hugepage-extender.serviceHost" -}}
{{- printf "%s.%s.svc" (include "hugepage-extender.fullname" .) .Release.Namespace }}
{{- end }}

{{/*
The URL the scheduler calls. Loopback topologies: 127.0.0.1, the extender beside
the scheduler (in its pod, or on its node's host network). Service topology: the
cluster's own kube-scheduler (mode own) runs on the host network, where cluster
DNS names do not resolve, so it needs the Service's pinned clusterIP (or an
explicit urlPrefix); the secondary scheduler uses the Service's DNS name.
*/}}
{{- define "hugepage-extender.urlPrefix" -}}
{{- $scheme := ternary "https" "http" (eq (include "hugepage-extender.tlsOn" .) "true") }}
{{- if .Values.scheduler.extender.urlPrefix }}
{{- .Values.scheduler.extender.urlPrefix | trimSuffix "/" }}
{{- else if eq (include "hugepage-extender.loopback" .) "true" }}
{{- printf "%s://127.0.0.1:%d" $scheme (int .Values.ports.extender) }}
{{- else if eq .Values.scheduler.mode "own" }}
{{- if not .Values.service.clusterIP }}
{{- fail "scheduler.mode=own with topology=service: the cluster's kube-scheduler runs on the host network and cannot resolve Service DNS names; set service.clusterIP to a free IP in the Service CIDR (or set scheduler.extender.urlPrefix)" }}
{{- end }}
{{- $host := .Values.service.clusterIP }}
{{- if contains ":" $host }}
{{- $host = printf "[%s]" $host }}
{{- end }}
{{- printf "%s://%s:%d" $scheme $host (int .Values.ports.extender) }}
{{- else }}
{{- printf "%s://%s:%d" $scheme (include "hugepage-extender.serviceHost" .) (int .Values.ports.extender) }}
{{- end }}
{{- end }}

{{/*
Each namespace's effective mode and needFromMemory, as extender/core/config.py resolves them
(defaults < BEST_OF_K_HUGEPAGE_FIT_FILTER in extender.extraEnv < a namespace's entry), for the
admission policy that marks pods (decision 0005). Renders JSON: default (mode of a namespace not
listed), enforce / shadow / off (listed namespaces by mode), fromMemory (needFromMemory of a
namespace not listed), fromMemoryFlipped (listed namespaces whose needFromMemory differs from it),
runtimeClass (needFromMemoryRuntimeClass of a namespace not listed), runtimeClasses (listed namespaces
that set their own, by name).
*/}}
{{- define "hugepage-extender.namespaceModes" -}}
{{- $default := toString .Values.config.defaults.mode }}
{{- $env := .Values.extender.extraEnv | default dict }}
{{- if hasKey $env "BEST_OF_K_HUGEPAGE_FIT_FILTER" }}
{{- $default = ternary "enforce" "shadow" (has (get $env "BEST_OF_K_HUGEPAGE_FIT_FILTER" | toString | trim | lower) (list "1" "true" "yes" "on")) }}
{{- end }}
{{- $fromMemory := eq (toString (.Values.config.defaults.needFromMemory | default false)) "true" }}
{{- $runtimeClass := toString (.Values.config.defaults.needFromMemoryRuntimeClass | default "") }}
{{- $modes := dict "default" $default "enforce" (list) "shadow" (list) "off" (list) "fromMemory" $fromMemory "fromMemoryFlipped" (list) "runtimeClass" $runtimeClass "runtimeClasses" (dict) }}
{{- range $name, $ns := .Values.config.namespaces }}
{{- $own := $ns | default dict }}
{{- $mode := ternary (toString (get $own "mode")) $default (hasKey $own "mode") }}
{{- $_ := set $modes $mode (append (get $modes $mode) $name) }}
{{- if and (hasKey $own "needFromMemory") (ne (eq (toString (get $own "needFromMemory")) "true") $fromMemory) }}
{{- $_ := set $modes "fromMemoryFlipped" (append (get $modes "fromMemoryFlipped") $name) }}
{{- end }}
{{- if hasKey $own "needFromMemoryRuntimeClass" }}
{{- $_ := set $modes.runtimeClasses $name (toString (get $own "needFromMemoryRuntimeClass")) }}
{{- end }}
{{- end }}
{{- toJson $modes }}
{{- end }}

{{/*
The marker extended resources (decision 0005): the admission policy puts one on each pod of an
enforcing or shadow namespace that may need pages; each selects one entry of the scheduler's
extenders list (managedResources, ignoredByScheduler: true). Never on the extender's own pods.
*/}}
{{- define "hugepage-extender.marker.enforce" -}}hugepage-extender.io/enforce{{- end }}
{{- define "hugepage-extender.marker.shadow" -}}hugepage-extender.io/shadow{{- end }}

{{/*
bind: whether the extender serves the bind verb (bindVerb in the scheduler's
config, --enable-bind, RBAC for pods/binding). bind.enabled null (the default)
derives it from scheduler.mode (decision 0004): on with the chart's secondary
scheduler, whose only extender this is; off in own mode, where the cluster's
scheduler may have other extenders and at most one may bind. An explicit
true or false wins. Renders "true" or "false".
*/}}
{{- define "hugepage-extender.bind" -}}
{{- $explicit := .Values.bind.enabled }}
{{- if kindIs "bool" $explicit }}
{{- $explicit }}
{{- else }}
{{- eq .Values.scheduler.mode "secondary" }}
{{- end }}
{{- end }}

{{/*
TLS material, computed once per render and cached on the root context, so the
Secrets, the checksums and the scheduler's caData all see the same certificates.
Returns JSON (exact bytes, unlike YAML block scalars): ca (the server CA, for caData), cert, key (the extender's server
pair), clientCa, clientCert, clientKey (mTLS). Generated certificates are read
back from the release's Secrets on upgrade (lookup), so they stay stable.
*/}}
{{- define "hugepage-extender.tls" -}}
{{- if not (hasKey . "hugepageExtenderTLS") }}
{{- $tls := .Values.tls }}
{{- $m := dict }}
{{- if eq (include "hugepage-extender.tlsOn" .) "true" }}
{{- $fullname := include "hugepage-extender.fullname" . }}
{{- $mtls := eq (include "hugepage-extender.mtlsOn" .) "true" }}
{{- if eq $tls.source "values" }}
{{- $_ := set $m "ca" (required "tls.ca is required with tls.source=values: the scheduler must get the CA that signed tls.cert" $tls.ca) }}
{{- $_ := set $m "cert" (required "tls.cert is required with tls.source=values" $tls.cert) }}
{{- $_ := set $m "key" (required "tls.key is required with tls.source=values" $tls.key) }}
{{- if $mtls }}
{{- $_ := set $m "clientCa" (required "tls.clientAuth.ca is required with tls.source=values" $tls.clientAuth.ca) }}
{{- $_ := set $m "clientCert" (required "tls.clientAuth.cert is required with tls.source=values" $tls.clientAuth.cert) }}
{{- $_ := set $m "clientKey" (required "tls.clientAuth.key is required with tls.source=values" $tls.clientAuth.key) }}
{{- end }}
{{- else if eq $tls.source "secret" }}
{{- $name := required "tls.existingSecret is required with tls.source=secret" $tls.existingSecret }}
{{- $ca := $tls.caBundle }}
{{- if not $ca }}
{{- $existing := lookup "v1" "Secret" .Release.Namespace $name }}
{{- $ca = (index (default dict $existing.data) "ca.crt") | default "" | b64dec }}
{{- end }}
{{- if not $ca }}
{{- fail (printf "tls.source=secret: no CA for the scheduler (caData). Set tls.caBundle, or give Secret %s/%s a ca.crt (helm template cannot read Secrets: set tls.caBundle there)" .Release.Namespace $name) }}
{{- end }}
{{- $_ := set $m "ca" $ca }}
{{- if $mtls }}
{{- $_ := required "tls.clientAuth.existingSecret is required with tls.source=secret and tls.clientAuth.enabled" $tls.clientAuth.existingSecret }}
{{- end }}
{{- else }}
{{- $server := lookup "v1" "Secret" .Release.Namespace (include "hugepage-extender.suffixed" (dict "context" . "suffix" "tls")) }}
{{- $client := lookup "v1" "Secret" .Release.Namespace (include "hugepage-extender.suffixed" (dict "context" . "suffix" "client-tls")) }}
{{- $sd := default dict $server.data }}
{{- $cd := default dict $client.data }}
{{- $reuse := and (index $sd "tls.crt") (index $sd "tls.key") (index $sd "ca.crt") }}
{{- /* A certificate is reused only for the address it names: the Secret says which
       (the chart's previous version wrote no annotation and named the Service only). */}}
{{- $issuedFor := ternary "127.0.0.1" "service" (eq (include "hugepage-extender.loopback" .) "true") }}
{{- $annotations := default dict (default dict $server.metadata).annotations }}
{{- if ne (get $annotations "hugepage-extender.io/issued-for" | default "service") $issuedFor }}
{{- $reuse = false }}
{{- end }}
{{- if and $reuse $mtls }}
{{- $reuse = and (index $cd "tls.crt") (index $cd "tls.key") (eq (index $cd "ca.crt" | default "") (index $sd "ca.crt")) }}
{{- end }}
{{- if $reuse }}
{{- $_ := set $m "ca" (index $sd "ca.crt" | b64dec) }}
{{- $_ := set $m "cert" (index $sd "tls.crt" | b64dec) }}
{{- $_ := set $m "key" (index $sd "tls.key" | b64dec) }}
{{- if $mtls }}
{{- $_ := set $m "clientCa" (index $cd "ca.crt" | b64dec) }}
{{- $_ := set $m "clientCert" (index $cd "tls.crt" | b64dec) }}
{{- $_ := set $m "clientKey" (index $cd "tls.key" | b64dec) }}
{{- end }}
{{- else }}
{{- $days := int $tls.validityDays }}
{{- $svc := include "hugepage-extender.fullname" . }}
{{- $dns := list $svc (printf "%s.%s" $svc .Release.Namespace) (printf "%s.%s.svc" $svc .Release.Namespace) (printf "%s.%s.svc.%s" $svc .Release.Namespace $tls.clusterDomain) }}
{{- $dns = concat $dns $tls.extraDnsNames }}
{{- $ips := list }}
{{- if eq (include "hugepage-extender.loopback" .) "true" }}
{{- /* The scheduler calls https://127.0.0.1: the certificate names that address. */}}
{{- $ips = append $ips "127.0.0.1" }}
{{- $dns = append $dns "localhost" }}
{{- else if .Values.service.clusterIP }}
{{- $ips = append $ips .Values.service.clusterIP }}
{{- end }}
{{- $ca := genCA (printf "%s-ca" $fullname) $days }}
{{- $cert := genSignedCert (printf "%s.%s.svc" $svc .Release.Namespace) $ips $dns $days $ca }}
{{- $_ := set $m "ca" $ca.Cert }}
{{- $_ := set $m "cert" $cert.Cert }}
{{- $_ := set $m "key" $cert.Key }}
{{- if $mtls }}
{{- $client := genSignedCert (include "hugepage-extender.scheduler.fullname" .) nil nil $days $ca }}
{{- $_ := set $m "clientCa" $ca.Cert }}
{{- $_ := set $m "clientCert" $client.Cert }}
{{- $_ := set $m "clientKey" $client.Key }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- $_ := set . "hugepageExtenderTLS" $m }}
{{- end }}
{{- toJson (get . "hugepageExtenderTLS") }}
{{- end }}

{{/* Secret names holding the extender's server pair and the scheduler's client pair. */}}
{{- define "hugepage-extender.tls.serverSecret" -}}
{{- if eq .Values.tls.source "secret" }}
{{- .Values.tls.existingSecret }}
{{- else }}
{{- include "hugepage-extender.suffixed" (dict "context" . "suffix" "tls") }}
{{- end }}
{{- end }}

{{- define "hugepage-extender.tls.clientSecret" -}}
{{- if eq .Values.tls.source "secret" }}
{{- .Values.tls.clientAuth.existingSecret }}
{{- else }}
{{- include "hugepage-extender.suffixed" (dict "context" . "suffix" "client-tls") }}
{{- end }}
{{- end }}

{{/*
Checks that span several values (the schema checks each value alone).
*/}}
{{- define "hugepage-extender.validate" -}}
{{- if and (eq (include "hugepage-extender.mtlsOn" .) "true") (ne (include "hugepage-extender.tlsOn" .) "true") }}
{{- fail "tls.clientAuth.enabled needs tls.enabled: client certificates are only checked over HTTPS" }}
{{- end }}
{{- $topology := include "hugepage-extender.topology" . }}
{{- if and (eq $topology "sidecar") (ne .Values.scheduler.mode "secondary") }}
{{- fail "topology=sidecar puts the extender in the chart's secondary scheduler pods: it needs scheduler.mode=secondary (with scheduler.mode=own use topology=controlPlane, the default there)" }}
{{- end }}
{{- if and (eq $topology "controlPlane") (ne .Values.scheduler.mode "own") }}
{{- fail "topology=controlPlane runs the extender beside the cluster's own kube-scheduler: it needs scheduler.mode=own (the secondary scheduler carries its extender in its pod: topology=sidecar, the default there)" }}
{{- end }}
{{- if ge (addf .Values.extender.shutdownTimeoutSeconds .Values.extender.drainSeconds) (float64 .Values.terminationGracePeriodSeconds) }}
{{- fail (printf "extender.drainSeconds (%v) plus extender.shutdownTimeoutSeconds (%v) must be under terminationGracePeriodSeconds (%v), or the kubelet kills the extender mid-drain" .Values.extender.drainSeconds .Values.extender.shutdownTimeoutSeconds .Values.terminationGracePeriodSeconds) }}
{{- end }}
{{- if eq (int .Values.ports.extender) (int .Values.ports.probe) }}
{{- fail "ports.extender and ports.probe must differ: the probe port is plain HTTP" }}
{{- end }}
{{- $bind := eq (include "hugepage-extender.bind" .) "true" }}
{{- $timeout := .Values.scheduler.extender.httpTimeout | toString }}
{{- if and $bind (regexMatch "^[0-9]+s$" $timeout) }}
{{- if ge (float64 .Values.bind.timeoutSeconds) (float64 (trimSuffix "s" $timeout)) }}
{{- fail (printf "bind.timeoutSeconds (%v) must be under scheduler.extender.httpTimeout (%s): the scheduler would give up on a bind that may still succeed (the bind verb is on by default with the secondary scheduler; lower bind.timeoutSeconds, or set bind.enabled=false)" .Values.bind.timeoutSeconds $timeout) }}
{{- end }}
{{- end }}
{{- /* An enforcing filter holds a pod's need on at most 16 admitted nodes; more (sampleSize 0 or above 16)
       over-commits a burst unless the bind verb narrows holds: the extender refuses that at start too. */}}
{{- if not $bind }}
{{- $defaults := .Values.config.defaults }}
{{- $policies := dict "config.defaults" (dict) }}
{{- range $name, $ns := .Values.config.namespaces }}
{{- $_ := set $policies (printf "config.namespaces.%s" $name) ($ns | default dict) }}
{{- end }}
{{- range $where, $own := $policies }}
{{- $mode := toString (ternary (get $own "mode") (get $defaults "mode") (hasKey $own "mode")) }}
{{- $k := 3 }}
{{- if hasKey $defaults "sampleSize" }}{{ $k = int (get $defaults "sampleSize") }}{{ end }}
{{- if hasKey $own "sampleSize" }}{{ $k = int (get $own "sampleSize") }}{{ end }}
{{- if and (eq $mode "enforce") (or (eq $k 0) (gt $k 16)) }}
{{- fail (printf "%s.sampleSize: %d with mode enforce admits more nodes than a hold covers (at most 16), so a burst can over-commit a pool; set sampleSize between 1 and 16, or bind.enabled=true" $where $k) }}
{{- end }}
{{- end }}
{{- end }}
{{- if and .Values.networkPolicy.enabled (eq $topology "service") (eq .Values.scheduler.mode "own") (not .Values.networkPolicy.extraExtenderFrom) }}
{{- fail "networkPolicy.enabled with scheduler.mode=own and topology=service: the cluster's kube-scheduler connects from the control-plane nodes' host network; list them in networkPolicy.extraExtenderFrom (e.g. an ipBlock)" }}
{{- end }}
{{- if and (eq .Values.scheduler.mode "secondary") (not .Values.scheduler.image.digest) }}
{{- $tag := .Values.scheduler.image.tag }}
{{- if regexMatch "^v?[0-9]+\\.[0-9]+\\.[0-9]+" $tag }}
{{- $sched := semver $tag }}
{{- $cluster := semver .Capabilities.KubeVersion.Version }}
{{- if or (gt $sched.Major $cluster.Major) (and (eq $sched.Major $cluster.Major) (gt $sched.Minor $cluster.Minor)) }}
{{- fail (printf "scheduler.image.tag %s is newer than the cluster (%s): kube-scheduler must not be newer than kube-apiserver; set scheduler.image.tag to v%d.%d.x" $tag .Capabilities.KubeVersion.Version $cluster.Major $cluster.Minor) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The KubeSchedulerConfiguration. In secondary mode it configures the chart's
own kube-scheduler; in own mode it is the file for the cluster's scheduler.
*/}}
{{- define "hugepage-extender.schedulerConfig" -}}
{{- $tls := include "hugepage-extender.tls" . | fromJson }}
{{- $own := eq .Values.scheduler.mode "own" -}}
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
{{- if $own }}
clientConnection:
  kubeconfig: {{ .Values.scheduler.own.kubeconfig }}
{{- else }}
leaderElection:
  leaderElect: {{ .Values.scheduler.leaderElection.enabled }}
  {{- if .Values.scheduler.leaderElection.enabled }}
  resourceLock: leases
  resourceNamespace: {{ .Release.Namespace }}
  resourceName: {{ include "hugepage-extender.scheduler.fullname" . }}
  leaseDuration: {{ .Values.scheduler.leaderElection.leaseDuration }}
  renewDeadline: {{ .Values.scheduler.leaderElection.renewDeadline }}
  retryPeriod: {{ .Values.scheduler.leaderElection.retryPeriod }}
  {{- end }}
{{- end }}
{{- if $own }}
# The scheduler stops filtering once it has enough feasible nodes (0: its adaptive
# share); the extender sees that window, and when it turns all of it away while
# other nodes would hold the pod it answers an error, so the scheduler tries its
# next nodes (docs/design.md, "The scheduler's window"). 100: every node, slower.
percentageOfNodesToScore: {{ int .Values.scheduler.percentageOfNodesToScore }}
# Every profile calls the extenders below; the marker policy marks pods of these only
# (scheduler.own.schedulerNames), once scheduler.own.active says this file is running.
profiles:
{{- range .Values.scheduler.own.schedulerNames }}
  - schedulerName: {{ . }}
{{- end }}
{{- else }}
profiles:
  - schedulerName: {{ .Values.scheduler.schedulerName }}
    # The scheduler stops filtering once it has enough feasible nodes (0: its
    # adaptive share); the extender sees that window, and when it turns all of it
    # away while other nodes would hold the pod it answers an error, so the
    # scheduler tries its next nodes (docs/design.md, "The scheduler's window").
    # 100: every node, slower.
    percentageOfNodesToScore: {{ int .Values.scheduler.percentageOfNodesToScore }}
    {{- with .Values.scheduler.plugins }}
    plugins:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    {{- with .Values.scheduler.pluginConfig }}
    pluginConfig:
      {{- toYaml . | nindent 6 }}
    {{- end }}
{{- end }}
# Two entries for the one extender (decision 0005), chosen per pod by the marker the admission
# policy adds according to the pod's namespace: an enforcing namespace's pods wait while the
# extender cannot answer (not ignorable), a shadow namespace's pods are placed without it
# (ignorable); pods of off namespaces, and the extender's own, carry no marker and are not sent.
extenders:
{{- range $entry := list "enforce" "shadow" }}
{{- $enforce := eq $entry "enforce" }}
  - urlPrefix: {{ include "hugepage-extender.urlPrefix" $ | quote }}
    filterVerb: filter
    {{- if $enforce }}
    prioritizeVerb: prioritize
    {{- if eq (include "hugepage-extender.bind" $) "true" }}
    # The only binder: a failed bind fails the binding (not ignorable), the pod is retried.
    bindVerb: bind
    {{- end }}
    weight: {{ int $.Values.scheduler.extender.weight }}
    {{- end }}
    # The extender keeps its own node cache: the scheduler sends node names
    # only, not full Node objects (the main cost of extenders at scale).
    nodeCacheCapable: true
    httpTimeout: {{ $.Values.scheduler.extender.httpTimeout }}
    ignorable: {{ not $enforce }}
    managedResources:
      - name: {{ include (printf "hugepage-extender.marker.%s" $entry) $ }}
        ignoredByScheduler: true
    {{- if eq (include "hugepage-extender.tlsOn" $) "true" }}
    enableHTTPS: true
    tlsConfig:
      {{- if ne (include "hugepage-extender.loopback" $) "true" }}
      serverName: {{ include "hugepage-extender.serviceHost" $ }}
      {{- end }}
      caData: {{ required "internal: TLS enabled without a CA" $tls.ca | b64enc }}
      {{- if eq (include "hugepage-extender.mtlsOn" $) "true" }}
      {{- if $own }}
      certFile: {{ $.Values.scheduler.own.clientCertFile }}
      keyFile: {{ $.Values.scheduler.own.clientKeyFile }}
      {{- else }}
      certFile: /etc/hugepage-extender/client/tls.crt
      keyFile: /etc/hugepage-extender/client/tls.key
      {{- end }}
      {{- end }}
    {{- end }}
{{- end }}
{{- end }}

{{/* The node agent's objects, and the namespace its DaemonSet runs in. */}}
{{- define "hugepage-extender.nodeAgent.fullname" -}}
{{- include "hugepage-extender.suffixed" (dict "context" . "suffix" "node-agent") }}
{{- end }}

{{- define "hugepage-extender.nodeAgent.namespace" -}}
{{- default .Release.Namespace .Values.nodeAgent.namespace }}
{{- end }}

{{/*
The extender container, the same in every topology. Call with (dict "context" $
"host" ADDRESS "sidecar" BOOL): host is where the verbs listen (127.0.0.1 in the
loopback topologies, 0.0.0.0 behind a Service); the probe port (healthz, readyz,
metrics: no placement data) always listens on every address, for the kubelet's
probes and Prometheus. sidecar makes it a native sidecar (an init container with
restartPolicy Always): the kubelet starts kube-scheduler only once its startupProbe
(/readyz: the cluster state synced) passes, and stops it after kube-scheduler.
*/}}
{{- define "hugepage-extender.extenderContainer" -}}
{{- $ := .context }}
{{- $tlsOn := eq (include "hugepage-extender.tlsOn" $) "true" }}
{{- $loopback := eq (include "hugepage-extender.loopback" $) "true" -}}
name: extender
image: {{ include "hugepage-extender.image" $ | quote }}
imagePullPolicy: {{ $.Values.image.pullPolicy }}
{{- if .sidecar }}
restartPolicy: Always
{{- end }}
args:
  - serve
  - --in-cluster
  - --config=/etc/hugepage-extender/config/config.yaml
  - --host={{ .host }}
  - --port={{ int $.Values.ports.extender }}
  - --probe-host=0.0.0.0
  - --probe-port={{ int $.Values.ports.probe }}
  - --liveness-socket=hugepage-extender-liveness
  - --shutdown-timeout={{ $.Values.extender.shutdownTimeoutSeconds }}
  - --drain-seconds={{ $.Values.extender.drainSeconds }}
  {{- if eq (include "hugepage-extender.bind" $) "true" }}
  - --enable-bind
  - --bind-timeout-seconds={{ $.Values.bind.timeoutSeconds }}
  {{- end }}
  {{- if $tlsOn }}
  - --tls-cert-file=/etc/hugepage-extender/tls/tls.crt
  - --tls-key-file=/etc/hugepage-extender/tls/tls.key
  {{- if eq (include "hugepage-extender.mtlsOn" $) "true" }}
  - --client-ca-file=/etc/hugepage-extender/client-ca/ca.crt
  {{- end }}
  {{- end }}
  {{- with include "hugepage-extender.leaderLease" $ }}
  # Gates are lifted only beside the scheduler that holds this Lease (its holder is
  # <hostname>_<uuid>; this container shares that hostname).
  - --leader-lease={{ . }}
  {{- end }}
  {{- range $.Values.extender.extraArgs }}
  - {{ . | quote }}
  {{- end }}
env:
  # The extender's own namespace is exempt from its checks (its pods
  # must never wait on it); --extender-namespace defaults to this.
  - name: POD_NAMESPACE
    valueFrom:
      fieldRef:
        fieldPath: metadata.namespace
  # The pod the extender annotates when room frees while pods it turned
  # away wait (--nudge-pod defaults to $POD_NAMESPACE/$POD_NAME): in the
  # sidecar topology the scheduler's own pod, in the others the extender's.
  - name: POD_NAME
    valueFrom:
      fieldRef:
        fieldPath: metadata.name
  - name: LOG_LEVEL
    value: {{ $.Values.extender.logLevel | quote }}
  {{- range $name, $value := $.Values.extender.extraEnv }}
  - name: {{ $name }}
    value: {{ $value | toString | quote }}
  {{- end }}
ports:
  {{- if not $loopback }}
  - name: extender
    containerPort: {{ int $.Values.ports.extender }}
    protocol: TCP
  {{- end }}
  # The verbs of a loopback topology listen on 127.0.0.1 only: no port to
  # declare (kubectl port-forward reaches them, docs/install.md).
  - name: probe
    containerPort: {{ int $.Values.ports.probe }}
    protocol: TCP
{{- with $.Values.startupProbe }}
startupProbe:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $.Values.livenessProbe }}
livenessProbe:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $.Values.readinessProbe }}
readinessProbe:
  {{- toYaml . | nindent 2 }}
{{- end }}
resources:
  {{- toYaml $.Values.resources | nindent 2 }}
securityContext:
  {{- toYaml $.Values.securityContext | nindent 2 }}
volumeMounts:
  - name: extender-config
    mountPath: /etc/hugepage-extender/config
    readOnly: true
  {{- if $tlsOn }}
  - name: extender-tls
    mountPath: /etc/hugepage-extender/tls
    readOnly: true
  {{- if eq (include "hugepage-extender.mtlsOn" $) "true" }}
  - name: extender-client-ca
    mountPath: /etc/hugepage-extender/client-ca
    readOnly: true
  {{- end }}
  {{- end }}
  # The root filesystem is read-only; libraries that want a temp dir get this.
  - name: extender-tmp
    mountPath: /tmp
{{- end }}

{{/* The extender container's volumes (a list's items). */}}
{{- define "hugepage-extender.extenderVolumes" -}}
- name: extender-config
  configMap:
    name: {{ include "hugepage-extender.fullname" . }}
{{- if eq (include "hugepage-extender.tlsOn" .) "true" }}
- name: extender-tls
  secret:
    secretName: {{ include "hugepage-extender.tls.serverSecret" . }}
    items:
      - key: tls.crt
        path: tls.crt
      - key: tls.key
        path: tls.key
{{- if eq (include "hugepage-extender.mtlsOn" .) "true" }}
# Only the CA from the scheduler's client Secret: the extender never
# sees the client's private key.
- name: extender-client-ca
  secret:
    secretName: {{ include "hugepage-extender.tls.clientSecret" . }}
    items:
      - key: ca.crt
        path: ca.crt
{{- end }}
{{- end }}
- name: extender-tmp
  emptyDir:
    sizeLimit: 16Mi
{{- end }}

{{/*
The pod annotations that roll the extender when its config or certificates
change. Call with (dict "context" $ "prefix" P): "" on the extender's own pods,
"extender-" in the scheduler's pods (whose checksum/config is the scheduler's).
*/}}
{{- define "hugepage-extender.extenderChecksums" -}}
checksum/{{ .prefix }}config: {{ include "hugepage-extender.configFile" .context | sha256sum }}
{{- if eq (include "hugepage-extender.tlsOn" .context) "true" }}
checksum/{{ .prefix }}tls: {{ include "hugepage-extender.tls" .context | fromJson | toYaml | sha256sum }}
{{- end }}
{{- end }}

{{/* The scheduling gate the pods of enforcing namespaces wait behind (extender/core/gates.py, GATE). */}}
{{- define "hugepage-extender.gate" -}}
hugepage-extender.io/room
{{- end }}
