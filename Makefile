# Fanline — the commands a newcomer needs. `make help` lists them.
#
#   make run        the whole system on the embedded default (SQLite + tansu)
#   make dev        the development tools too (make test and make lint do it)
#   make test       every test, incl. real Cassandra + Kafka when Java is here
#   make infra-up   start real Cassandra 5.0 + Kafka 4.x (from Maven Central)
#   make run-real   the services against them

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# Two installs into one .venv: what running needs (RUN_STAMP: the packages,
# the embedded broker), then the development tools on top (STAMP: tests,
# lint, browsers, validators, plots). `make run` stops at the first.
RUN_STAMP := $(VENV)/.installed-run
STAMP  := $(VENV)/.installed
# `-e .`: the repository's tooling, deploy.local and bench (pyproject.toml).
PACKAGES := -e shared -e services/social-graph -e services/tweet-store -e services/api -e services/fanout-worker -e tools/fanline-cli -e .
# Operations tools (tests/ops): Go binaries built from the Go module proxy into .venv/bin.
KUBECONFORM_VERSION := v0.7.0
KUSTOMIZE_VERSION   := v5.7.1
# The benchmark's open-loop generator, built from the Go module proxy into bench/.tools; and
# cassandra-stress, which Apache publishes to Maven Central only in its 4.0-alpha2 binary tarball.
VEGETA_VERSION      := v12.12.0
STRESS_VERSION      := 4.0-alpha2
# NODES=3: a three-node Cassandra cluster and three Kafka brokers on 127.0.0.11-13
# (state in .infra-cluster/, ports 9142/9192), beside the single-node pair.
NODES  ?= 1
# SECURE=1: the single-node pair with TLS (client certificates), SASL SCRAM-SHA-512
# and PasswordAuthenticator (state in .infra-secure/, ports 9242/9292), beside the plain one.
SECURE ?= 0
INFRA  := FANLINE_INFRA_NODES=$(NODES) FANLINE_INFRA_SECURE=$(SECURE) $(PYTHON) -m deploy.local.infra

.PHONY: help venv dev run run-real infra-up infra-down infra-status test soak test-fast lint fmt clean browser ops-tools proxy-tools images

help:  ## list the commands
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | column -t -s "$$(printf '\t')"

$(RUN_STAMP): constraints.txt requirements-run.txt pyproject.toml shared/pyproject.toml services/*/pyproject.toml tools/*/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -c constraints.txt $(PACKAGES) -r requirements-run.txt
	touch $(RUN_STAMP)

$(STAMP): $(RUN_STAMP) requirements-dev.txt
	$(BIN)/pip install --quiet --disable-pip-version-check -c constraints.txt -r requirements-dev.txt
	touch $(STAMP)

venv: $(STAMP)  ## create .venv with every package and the development tools (done by the other targets on first use)

dev: $(STAMP)  ## the development tools: tests, lint, Playwright, validators, plots (make test and make lint install them too)

run: $(RUN_STAMP)  ## run everything on the embedded default; API on http://127.0.0.1:8000 (installs only what running needs)
	$(BIN)/python -m deploy.local.system

infra-up:  ## start real Cassandra + Kafka on loopback (NODES=3: a cluster of each; SECURE=1: TLS + auth; Maven download on first use)
	$(INFRA) up

infra-down:  ## stop them
	$(INFRA) down

infra-status:  ## are they running?
	$(INFRA) status

run-real: $(RUN_STAMP) infra-up  ## run the services against the real Cassandra + Kafka (NODES=3: the cluster; SECURE=1: TLS + auth)
	set -a && eval "$$($(INFRA) env)" && set +a && $(BIN)/python -m deploy.local.system --real

browser:  ## Debian's Chromium for the browser tests (Playwright never downloads one)
	@if [ -x /usr/bin/chromium ]; then echo "chromium: $$(/usr/bin/chromium --version 2>/dev/null | head -1)"; \
	else SUDO=$$([ "$$(id -u)" -eq 0 ] || echo sudo); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium; fi

proxy-tools:  ## Debian's nginx and redis-server for the proxy test (tests/e2e/test_proxy.py; never started as services); idempotent
	@if command -v nginx >/dev/null || [ -x /usr/sbin/nginx ]; then :; else SUDO=$$([ "$$(id -u)" -eq 0 ] || echo sudo); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends nginx; fi
	@if command -v redis-server >/dev/null; then :; else SUDO=$$([ "$$(id -u)" -eq 0 ] || echo sudo); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends redis-server; fi
	@echo "proxy tools: $$(PATH=$$PATH:/usr/sbin nginx -v 2>&1), $$(redis-server --version | cut -d' ' -f1-3)"

# The Pod Security Standard evaluator of the API server, as a command (tests/ops/psa).
$(BIN)/psa-check: tests/ops/psa/main.go tests/ops/psa/go.mod tests/ops/psa/go.sum | $(STAMP)
	cd tests/ops/psa && go build -o $(abspath $(BIN))/psa-check .

