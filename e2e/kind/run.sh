#!/usr/bin/env bash
# End-to-end run on a throwaway kind cluster with real kubelets and real hugepages:
#   1. make a Docker engine answer (lib.sh: Debian's docker.io, dockerd started
#      here when none runs, and stopped again by PID),
#   2. build every image offline (e2e/kind/images/build; cached),
#   3. size the host's 2 MiB hugepage pool (put back afterwards, also on failure):
#      the kind nodes share the host's kernel, so every kubelet reports that pool,
#   4. create the cluster (e2e/kind/cluster.yaml; the control plane's own
#      kube-scheduler started through kubeadm's scheduler extraArgs/extraVolumes
#      with the chart's own-mode configuration, e2e/kind/values-own.yaml), give
#      each node a node-local CNI (ptp + host-local for its podCIDR, routes to the
#      others' podCIDRs), load the extender image,
#   5. helm install the chart with e2e/kind/values.yaml,
#   6. run the scenarios (e2e/kind/test_*.py; test_own_scheduler.py last, once
#      the release is uninstalled, installs the chart in own mode),
#   7. collect logs into $ARTIFACTS, delete the cluster, restore the pool, stop
#      what this run started.
#
# Usage: e2e/kind/run.sh [--if-possible] [pytest args...]
#        e2e/kind/run.sh --demo   (make demo) steps 1-4, then e2e/kind/demo.py in place of
#                                 steps 5-6: the chart installed with values-demo.yaml, a VM and a
#                                 DPDK pod on real hugepages, `kubectl hugepages explain` for a pod
#                                 that waits; the cluster stays up (KEEP_CLUSTER defaults to 1)
#   --if-possible  where Docker truly cannot run (no engine answers, and none can be
#                  installed and started: not root, no apt-get), report the suite as
#                  skipped, by name and reason, and exit 0 (make test uses this).
#                  Not under CI=true (.ci/run sets it): there the suite is the
#                  project's central proof, and where it cannot run the run fails,
#                  saying why.
#
# Environment:
#   ARTIFACTS          where logs go (default: out/kind-e2e)
#   CLUSTER            kind cluster name (default: hugepage-e2e)
#   KEEP_CLUSTER=1     leave the cluster (and the hugepage pool, and dockerd) up
#   HUGEPAGES_2M       pages in the host's 2 MiB pool during the run (default 512 = 1Gi)
#   KIND_NODE_IMAGE    node image (default: built offline by e2e/kind/images/build)
#   KIND, HELM         binaries (default: the pinned ones from e2e/tools/build)
#   KUBECTL            kubectl (default: the one built with the node image)
#   PYTHON             Python with the project and pytest (default: .venv/bin/python)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
LOG_PREFIX=e2e/kind
# shellcheck source=images/lib.sh
source "$root/e2e/kind/images/lib.sh"
log() { _log "$*"; }
die() { _log "error: $*"; exit 1; }

optional=0 demo=0
if [[ ${1:-} == --if-possible ]]; then optional=1; shift; fi
if [[ ${1:-} == --demo ]]; then demo=1; shift; KEEP_CLUSTER=${KEEP_CLUSTER:-1}; fi

cluster=${CLUSTER:-hugepage-e2e}
artifacts=${ARTIFACTS:-$root/out/kind-e2e}
release=hugepage-extender
namespace=hugepage-extender
python=${PYTHON:-$root/.venv/bin/python}
pages=${HUGEPAGES_2M:-512}
nr_hugepages=/proc/sys/vm/nr_hugepages
[[ -x $python ]] || die "no Python at $python: run 'make lint' once (it creates .venv), or set PYTHON"
started=$SECONDS
timings=()
phase() { timings+=("$1 $(( SECONDS - phase_started )) s"); log "$1 took $(( SECONDS - phase_started )) s"; phase_started=$SECONDS; }
phase_started=$SECONDS

