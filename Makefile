# Everything runs in a local virtualenv; only Python 3.11+, pip and make are needed.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install demo test test-fuzz test-package test-ui ui-env lint fixtures bench clean

# The tracing UI of `make test-ui` lives in its own venv: Phoenix is heavy and pins many packages.
UI_VENV         ?= .venv-ui
PHOENIX_VERSION ?= 20.26.1
UI_STAMP        := $(UI_VENV)/.installed-phoenix-$(PHOENIX_VERSION)

$(STAMP): pyproject.toml setup.py wt_otel/ingest/_spanindex.c wt_otel/ingest/_wirecheck.c wt_otel/ingest/_utf8.h
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip > $(VENV)/pip.log 2>&1 || (cat $(VENV)/pip.log; exit 1)
	$(BIN)/pip install -q -e '.[test]' >> $(VENV)/pip.log 2>&1 || (cat $(VENV)/pip.log; exit 1)
	touch $(STAMP)

install: $(STAMP)

## demo: the whole loop, local and self-contained (examples/demo): serve + the reference agent, live
## instrumented traffic with one flagged incident, import, replay with the recorded LLM, verdict, result spans
demo: $(STAMP)
	$(BIN)/python -m examples.demo --out out/demo

## test: lint, type check ([tool.mypy] in pyproject.toml), then the default suite (fast; heavy UI integrations
## are behind the `ui` marker)
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/pytest -q

## test-fuzz: the long hypothesis profile of the fuzzing suite (tests/fuzz, marker `fuzz`); the default run
## above uses the fast profile. WT_OTEL_FUZZ_EXAMPLES sets examples per property (default 1500).
test-fuzz: $(STAMP)
	$(BIN)/pytest -q -m fuzz tests/fuzz

## test-package: build the wheel, install it into a fresh venv outside the checkout, run the README quickstart
## from an empty directory (marker `package`, ~30 s)
test-package: $(STAMP)
	$(BIN)/pytest -q -m package tests/e2e/test_wheel_quickstart.py

## ui-env: Arize Phoenix in $(UI_VENV) (once; the stamp names the version); Chromium comes from apt (.ci/run)
$(UI_STAMP):
	$(PYTHON) -m venv $(UI_VENV)
	$(UI_VENV)/bin/pip install -q --upgrade pip > $(UI_VENV)/pip.log 2>&1 || (cat $(UI_VENV)/pip.log; exit 1)
	$(UI_VENV)/bin/pip install -q 'arize-phoenix==$(PHOENIX_VERSION)' >> $(UI_VENV)/pip.log 2>&1 \
		|| (cat $(UI_VENV)/pip.log; exit 1)
	touch $(UI_STAMP)

ui-env: $(UI_STAMP)

## test-ui: integration tests against a real tracing UI (Phoenix from $(UI_VENV), headless Chromium)
test-ui: $(STAMP) $(UI_STAMP)
	WT_OTEL_UI_VENV=$(abspath $(UI_VENV)) $(BIN)/pytest -q -m ui

## fixtures: regenerate producer fixtures with the real instrumentation libraries (needs PyPI)
fixtures:
	bash tests/fixtures/producers/regenerate.sh

## bench: throughput benchmarks that print ratios against the bare baseline; the incident-to-verdict latency
bench: $(STAMP)
	$(BIN)/python bench/import_throughput.py
	$(BIN)/python bench/loop_latency.py

clean:
	rm -rf $(VENV) out build *.egg-info