ops-tools: $(STAMP) $(BIN)/psa-check  ## promtool + prometheus (Debian), kubeconform + kustomize + psa-check (Go) for tests/ops; idempotent
	@command -v promtool >/dev/null || { SUDO=$$([ "$$(id -u)" -eq 0 ] || echo sudo); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends prometheus; }
	@test -x $(BIN)/kubeconform-$(KUBECONFORM_VERSION) || { GOBIN=$(abspath $(BIN)) go install github.com/yannh/kubeconform/cmd/kubeconform@$(KUBECONFORM_VERSION) \
	  && mv $(BIN)/kubeconform $(BIN)/kubeconform-$(KUBECONFORM_VERSION) && ln -sf kubeconform-$(KUBECONFORM_VERSION) $(BIN)/kubeconform; }
	@test -x $(BIN)/kustomize-$(KUSTOMIZE_VERSION) || { GOBIN=$(abspath $(BIN)) go install sigs.k8s.io/kustomize/kustomize/v5@$(KUSTOMIZE_VERSION) \
	  && mv $(BIN)/kustomize $(BIN)/kustomize-$(KUSTOMIZE_VERSION) && ln -sf kustomize-$(KUSTOMIZE_VERSION) $(BIN)/kustomize; }
	@echo "ops tools: $$(promtool --version 2>&1 | head -1 | cut -d' ' -f1-3), kubeconform $(KUBECONFORM_VERSION), kustomize $(KUSTOMIZE_VERSION), psa-check"

test: $(STAMP) browser ops-tools proxy-tools  ## every test; REQUIRE_REAL_INFRA=1 makes the real-engine tests mandatory
	$(BIN)/python tests/run_suite.py $(PYTEST_ARGS)  # waiting overlaps work: see the docstring

soak: $(STAMP)  ## the documented soak alone: FANLINE_SOAK_S (default 600 s) of steady mixed load on the real engines
	REQUIRE_REAL_INFRA=1 $(BIN)/python -m pytest -m soak -q -s $(PYTEST_ARGS)

test-fast: $(STAMP)  ## unit tests and the SQLite side only (no engines, no processes)
	$(BIN)/python -m pytest tests/unit -q $(PYTEST_ARGS)

.PHONY: bench bench-quick bench-tools
bench-tools:  ## vegeta (Go module proxy) and cassandra-stress (Maven Central) into bench/.tools; idempotent
	@test -x bench/.tools/vegeta-$(VEGETA_VERSION) || { GOBIN=$(abspath bench/.tools) go install github.com/tsenart/vegeta/v12@$(VEGETA_VERSION) \
	  && mv bench/.tools/vegeta bench/.tools/vegeta-$(VEGETA_VERSION); }
	@test -f bench/.tools/apache-cassandra-$(STRESS_VERSION)/tools/lib/stress.jar || { \
	  mvn -q -B -Dstyle.color=never dependency:copy -Dartifact=org.apache.cassandra:apache-cassandra:$(STRESS_VERSION):tar.gz:bin -DoutputDirectory=bench/.tools \
	  && tar -xzf bench/.tools/apache-cassandra-$(STRESS_VERSION)-bin.tar.gz -C bench/.tools && rm bench/.tools/apache-cassandra-$(STRESS_VERSION)-bin.tar.gz; } \
	  || echo "cassandra-stress not fetched (needs mvn): the stress scenario will say so"
	@echo "bench tools: vegeta $(VEGETA_VERSION), cassandra-stress $(STRESS_VERSION)"

bench: $(STAMP) bench-tools  ## benchmarks on real Cassandra + Kafka (long): bench/results/ and docs/benchmarks.md
	$(BIN)/pip install --quiet --disable-pip-version-check -c constraints.txt -r requirements-bench.txt
	$(BIN)/python -m bench.run $(BENCH_ARGS)

bench-quick: $(STAMP) bench-tools  ## a few-minute benchmark smoke run (writes bench/results/quick/ only)
	$(BIN)/pip install --quiet --disable-pip-version-check -c constraints.txt -r requirements-bench.txt
	$(BIN)/python -m bench.run --quick $(BENCH_ARGS)

lint: $(STAMP)  ## ruff (rules and formatting) + mypy
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy shared/src services/*/src tools/*/src deploy bench

fmt: $(STAMP)  ## format and fix imports
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

images: $(STAMP)  ## build the four images with docker or podman (ENGINE=…), tagged with the version and dev (TAG=…)
	$(BIN)/python tools/images.py $(if $(TAG),--tag $(TAG))

clean:  ## remove the virtualenv, local data and engine state
	rm -rf $(VENV) .data .infra .pytest_cache .mypy_cache .ruff_cache