# --- where Docker truly cannot run: skip by name, or fail under CI -------------------
in_ci() { [[ ${CI:-} =~ ^(1|[Tt]rue|TRUE|yes)$ ]]; }
cannot_run() {
  if in_ci; then
    die "the kind e2e suite cannot run here: $1. CI=$CI: it is the project's central proof (real kubelets, real hugepages) and is never skipped in CI; make a Docker engine available (or run as root with apt-get), or unset CI to have it reported skipped"
  fi
  if (( optional )); then
    log "SKIPPED: the kind e2e suite cannot run here: $1"
    mkdir -p "$artifacts"
    KIND_E2E_SKIP_REASON="kind e2e cannot run here: $1" \
      "$python" -m pytest e2e/kind -rs -p no:cacheprovider -q --junitxml "$artifacts/junit.xml" || true
    exit 0
  fi
  die "$1"
}
if ! { command -v docker >/dev/null 2>&1 && engine_answers; }; then
  if [[ $(id -u) != 0 ]]; then cannot_run "no Docker engine answers, and this user is not root (cannot start dockerd)"; fi
  if ! command -v dockerd >/dev/null 2>&1 && ! command -v apt-get >/dev/null 2>&1; then
    cannot_run "no Docker engine answers, and there is neither dockerd nor apt-get to install Debian's docker.io"
  fi
fi

# --- cleanup, whatever happens ------------------------------------------------------
mkdir -p "$artifacts"
workdir=$(mktemp -d "${TMPDIR:-/tmp}/hugepage-kind.XXXXXX")
kubeconfig=$workdir/kubeconfig # the cluster's admin credentials stay out of $ARTIFACTS
export KUBECONFIG=$kubeconfig
old_pages=""
cluster_created=0
KIND=${KIND:-} HELM=${HELM:-} KUBECTL=${KUBECTL:-}

restore_pages() {
  [[ -n $old_pages ]] || return 0
  echo "$old_pages" > "$nr_hugepages" 2>/dev/null || true
  log "hugepage pool back to $(< "$nr_hugepages") pages (was $old_pages before the run)"
  old_pages=""
}

collect() {
  local rc=$?
  set +e
  if (( cluster_created )); then
    log "collecting logs into $artifacts"
    {
      "$KUBECTL" get nodes -o wide
      "$KUBECTL" get pods -A -o wide
      "$KUBECTL" get events -A --sort-by=.lastTimestamp
    } > "$artifacts/cluster.txt" 2>&1
    "$KUBECTL" get nodes -o yaml > "$artifacts/nodes.yaml" 2>&1
    "$KUBECTL" -n "$namespace" describe pods > "$artifacts/describe-pods.txt" 2>&1
    "$KUBECTL" -n "$namespace" logs -l "app.kubernetes.io/instance=$release" --all-containers --prefix \
      --tail=-1 --max-log-requests=20 > "$artifacts/logs-$release.txt" 2>&1
    "$KUBECTL" -n kube-system logs -l component=kube-scheduler --tail=-1 > "$artifacts/logs-kube-scheduler.txt" 2>&1
    "$HELM" status "$release" -n "$namespace" > "$artifacts/helm-status.txt" 2>&1
    timeout 120 "$KIND" export logs "$artifacts/kind-logs" --name "$cluster" >/dev/null 2>&1
  fi
  if [[ ${KEEP_CLUSTER:-0} == 1 ]]; then
    log "keeping cluster $cluster (KUBECONFIG=$kubeconfig); delete with: $KIND delete cluster --name $cluster"
    log "the hugepage pool stays at $(< "$nr_hugepages") pages (was $old_pages); dockerd ${ENGINE_STARTED_PID:-(not started here)} stays up"
  else
    if (( cluster_created )); then
      "$KIND" delete cluster --name "$cluster" --kubeconfig "$kubeconfig" >/dev/null 2>&1 \
        || log "warning: deleting cluster $cluster failed"
    fi
    rm -rf "$workdir"
    restore_pages
    engine_down
  fi
  log "timings: ${timings[*]/%/;} total $((SECONDS - started)) s"
  if (( rc == 0 )); then log "PASSED"; else log "FAILED (exit $rc; logs in $artifacts)"; fi
  exit "$rc"
}
trap collect EXIT
# Interrupted or timed out: still clean up (the EXIT trap runs on exit).
trap 'exit 130' INT
trap 'exit 143' TERM

# --- engine and images ----------------------------------------------------------------
if ! engine_up; then
  cannot_run "no Docker engine could be started (see the messages above)"
