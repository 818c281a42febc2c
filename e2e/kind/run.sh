#!/usr/bin/env bash
# End-to-end run on a throwaway kind cluster (needs a Docker engine):
#   1. build the extender image from the Dockerfile,
#   2. create the cluster (e2e/kind/cluster.yaml) and load the image,
#   3. helm install the chart with e2e/kind/values.yaml (secondary scheduler,
#      HTTPS + client certificates),
#   4. run the placement scenarios (e2e/kind/test_kind.py),
#   5. collect logs into $ARTIFACTS, and delete the cluster.
#
# Usage: e2e/kind/run.sh [pytest args...]
#
# Environment:
#   ARTIFACTS        where logs go (default: out/kind-e2e)
#   CLUSTER          kind cluster name (default: hugepage-e2e)
#   KEEP_CLUSTER=1   leave the cluster running afterwards
#   KIND_NODE_IMAGE  node image (default: kind v0.33.0's default, Kubernetes v1.37.0)
#   KIND, HELM       binaries (default: the pinned ones from e2e/tools/build,
#                    built if missing; else from PATH)
#   KUBECTL          kubectl (default: kubectl on PATH)
#   PYTHON           Python with the project and pytest (default: .venv/bin/python)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"

log() { printf 'e2e/kind: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

cluster=${CLUSTER:-hugepage-e2e}
artifacts=${ARTIFACTS:-$root/out/kind-e2e}
node_image=${KIND_NODE_IMAGE:-kindest/node:v1.37.0@sha256:a1ed56cfb0e7b93589bdf97c8cd566405a265939e3620fc4f5de89adff580ae5}
image=hugepage-extender:e2e
release=hugepage-extender
namespace=hugepage-extender
python=${PYTHON:-$root/.venv/bin/python}
kubectl=${KUBECTL:-kubectl}

# --- tools ------------------------------------------------------------------------
command -v docker >/dev/null || die "kind e2e needs a Docker engine: no docker command on PATH"
docker info >/dev/null 2>&1 || die "kind e2e needs a Docker engine: 'docker info' failed (is the daemon running?)"
if [[ -z ${KIND:-} || -z ${HELM:-} ]]; then
  tools_bin=""
  if command -v go >/dev/null 2>&1 || [[ -x /usr/local/go/bin/go ]]; then
    # Builds on a cache miss (minutes), reuses the cached binaries otherwise.
    tools_bin=$(e2e/tools/build | tail -n 1)
  fi
  KIND=${KIND:-${tools_bin:+$tools_bin/kind}}
  HELM=${HELM:-${tools_bin:+$tools_bin/helm}}
  KIND=${KIND:-$(command -v kind || true)}
  HELM=${HELM:-$(command -v helm || true)}
fi
[[ -x ${KIND:-} ]] || die "no kind binary (set KIND, or install Go so e2e/tools/build can build it)"
[[ -x ${HELM:-} ]] || die "no helm binary (set HELM, or install Go so e2e/tools/build can build it)"
command -v "$kubectl" >/dev/null || die "no kubectl on PATH (set KUBECTL)"
[[ -x $python ]] || die "no Python at $python: run 'make lint' once (it creates .venv), or set PYTHON"
log "kind $("$KIND" version), helm $("$HELM" version --short), kubectl $("$kubectl" version --client -o json | "$python" -c 'import json,sys; print(json.load(sys.stdin)["clientVersion"]["gitVersion"])')"

mkdir -p "$artifacts"
# The cluster's admin credentials stay out of $ARTIFACTS (CI uploads it).
workdir=$(mktemp -d "${TMPDIR:-/tmp}/hugepage-kind.XXXXXX")
kubeconfig=$workdir/kubeconfig
export KUBECONFIG=$kubeconfig

collect() {
  local rc=$?
  set +e
  log "collecting logs into $artifacts"
  {
    "$kubectl" get nodes -o wide
    "$kubectl" get pods -A -o wide
    "$kubectl" get events -A --sort-by=.lastTimestamp
  } > "$artifacts/cluster.txt" 2>&1
  "$kubectl" get nodes -o yaml > "$artifacts/nodes.yaml" 2>&1
  "$kubectl" -n "$namespace" describe pods > "$artifacts/describe-pods.txt" 2>&1
  for deployment in "$release" "$release-scheduler"; do
    "$kubectl" -n "$namespace" logs "deployment/$deployment" --all-containers --prefix --tail=-1 \
      --max-log-requests=10 > "$artifacts/logs-$deployment.txt" 2>&1
  done
  "$HELM" status "$release" -n "$namespace" > "$artifacts/helm-status.txt" 2>&1
  "$KIND" export logs "$artifacts/kind-logs" --name "$cluster" >/dev/null 2>&1
  if [[ ${KEEP_CLUSTER:-0} == 1 ]]; then
    log "keeping cluster $cluster (KUBECONFIG=$kubeconfig); delete with: $KIND delete cluster --name $cluster"
  else
    "$KIND" delete cluster --name "$cluster" --kubeconfig "$kubeconfig" >/dev/null 2>&1
    rm -rf "$workdir"
  fi
  exit "$rc"
}

# --- image ------------------------------------------------------------------------
log "building $image"
docker build --tag "$image" "$root"

# --- cluster ----------------------------------------------------------------------
# The workers mount this empty directory over /sys/kernel/mm/hugepages (see
# cluster.yaml); it must exist and stay empty.
mkdir -p /tmp/hugepage-extender-kind/no-hugepages
[[ -z $(ls -A /tmp/hugepage-extender-kind/no-hugepages) ]] || die "/tmp/hugepage-extender-kind/no-hugepages must be empty"

if "$KIND" get clusters 2>/dev/null | grep -qx "$cluster"; then
  log "deleting the leftover cluster $cluster"
  "$KIND" delete cluster --name "$cluster"
fi
trap collect EXIT
log "creating cluster $cluster ($node_image)"
"$KIND" create cluster --name "$cluster" --config e2e/kind/cluster.yaml --image "$node_image" \
  --kubeconfig "$kubeconfig" --wait 180s
"$KIND" load docker-image "$image" --name "$cluster"

# --- install ----------------------------------------------------------------------
log "installing the chart"
"$HELM" install "$release" charts/hugepage-extender --namespace "$namespace" --create-namespace \
  --values e2e/kind/values.yaml --wait --timeout 5m
"$HELM" get notes "$release" -n "$namespace" > "$artifacts/notes.txt"

# --- scenarios --------------------------------------------------------------------
log "running the placement scenarios"
KIND_E2E_KUBECONFIG=$kubeconfig \
KIND_E2E_REQUIRED=1 \
HELM=$HELM \
KUBECTL=$kubectl \
  "$python" -m pytest e2e/kind -v -p no:cacheprovider --junitxml "$artifacts/junit.xml" "$@"
