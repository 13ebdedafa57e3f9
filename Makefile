# memory-ledger: make demo | make test | make bench
#   make demo    create .venv, run the bundled scenario on the embedded default (no servers)
#   make test    create .venv, start Kafka, PostgreSQL and Redis on loopback, run every check
#   make bench   benchmarks on the real services (numbers next to their baselines)

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
LOCOMO ?= ../shared/data/locomo/locomo8.json
TEST_WORKERS ?= 2
ENV    := eval "$$(bash deploy/services.sh env)"

include deploy/services.mk

.PHONY: venv demo test test-unit lint schema bench clean

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

demo: venv
	$(BIN)/memledger demo

lint: venv
	$(BIN)/ruff check contracts ledger projections workers tests
	$(BIN)/lint-imports
	$(BIN)/mypy

test-unit: venv
	$(BIN)/pytest tests/unit

test: venv lint services-up
	$(ENV) && $(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile

schema: venv
	$(BIN)/python -m contracts.schema

bench: venv services-up
	$(ENV) && $(BIN)/python -m workers bench all --locomo $(LOCOMO)

clean:
	rm -rf .memledger .memledger-demo .pytest_cache .mypy_cache .ruff_cache