fi
phase "engine"
# QEMU on the host: the consumer outside any pod (test_consumers.py, soak.py).
ensure_commands qemu-system-x86_64:qemu-system-x86 || die "cannot install qemu-system-x86 (the host's outside consumer)"
build_out=$("$root/e2e/kind/images/build") || die "the offline image build failed"
node_image=${KIND_NODE_IMAGE:-$(sed -n 's/^KIND_NODE_IMAGE=//p' <<< "$build_out")}
image=$(sed -n 's/^EXTENDER_IMAGE=//p' <<< "$build_out")
# The tag is shared by every work tree on this machine (and images build without the kind
# lock): pin the image this run built, and point the tag back at it just before loading.
image_id=$(docker image inspect --format '{{.Id}}' "$image")
vm_image=$(sed -n 's/^VM_IMAGE=//p' <<< "$build_out")
dpdk_image=$(sed -n 's/^DPDK_IMAGE=//p' <<< "$build_out")
KUBECTL=${KUBECTL:-$(sed -n 's/^KUBECTL=//p' <<< "$build_out")}
phase "images"

if [[ -z $KIND || -z $HELM ]]; then
  tools_bin=$(e2e/tools/build | tail -n 1)
  KIND=${KIND:-$tools_bin/kind}
  HELM=${HELM:-$tools_bin/helm}
fi
[[ -x $KIND && -x $HELM && -x $KUBECTL ]] || die "missing kind ($KIND), helm ($HELM) or kubectl ($KUBECTL)"
log "kind $("$KIND" version), helm $("$HELM" version --short), kubectl $("$KUBECTL" version --client -o json | "$python" -c 'import json,sys; print(json.load(sys.stdin)["clientVersion"]["gitVersion"])'), node image $node_image"

# --- the host's hugepage pool -----------------------------------------------------------
[[ -w $nr_hugepages ]] || die "cannot size the hugepage pool ($nr_hugepages is not writable)"
old_pages=$(< "$nr_hugepages")
echo "$pages" > "$nr_hugepages"
got=$(< "$nr_hugepages")
[[ $got == "$pages" ]] || die "asked the kernel for $pages 2 MiB pages, got $got (memory too fragmented?)"
log "hugepage pool: $pages pages of 2 MiB (was $old_pages; put back at the end)"

# --- cluster ------------------------------------------------------------------------------
if "$KIND" get clusters 2>/dev/null | grep -qx "$cluster"; then
  log "deleting the leftover cluster $cluster"
  "$KIND" delete cluster --name "$cluster"
fi
# The cluster's own kube-scheduler (kubeadm's static pod) runs with the chart's own-mode
# configuration, as docs/install.md tells kind users: rendered before the cluster exists,
# mounted into the control-plane node, passed with kubeadm's scheduler extraArgs and
# extraVolumes. It calls the extender DaemonSet on its node's 127.0.0.1 (ignorable: until
# test_own_scheduler.py installs that, each call is refused and skipped).
"$HELM" template "$release" charts/hugepage-extender --namespace "$namespace" --values e2e/kind/values-own.yaml \
  --show-only templates/scheduler-configmap.yaml \
  | "$python" -c 'import sys, yaml; sys.stdout.write(yaml.safe_load(sys.stdin)["data"]["scheduler-config.yaml"])' \
  > "$workdir/hugepage-scheduler-config.yaml"
"$python" - "$workdir/hugepage-scheduler-config.yaml" > "$workdir/cluster.yaml" <<'PY'
import sys, yaml
config = sys.argv[1]
cluster = yaml.safe_load(open("e2e/kind/cluster.yaml"))
path = "/etc/kubernetes/hugepage-scheduler-config.yaml"
(control_plane,) = [n for n in cluster["nodes"] if n["role"] == "control-plane"]
control_plane["extraMounts"] = [{"hostPath": config, "containerPath": path, "readOnly": True}]
cluster.setdefault("kubeadmConfigPatches", []).append(yaml.safe_dump({
    "kind": "ClusterConfiguration",
    "scheduler": {
        "extraArgs": [{"name": "config", "value": path}],
        "extraVolumes": [{"name": "hugepage-scheduler-config", "hostPath": path, "mountPath": path,
                          "readOnly": True, "pathType": "File"}],
    },
}))
yaml.safe_dump(cluster, sys.stdout, sort_keys=False)
PY
cp "$workdir/hugepage-scheduler-config.yaml" "$artifacts/own-scheduler-config.yaml"
log "creating cluster $cluster ($node_image)"
cluster_created=1
"$KIND" create cluster --name "$cluster" --config "$workdir/cluster.yaml" --image "$node_image" \
  --kubeconfig "$kubeconfig" --retain
