# The two set-up commands of the README. Each installs what it needs into .venv first.
PYTHON ?= python3.11
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: up test docs

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "rlplane needs Python 3.11 ($(PYTHON) not found; set PYTHON=...)"; exit 1; }
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q -e ".[dev]"
	touch $(STAMP)

## make up: run rlplane on this machine (SQLite and artifacts under ~/.rlplane; no services needed)
up: $(STAMP)
	$(VENV)/bin/rlplane up

## make test: run the whole test suite (needs Postgres on 127.0.0.1:5432, as in CI)
test: $(STAMP)
	$(VENV)/bin/python -m pytest -q

## make docs: regenerate docs/spec.md from the run-spec schema
docs: $(STAMP)
	$(VENV)/bin/python scripts/gen_spec_docs.py
