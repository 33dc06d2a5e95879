# fleetshare: two commands on a fresh machine — `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv demo test lint typecheck bench format clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/fleetshare scenario run --all
	$(BIN)/fleetshare simulate --out report

lint: $(STAMP)
	$(BIN)/ruff check src tests bench scripts
	$(BIN)/ruff format --check src tests bench scripts
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

test: lint typecheck
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python bench/admission_cycle.py --out bench/results/admission_cycle.json
	$(BIN)/python bench/admission_cycle.py --starvation-guard off --repeat 1 \
		--out bench/results/admission_cycle_guard_off.json
	$(BIN)/python bench/placement_alibaba.py
	$(BIN)/python bench/karpenter_shape.py --out bench/results/karpenter_shape.json
	$(BIN)/python bench/provisioning_real_catalog.py \
		--out bench/results/provisioning_real_catalog.json
	$(BIN)/python -m pip install -q ray
	$(BIN)/python bench/ray_autoscaler.py --out bench/results/ray_autoscaler.json
	$(BIN)/python bench/simulate_speed.py --variant trace --variant static --variant idle50 \
		--variant borrow-quota --variant fair-share --variant no-fair-share \
		--out bench/results/simulate_speed.json
	$(BIN)/python bench/service_throughput.py --out bench/results/service_throughput.json

format: $(STAMP)
	$(BIN)/ruff format src tests bench scripts
	$(BIN)/ruff check --fix src tests bench scripts

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build src/*.egg-info
