# Shared by e2e/kind/images/build and e2e/kind/run.sh (source it; bash).
#
# engine_up     makes `docker` reach an engine: uses one that answers, else
#               installs Debian's docker.io when missing (root, apt) and starts
#               dockerd in the background with the capability-dropping runtime
#               wrapper (runc-wrapper) as its default runtime. Sets
#               ENGINE_STARTED_PID when it started one.
# engine_down   stops the dockerd that engine_up started (by PID), and only it.
# cache_root    where everything built is kept, outside the work tree.

HUGEPAGE_E2E_CACHE=${HUGEPAGE_E2E_CACHE:-${HUGEPAGE_EXTENDER_KIND_CACHE:-$HOME/.cache/hugepage-extender/kind}}
ENGINE_STARTED_PID=${ENGINE_STARTED_PID:-}
_images_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

_log() { printf '%s: %s\n' "${LOG_PREFIX:-e2e/kind}" "$*" >&2; }

sha256_of() { sha256sum | cut -d' ' -f1; }

# ensure_commands cmd:package ...: apt-get install the packages of missing commands.
ensure_commands() {
  local pair missing=()
  for pair in "$@"; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
  done
  ((${#missing[@]})) || return 0
  if [[ $(id -u) != 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
    _log "missing ${missing[*]}, and no apt-get as root to install them"
    return 1
  fi
  _log "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null; }
}

engine_answers() { timeout 20 docker info >/dev/null 2>&1; }

engine_up() {
  if command -v docker >/dev/null 2>&1 && engine_answers; then
    _log "using the running Docker engine ($(docker info --format '{{.ServerVersion}}, default runtime {{.DefaultRuntime}}' 2>/dev/null))"
    return 0
  fi
  if ! command -v dockerd >/dev/null 2>&1; then
    if [[ $(id -u) != 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
      _log "no Docker engine answers, and Debian's docker.io cannot be installed here (needs root and apt-get)"
      return 1
    fi
    _log "installing Debian's docker.io, debootstrap and iptables"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io debootstrap iptables >/dev/null 2>&1 \
      || { apt-get update -q >/dev/null 2>&1 \
           && DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io debootstrap iptables >/dev/null; } \
      || { _log "apt-get install docker.io failed"; return 1; }
  fi
  command -v docker >/dev/null 2>&1 || { _log "docker.io installed no docker client"; return 1; }
  local state=$HUGEPAGE_E2E_CACHE/engine
  mkdir -p "$state"
  install -m 0755 "$_images_dir/runc-wrapper" "$state/runc-wrapper"
  local runc
  runc=$(command -v runc) || { _log "no runc (docker.io should bring it)"; return 1; }
  # The wrapper execs the real runc; the engine's own containerd is started by dockerd.
  # In its own session, so that a signal to the run's process group (Ctrl-C, a CI
  # timeout) leaves the engine up for the cleanup, which then stops it by PID.
  _log "starting dockerd (log: $state/dockerd.log)"
  rm -f "$state/dockerd.pid"
  HUGEPAGE_E2E_RUNC=$runc setsid dockerd \
    --add-runtime "hugepage-e2e-runc=$state/runc-wrapper" \
    --default-runtime hugepage-e2e-runc \
    --pidfile "$state/dockerd.pid" \
    >"$state/dockerd.log" 2>&1 </dev/null &
  ENGINE_STARTED_PID=$!
  local i
  for ((i = 0; i < 60; i++)); do
    if engine_answers; then
      # setsid forks when it leads a process group: the daemon's own PID is in its pidfile.
      [[ -s $state/dockerd.pid ]] && ENGINE_STARTED_PID=$(< "$state/dockerd.pid")
      _log "dockerd $ENGINE_STARTED_PID is up ($(docker info --format '{{.ServerVersion}}, {{.Driver}}, cgroup {{.CgroupVersion}} {{.CgroupDriver}}' 2>/dev/null))"
      return 0
    fi
    if ! kill -0 "$ENGINE_STARTED_PID" 2>/dev/null; then
      _log "dockerd exited; its log:"; tail -n 20 "$state/dockerd.log" >&2
      ENGINE_STARTED_PID=""
      return 1
    fi
    sleep 1
  done
  _log "dockerd did not answer within 60 s; its log:"; tail -n 20 "$state/dockerd.log" >&2
  engine_down
  return 1
}

engine_down() {
  [[ -n $ENGINE_STARTED_PID ]] || return 0
  local pid=$ENGINE_STARTED_PID i
  ENGINE_STARTED_PID=""
  kill -0 "$pid" 2>/dev/null || return 0
  _log "stopping dockerd $pid (started by this run)"
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 60; i++)); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 1
  done
  _log "dockerd $pid did not stop in 60 s: killing it"
  kill -KILL "$pid" 2>/dev/null || true
}
