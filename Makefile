# The two commands a newcomer needs: `make run` and `make test`.
# Each creates .venv and installs what it needs; Go-built Kubernetes tools are
# cached outside the work tree by e2e/tools/build.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DEPS_KEY := $(shell cat pyproject.toml requirements/constraints.txt | sha256sum | cut -c1-16)
STAMP := $(VENV)/.installed-$(DEPS_KEY)
ARGS ?=
PYTEST_ARGS ?=

.PHONY: run test lint tools bench

$(STAMP):
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c requirements/constraints.txt -e '.[test]'
	@rm -f $(VENV)/.installed-* && touch $@

run: $(STAMP)
	$(BIN)/hugepage-extender serve $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

tools:
	@e2e/tools/build >/dev/null

test: lint
	E2E_TOOLS_BIN="$$(e2e/tools/build)" $(BIN)/pytest $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python -m benchmarks $(ARGS)
