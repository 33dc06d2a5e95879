# fleetshare: two commands on a fresh machine — `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv demo test lint typecheck bench bench-service format clean kube-bins kueue-bins helm-bin image

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

# etcd, kube-apiserver, kube-scheduler and kube-controller-manager for the operator's tests,
# built from the Go module proxy into ~/.cache/fleetshare/kube/<versions>/ (a no-op when there).
kube-bins:
	bash tools/kube/build.sh >/dev/null

# Kueue's scheduler-performance runner and minimalkueue (sigs.k8s.io/kueue v0.17.0,
# test/performance/scheduler), for bench/kueue_side_by_side.py, built from the Go module proxy
# in a scratch module under ~/.cache/fleetshare/kueue/<version>/ (a no-op when there; about
# 11 min cold on 2 cores); prints the binaries' dir.
kueue-bins:
	bash tools/kueue/build.sh

# helm, for tests/test_operator_chart.py to render the chart (skipped without it), built from
# the Go module proxy into ~/.cache/fleetshare/helm/bin (a no-op when there).
HELM_VERSION := v3.19.0
helm-bin:
	test -x $$HOME/.cache/fleetshare/helm/bin/helm || \
		GOBIN=$$HOME/.cache/fleetshare/helm/bin CGO_ENABLED=0 GOTOOLCHAIN=local \
		go install -ldflags "-s -w" helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

# fleetshare's image (deploy/Containerfile) as localhost/fleetshare:<version>, built with
# Debian's buildah on a base debootstrap makes, as root (apt-get install buildah debootstrap);
# the base and the dependencies are cached under ~/.cache/fleetshare/image, so a change of the
# source rebuilds in seconds (tests/test_image.py runs it; skipped without buildah).
image: $(STAMP)
	PYTHON=$(BIN)/python bash tools/image/build.sh

# The operator's API tests need the binaries: when they cannot be built (no Go >= 1.25) the
# tests are skipped with a warning; when they are there, missing them in a test is an error.
test: lint typecheck
	@if bash tools/kube/build.sh >/dev/null; then \
		FLEETSHARE_KUBE_REQUIRED=1 $(BIN)/python -m pytest -q --durations=20; \
	else \
		echo "WARNING: kube binaries could not be built; the operator API tests are SKIPPED" >&2; \
		$(BIN)/python -m pytest -q --durations=20; \
	fi

bench: $(STAMP)
	$(BIN)/python bench/admission_cycle.py --out bench/results/admission_cycle.json
	$(BIN)/python bench/admission_cycle.py --starvation-guard off --repeat 1 \
		--out bench/results/admission_cycle_guard_off.json
	$(BIN)/python bench/placement_alibaba.py
	$(BIN)/python bench/karpenter_shape.py --out bench/results/karpenter_shape.json
	$(BIN)/python bench/inference_options.py --out bench/results
	$(BIN)/python bench/provisioning_real_catalog.py \
		--out bench/results/provisioning_real_catalog.json
	$(BIN)/python bench/ray_autoscaler.py --out bench/results/ray_autoscaler.json
	$(BIN)/python bench/simulate_speed.py --variant trace --variant static --variant idle50 \
		--variant borrow-quota --variant fair-share --variant no-fair-share \
		--out bench/results/simulate_speed.json
	$(MAKE) bench-service
	$(BIN)/python bench/forecast_philly.py --out bench/results/forecast_philly.json
	$(BIN)/python bench/showcase_choice.py --out bench/results/showcase_choice.json

# the service under load (issue 15's targets), SQLite and PostgreSQL: as it runs by default
# (the loop in a process of its own), then with --loop-in-process (one process), then the
# default at an open load of 1,000 submissions/s (the target's rate)
bench-service: $(STAMP)
	$(BIN)/python bench/service_throughput.py --out bench/results/service_throughput.json
	$(BIN)/python bench/service_throughput.py --loop-in-process \
		--out bench/results/service_throughput_loop_in_process.json
	$(BIN)/python bench/service_throughput.py --rate 1000 \
		--out bench/results/service_throughput_rate1000.json

format: $(STAMP)
	$(BIN)/ruff format src tests bench scripts
	$(BIN)/ruff check --fix src tests bench scripts

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build src/*.egg-info
