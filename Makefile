# Fanline — the commands a newcomer needs. `make help` lists them.
#
#   make run        the whole system on the embedded default (SQLite + tansu)
#   make test       every test, incl. real Cassandra + Kafka when Java is here
#   make infra-up   start real Cassandra 5.0 + Kafka 4.x (from Maven Central)
#   make run-real   the services against them

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PACKAGES := -e shared -e services/social-graph -e services/tweet-store -e services/api -e services/fanout-worker
INFRA  := $(PYTHON) deploy/local/infra.py

.PHONY: help venv run run-real infra-up infra-down infra-status test test-fast lint fmt clean

help:  ## list the commands
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | column -t -s "$$(printf '\t')"

$(STAMP): constraints.txt requirements-dev.txt shared/pyproject.toml services/*/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -c constraints.txt $(PACKAGES) -r requirements-dev.txt
	touch $(STAMP)

venv: $(STAMP)  ## create .venv with every package (done by the other targets on first use)

run: $(STAMP)  ## run everything on the embedded default; API on http://127.0.0.1:8000
	$(BIN)/python deploy/local/system.py

infra-up:  ## start real Cassandra + Kafka on loopback (downloads with Maven on first use)
	$(INFRA) up

infra-down:  ## stop them
	$(INFRA) down

infra-status:  ## are they running?
	$(INFRA) status

run-real: $(STAMP) infra-up  ## run the services against the real Cassandra + Kafka
	$(BIN)/python deploy/local/system.py --real

test: $(STAMP)  ## every test; REQUIRE_REAL_INFRA=1 makes the real-engine tests mandatory
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-fast: $(STAMP)  ## unit tests and the SQLite side only (no engines, no processes)
	$(BIN)/python -m pytest tests/unit -q $(PYTEST_ARGS)

lint: $(STAMP)  ## ruff + mypy
	$(BIN)/ruff check .
	$(BIN)/mypy shared/src services/*/src deploy/local

fmt: $(STAMP)  ## format and fix imports
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:  ## remove the virtualenv, local data and engine state
	rm -rf $(VENV) .data .infra .pytest_cache .mypy_cache .ruff_cache
