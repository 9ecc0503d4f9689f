# The two commands a newcomer needs: `make demo` and `make test`.
# Each creates or updates .venv and installs what it needs.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.phalanx-installed

.PHONY: demo test lint format typecheck pytest bench clean

$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
	@touch $@

## demo: the reference ResNet-50 workload on synthetic data, 2 nodes x 1 process, on this machine
demo: $(STAMP)
	$(BIN)/phalanx run examples/imagenet/job-demo.yml

## test: lint, type-check and the whole test suite
test: lint typecheck pytest

lint: $(STAMP)
	$(BIN)/ruff check src tests examples benchmarks
	$(BIN)/ruff format --check src tests examples benchmarks

format: $(STAMP)
	$(BIN)/ruff format src tests examples benchmarks
	$(BIN)/ruff check --fix src tests examples benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

## bench: phalanx's launch overhead against bare torchrun
bench: $(STAMP)
	$(BIN)/python benchmarks/launch_overhead.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
