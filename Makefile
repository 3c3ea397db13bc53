# Everything runs in a local virtualenv; only Python 3.11+, pip and make are needed.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install demo test test-ui lint fixtures bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip > $(VENV)/pip.log 2>&1 || (cat $(VENV)/pip.log; exit 1)
	$(BIN)/pip install -q -e '.[test]' >> $(VENV)/pip.log 2>&1 || (cat $(VENV)/pip.log; exit 1)
	touch $(STAMP)

install: $(STAMP)

## demo: import the bundled sample dumps into out/scenarios and validate what was written
demo: $(STAMP)
	$(BIN)/wt-otel import examples/dumps/* --out out/scenarios --force
	$(BIN)/wt-otel validate out/scenarios

## test: the default suite (fast; heavy UI integrations are behind the `ui` marker)
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/pytest -q

## test-ui: integration tests against a real tracing UI
test-ui: $(STAMP)
	$(BIN)/pytest -q -m ui

## fixtures: regenerate producer fixtures with the real instrumentation libraries (needs PyPI)
fixtures:
	bash tests/fixtures/producers/regenerate.sh

## bench: throughput benchmarks that print ratios against the bare baseline
bench: $(STAMP)
	$(BIN)/python bench/import_throughput.py

clean:
	rm -rf $(VENV) out build *.egg-info