phase "cluster create"

# Node-local CNI in kindnetd's place (cluster.yaml disables kind's default CNI):
# each node gets a ptp + host-local conflist for its own podCIDR and a route to
# every other node's podCIDR via that node's address on the kind network.
"$KUBECTL" wait --for=jsonpath='{.spec.podCIDR}' nodes --all --timeout=120s >/dev/null \
  || die "the nodes got no podCIDR"
mapfile -t node_rows < <("$KUBECTL" get nodes -o jsonpath='{range .items[*]}{.metadata.name} {.spec.podCIDR} {.status.addresses[?(@.type=="InternalIP")].address}{"\n"}{end}')
for row in "${node_rows[@]}"; do
  read -r name cidr _ <<< "$row"
  docker exec -i "$name" sh -c 'mkdir -p /etc/cni/net.d && cat > /etc/cni/net.d/10-hugepage-e2e.conflist' <<EOF
{
  "cniVersion": "0.4.0",
  "name": "hugepage-e2e",
  "plugins": [
    {
      "type": "ptp",
      "ipMasq": false,
      "mtu": 1500,
      "ipam": {"type": "host-local", "ranges": [[{"subnet": "$cidr"}]], "routes": [{"dst": "0.0.0.0/0"}]}
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  for other in "${node_rows[@]}"; do
    read -r other_name other_cidr other_ip <<< "$other"
    [[ $other_name == "$name" ]] && continue
    docker exec "$name" ip route replace "$other_cidr" via "$other_ip"
  done
done
"$KUBECTL" wait --for=condition=Ready nodes --all --timeout=180s >/dev/null || die "the nodes did not become Ready"
"$KUBECTL" -n kube-system rollout status deployment/coredns --timeout=180s >/dev/null || die "coredns did not become ready"
phase "cni + nodes ready"

docker tag "$image_id" "$image"
# The same image under the chart's default name too (values.yaml image.repository, the chart's
# appVersion): the docs' install block (e2e/kind/test_docs_run.py) installs with no values.
chart_image="$(sed -n '/^image:/,/^[^ ]/s/^  repository: *//p' charts/hugepage-extender/values.yaml):$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/hugepage-extender/Chart.yaml)"
docker tag "$image_id" "$chart_image"
# One `docker save` of them all: the VM and DPDK images share their layers.
"$KIND" load docker-image "$image" "$chart_image" "$vm_image" "$dpdk_image" --name "$cluster" >/dev/null
phase "image load"

# The environment the scenarios (and the demo) read.
export KIND_E2E_KUBECONFIG=$kubeconfig KIND_E2E_REQUIRED=1 KIND_E2E_CLUSTER=$cluster KIND_E2E_HUGEPAGES_2M=$pages \
  KIND_E2E_ARTIFACTS=$artifacts KIND_E2E_VM_IMAGE=$vm_image KIND_E2E_DPDK_IMAGE=$dpdk_image HELM KUBECTL

if (( demo )); then
  "$python" -m e2e.kind.demo
  phase "demo"
  exit 0
fi

# --- install ----------------------------------------------------------------------
log "installing the chart"
"$HELM" install "$release" charts/hugepage-extender --namespace "$namespace" --create-namespace \
  --values e2e/kind/values.yaml --wait --timeout 5m
"$HELM" get notes "$release" -n "$namespace" > "$artifacts/notes.txt"
phase "helm install"

# --- scenarios --------------------------------------------------------------------
log "running the scenarios"
"$python" -m pytest e2e/kind -v -rA -s -p no:cacheprovider --junitxml "$artifacts/junit.xml" "$@"
phase "scenarios"
