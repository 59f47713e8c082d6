# The two commands a newcomer runs: `make dev` (the local stack with a demo) and `make test`.
# Both install what they need first: a virtualenv in .venv and the pinned restate-server in node_modules.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup dev test lint bench clean

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

test: setup
	$(BIN)/ruff check src tests bench examples
	$(BIN)/ruff format --check src tests bench examples
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/pytest

lint: setup
	$(BIN)/ruff check src tests bench examples
	$(BIN)/ruff format --check src tests bench examples
	$(BIN)/mypy
	$(BIN)/lint-imports

bench: setup
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	$(BIN)/python -m bench $(ARGS)

clean:
	rm -rf $(VENV) node_modules .lash
