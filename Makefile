# Two commands set everything up: `make run` serves the hooks, `make test` runs the whole suite.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
HOOKS_BIND ?= 127.0.0.1:8080

.PHONY: run test bench venv lock slurm-up slurm-down slurm-purge crds clean

venv: $(STAMP)

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(VENV)/bin/python requirements.lock pyproject.toml
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.lock
	touch $@

## Serve the hooks with gunicorn on $(HOOKS_BIND) (Ctrl-C stops it).
run: $(STAMP)
	HOOKS_BIND=$(HOOKS_BIND) exec $(VENV)/bin/gunicorn -c hooks/gunicorn_conf.py 'hooks.app:create_app()'

## Start the real Slurm, run every test, stop Slurm; non-zero on any failure.
test: $(STAMP)
	@rc=0; hack/slurm/up.sh || rc=$$?; \
	if [ $$rc -eq 0 ]; then $(PY) -m pytest $(PYTEST_ARGS) || rc=$$?; \
	else echo "make test: the Slurm harness did not start (exit $$rc); running the suite anyway so the Slurm tests say why" >&2; \
	  $(PY) -m pytest $(PYTEST_ARGS); rc=1; fi; \
	hack/slurm/down.sh || true; exit $$rc

## Benchmarks with the budgets of DESIGN §7 (ratios against a floor or peer); non-zero if a budget is violated.
bench: $(STAMP)
	@command -v wrk >/dev/null || { echo "make bench: installing wrk (load generator) with apt" >&2; \
	  (apt-get install -y -qq wrk >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq wrk; } >/dev/null 2>&1) \
	  || echo "make bench: could not install wrk; the HTTP benchmark falls back to bench/loadgen.py" >&2; }
	$(PY) -m bench $(BENCH_ARGS)

## Re-pin every dependency from a fresh resolve of pyproject.toml.
lock:
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv && .lock-venv/bin/pip install --quiet '.[test]' \
	  && .lock-venv/bin/pip freeze --exclude slinky-metacontroller > requirements.lock; rm -rf .lock-venv

slurm-up:
	hack/slurm/up.sh

slurm-down:
	hack/slurm/down.sh

slurm-purge:
	hack/slurm/down.sh --purge

## Regenerate crds/ from hack/gen_crds.py.
crds: $(STAMP)
	$(PY) hack/gen_crds.py

clean:
	rm -rf $(VENV) .pytest_cache
