# The two commands a newcomer needs: `make run` and `make test`.
# Each creates .venv and installs what it needs; Go-built Kubernetes tools are
# cached outside the work tree by e2e/tools/build, the kind suite's images by
# e2e/kind/images/build.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DEPS_KEY := $(shell cat pyproject.toml requirements/constraints.txt | sha256sum | cut -c1-16)
STAMP := $(VENV)/.installed-$(DEPS_KEY)
ARGS ?=
PYTEST_ARGS ?=
# KIND_E2E: auto runs the kind suite (e2e/kind/run.sh: real kubelets, real
# hugepages) wherever a Docker engine answers or Debian's can be installed and
# started (root), and reports it skipped, by name and reason, only where Docker
# truly cannot run, and never under CI=true (.ci/run): there that fails, saying
# why; 0 leaves it out. Each run's JUnit report is in out/ (out/junit.xml,
# out/kind-e2e/junit.xml): .ci/run prints every skip in them by name at the end.
KIND_E2E ?= auto

.PHONY: run test unit core chart lint tools bench kind-e2e soak image demo

# The extender image (the node agent runs the same one), built offline from the Dockerfile as the
# kind suite builds it (e2e/kind/images/build --extender-only: a debootstrapped Debian with
# python3, wheels built on the host; nothing pulled from a registry), tagged as the chart's
# default: IMAGE_REPOSITORY (values.yaml image.repository) : the chart's appVersion. Root and a
# Docker engine (started, and stopped again, when none answers) as for the kind suite.
APP_VERSION := $(shell sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$$/\1/p' charts/hugepage-extender/Chart.yaml)
IMAGE_REPOSITORY ?= $(shell sed -n '/^image:/,/^[^ ]/s/^  repository: *//p' charts/hugepage-extender/values.yaml)
IMAGE ?= $(IMAGE_REPOSITORY):$(APP_VERSION)
image:
	e2e/kind/images/build --extender-only $(IMAGE)

$(STAMP):
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c requirements/constraints.txt -e '.[test,replay]'
	@rm -f $(VENV)/.installed-* && touch $@

run: $(STAMP)
	$(BIN)/hugepage-extender serve $(or $(ARGS),--example)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

tools:
	@e2e/tools/build >/dev/null
	@e2e/promtool/build >/dev/null

test: lint
	E2E_TOOLS_BIN="$$(e2e/tools/build)" E2E_PROMTOOL="$$(e2e/promtool/build)/promtool" $(BIN)/pytest --ignore-glob='e2e/kind/*' --junitxml=out/junit.xml $(PYTEST_ARGS)
	@if [ "$(KIND_E2E)" != 0 ]; then $(MAKE) --no-print-directory kind-e2e; fi

kind-e2e: $(STAMP)
	PYTHON=$(BIN)/python e2e/kind/run.sh --if-possible

# The local demo (e2e/kind/demo.py): run.sh's kind cluster (images built offline, the host's real
# hugepage pool, root and Docker as for the kind suite), the chart installed, a VM (QEMU) and a
# DPDK pod placed on real hugepages, then `kubectl hugepages explain` for a VM that waits. The
# cluster, the pool and dockerd stay up (its last lines say how to reach and delete it);
# e2e/kind/test_demo.py runs the same steps in the kind suite.
demo: $(STAMP)
	PYTHON=$(BIN)/python e2e/kind/run.sh --demo

# The churn soak (e2e/kind/soak.py) on the kind cluster run.sh builds: SOAK_MINUTES (default 60)
# of VMs, DPDK and plain pods, host consumers and faults; its last line starts with `soak:`.
# The kind suite runs a 5-minute one. Shares the host's hugepage pool: on shared machines run it
# under the kind lock (flock /work/locks/kind.lock make soak).
SOAK_MINUTES ?= 60
soak: $(STAMP)
	SOAK_MINUTES=$(SOAK_MINUTES) PYTHON=$(BIN)/python e2e/kind/run.sh e2e/kind/test_consumers.py -k churn_soak

# The fast loop: lint, types, layering and every test that needs no Go-built
# binary (no control plane, no helm, no kind), less the two marked slow.
unit: lint
	$(BIN)/pytest -q -p no:cacheprovider -m "not slow" --ignore=tests/chart --ignore-glob='e2e/*' $(PYTEST_ARGS)

# The pure core's loop, a few seconds: its tests alone (no lint, no I/O), a tenth of the
# property examples. `make unit` runs them all, with everything else that needs no Go binary.
CORE_TESTS := tests/test_capacity.py tests/test_decision.py tests/test_scoring.py \
	tests/test_sampling.py tests/test_quantity.py tests/test_podrequest.py tests/test_namelist.py \
	tests/test_holds.py tests/test_config.py tests/test_properties.py \
	tests/nodeagent/test_counters.py
core: $(STAMP)
	QUICK_PROPERTIES=1 $(BIN)/pytest -q -p no:cacheprovider $(CORE_TESTS) $(PYTEST_ARGS)

# The chart's lint, render, schema and alert-rule tests (builds the pinned helm and promtool once).
chart: $(STAMP)
	E2E_TOOLS_BIN="$$(e2e/tools/build)" E2E_PROMTOOL="$$(e2e/promtool/build)/promtool" $(BIN)/pytest -q -p no:cacheprovider tests/chart $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python -m benchmarks $(ARGS)
