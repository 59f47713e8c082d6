# The two commands a newcomer runs: `make dev` (the local stack with a demo) and `make test`
# (which also builds the documentation site, mkdocs.yml, into site/ with --strict).
# Both install what they need first: a virtualenv in .venv and the pinned restate-server in node_modules.
PY ?= python3
VENV := .venv
# `make test` runs the suite on this many pytest-xdist workers; most of a test's time is spent waiting
# on a real restate-server, so three workers on two cores keep both busy (docs/test-suite.md).
TEST_WORKERS ?= 3
BIN := $(VENV)/bin

.PHONY: setup dev test lint bench mutation mutation-engine soak clean

setup: $(VENV)/.installed node_modules/.installed

$(VENV)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

dev: setup
	$(BIN)/lash-restate dev

# The suite ends with its 20 slowest tests; docs/test-suite.md keeps the measurements. Compiled
# modules are written (in __pycache__, ignored by git) even where the environment says to write none:
# every test worker and every endpoint a test serves would otherwise compile lash and the tests again.
test: setup
	$(BIN)/ruff check src tests bench examples
	$(BIN)/ruff format --check src tests bench examples
	$(BIN)/mypy
	node_modules/.bin/pyright
	$(BIN)/lint-imports
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet
	PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -n $(TEST_WORKERS) --dist loadgroup --durations=20

lint: setup
	$(BIN)/ruff check src tests bench examples
	$(BIN)/ruff format --check src tests bench examples
	$(BIN)/mypy
	node_modules/.bin/pyright
	$(BIN)/lint-imports

# Ends with one JSON line (the ratios per server) whatever else fails: without the plotting extra
# there is no plot, and without granian only hypercorn is measured.
bench: setup
	-$(BIN)/pip install --quiet -e '.[dev,bench,granian]'
	$(BIN)/python -m bench --json $(ARGS)

# Not part of `make test` (which runs a seeded 24 s slice of it, tests/engine/test_soak.py): MINUTES of
# mixed load with a fault every minute or so, on one server (NODES=1) or on the three-node cluster
# (NODES=3), then a drain; docs/crash-matrix.md records runs.
MINUTES ?= 30
NODES ?= 1

soak: setup
	$(BIN)/python -m tests.engine.soak --minutes $(MINUTES) --nodes $(NODES) $(ARGS)

# Not part of `make test` (which runs a seeded slice, tests/test_mutation_slice.py): mutants of contract/,
# memory/, combinators.py and the engine's records and messages, judged by the fast tests (no server);
# half an hour to an hour on two cores. It fails below
# 95% detected. docs/mutation.md records a run and explains every survivor.
MUTATION_JOBS ?= 2

$(VENV)/.mutation: $(VENV)/.installed
	$(BIN)/pip install --quiet -e '.[dev,mutation]'
	touch $@

# The score of the run in the current directory; fails below 95% detected.
MUTATION_SCORE = mutmut results; mutmut export-cicd-stats; \
	python -c 'import json, sys; s = json.load(open("mutants/mutmut-cicd-stats.json")); \
	  n, k, t, v, u = s["total"], s["killed"], s["timeout"], s["survived"], s["no_tests"]; \
	  print(f"{k + t}/{n} detected ({k} killed, {t} timed out), {v} survived, {u} with no test: {100 * (k + t) / n:.1f}%"); \
	  sys.exit(k + t < 0.95 * n)'

mutation: setup $(VENV)/.mutation
	rm -rf mutants
	$(BIN)/mutmut run --max-children $(MUTATION_JOBS)
	PATH=$(CURDIR)/$(BIN):$$PATH; $(MUTATION_SCORE)

# Not part of `make test` either: mutants of the engine's group, pump, pages, mode and routing
# modules, judged by the conformance suite on every tier and the engine's own tests of them
# (tests/mutation/engine.toml). Each mutant's tests start their own servers, so a whole run takes
# days; `ARGS` narrows it to some mutants (mutmut's names or globs), `SAMPLE=N` (and `SEED`) judges
# N of them drawn at random and scores the sample (tests/mutation/sample.py). docs/mutation.md explains it.
SEED ?= 1
mutation-engine: setup $(VENV)/.mutation
	rm -rf build/mutation-engine
	$(BIN)/python -m tests.mutation.engine_tree build/mutation-engine
	$(BIN)/python -c 'from tests.engine.baseline import materialise; from lash_restate.engine import BASELINE; materialise(BASELINE)'
	cd build/mutation-engine && export PATH=$(CURDIR)/$(BIN):$$PATH LASH_BASELINE_CACHE=$(CURDIR)/.lash && \
	  if [ -n "$(SAMPLE)" ]; then \
	    python -m tests.mutation.sample draw $(SAMPLE) $(SEED) && \
	    mutmut run --max-children $(MUTATION_JOBS) $$(cat mutants/sample.txt); \
	    python -m tests.mutation.sample score; \
	  else mutmut run --max-children $(MUTATION_JOBS) $(ARGS); $(MUTATION_SCORE); fi

clean:
	rm -rf $(VENV) node_modules .lash mutants site
