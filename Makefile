# taskfleet — every entry point a developer, a user or CI needs.
# Targets delegate to scripts so that logic lives in one place and is testable.

SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: help deps install lint test check crds crds-check bundle bundle-check bench bench-metrics bench-cluster \
        bench-processes bench-provider bench-schedules bench-expiry bench-flows bench-dashboard \
        bench-autoscale bench-coldstart bench-podstart bench-operator bench-operator-memory \
        bench-operator-idle bench-redis-sizing bench-scale soak soak-faults demo demo-local local-demo \
        bench-isolation k8s-bins cluster-up cluster-down images-local e2e-local e2e-heavy e2e e2e-kind-ci \
        kind-node-image kind-up kind-down clean release-tools release release-check release-npm-check \
        test-redis-versions test-redis-py-range bench-operator-outage helm chart-files chart-lint \
        bench-fairness bench-groups \
        node-check e2e-release

help: ## list targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | column -t -s "$$(printf '\t')"

# Debian packages the tests and the local cluster need (idempotent; root on Debian bookworm).
DEB_PACKAGES := redis-server etcd-server containerd runc containernetworking-plugins buildah \
	debootstrap iptables conntrack socat ebtables ethtool iproute2 gcc libc6-dev psmisc procps \
	openssl python3-venv util-linux prometheus tmux chromium chromium-driver docker.io

deps: ## install the Debian packages (skips what is installed)
	@missing=$$(for p in $(DEB_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null \
		| grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing: $$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Both distributions editable (the library with every extra, the operator), then the
# development tools: pyproject's dependency group `dev`, never published (pip >= 25.1).
# Every target that runs the project's Python depends on $(DEV), so it works from a fresh
# clone on its own: the first one installs, and again when a pyproject.toml changes.
DEV := $(VENV)/.installed-dev
define install_dev
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[metrics,dashboard,opentelemetry]' -e ./operator --group dev
	@touch $(DEV)
endef
install: $(BIN)/python ## create .venv: both packages editable with every extra, and the dev tools
	$(install_dev)

$(DEV): pyproject.toml operator/pyproject.toml | $(BIN)/python
	$(install_dev)

lint: $(DEV) ## ruff + mypy --strict
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The fast tier in TEST_WORKERS processes (pytest-xdist; 0 runs it in pytest's own), each
# file's tests in one of them (a module's fixtures, such as the release's two builds, run
# once). Every server a test starts takes a free port and a temp dir; the session's Redis
# and kube-apiserver are per process. The 25 slowest tests are listed at the end.
TEST_WORKERS ?= 2
test: $(DEV) ## fast tests: real redis-server, real processes and signals, real kube-apiserver (TEST_WORKERS=2 processes)
	$(BIN)/pytest tests -m "not npm_install and not node_build" -n $(TEST_WORKERS) --dist loadfile --durations=25

check: deps install lint crds-check bundle-check test test-redis-versions test-redis-py-range node-check e2e-local e2e-kind-ci ## everything CI runs (README's test command)

test-redis-versions: $(DEV) ## the queue's fast tests on Redis 6.2 and Valkey 8.1 (docs/compatibility.md)
	tests/redis_versions.sh

# The Node.js package (clients/node): its dependencies from the lock file (npm ci, from the
# npm registry), then lint, types, unit tests and the tests against a real redis-server,
# with the repository's Python (.venv, from `make install`) for the cross-language ones.
# Then the NestJS module (clients/nestjs, on the package just built): npm ci, lint, tsc, and
# Nest applications against a real redis-server (500 tasks, a drain on SIGTERM, terminus).
# Then the NestJS example (examples/nestjs, on both packages just built, installed as
# copies): npm ci, lint, tsc, and its application (API and processor) and simulated
# provider run as processes against a real redis-server, with no Python. Then the Egg.js
# example (examples/egg): npm ci, and its application booted by egg-mock against a real
# redis-server, the agent's worker drained on close with nothing lost. The Python tests
# that run the built Node client (marked node_build) run after its build, not in make test.
NODE_CHECK_ENV := TASKFLEET_REQUIRE_PYTHON=1
node-check: $(DEV) ## the Node.js package, the NestJS module and example, the Egg.js example: npm ci from their lock files, then npm test (lint, tsc, tests on real Redis)
	@command -v node >/dev/null || { echo "node-check: Node.js >= 20.19 and npm are needed" >&2; exit 2; }
	@node -e 'const [a, b] = process.versions.node.split(".").map(Number); if (a < 20 || (a === 20 && b < 19)) { console.error("node-check: Node.js >= 20.19 is needed, not " + process.version); process.exit(2); }'
	cd clients/node && npm ci --no-audit --no-fund --loglevel=error && $(NODE_CHECK_ENV) npm test
	$(BIN)/pytest tests -m node_build -n 0
	cd clients/nestjs && npm ci --no-audit --no-fund --loglevel=error && npm test
	cd examples/nestjs && npm ci --no-audit --no-fund --loglevel=error && npm test
	cd examples/egg && npm ci --no-audit --no-fund --loglevel=error && npm test

# The newest end is skipped when it is the redis-py .venv already holds (a fresh .venv, as
# in CI, installs the newest allowed): `make test` has just run these tests on that release.
test-redis-py-range: $(DEV) ## the redis-py adapter's and a few queue tests on the oldest and newest redis-py allowed (the newest skipped if .venv has it)
	tests/redis_py_range.sh

# The kind stage of `make check`: the local cluster stopped (two clusters on 2 cores would
# slow both), then on a multi-node kind cluster built without a registry the scenarios
# only it can show (node loss, the operator's handover) and a smoke of the kind path: the
# cluster itself (its nodes, the runtime wrapper's termination sequence, the pod network
# that e2e/kind/network.sh wires, DNS) and a TaskQueue's life through the operator.
# `make e2e` runs the whole suite on kind. What shows nothing a single node cannot runs in
# e2e-local only: pod disruption, scaling and rollout, the 200-page flow, the Node fleet
# (each a repeat here). The nodes get only the images this subset runs (KIND_CI_LOAD; the
# examples' and the Node worker's are 5 of the 8 archives, 1.4 of 2.2 GB).
KIND_CI_TESTS := e2e/test_node_loss.py e2e/test_operator_ha.py e2e/test_cluster.py \
	e2e/test_taskqueue_lifecycle.py
KIND_CI_LOAD := worker redis operator
e2e-kind-ci: $(DEV) ## the kind stage of make check (KIND_IMAGES=local, KIND_CI_TESTS, KIND_CI_LOAD)
	e2e/cluster/down.sh
	KIND_IMAGES=local KIND_LOAD="$(KIND_CI_LOAD)" e2e/kind/run.sh $(KIND_CI_TESTS)

crds: $(DEV) ## regenerate crds/ from the pydantic models (and the chart's copy)
	$(BIN)/python -m taskfleet_operator.crdgen --write crds/
	charts/sync-files.sh

crds-check: $(DEV) ## fail if crds/ drifted from the models
	$(BIN)/python -m taskfleet_operator.crdgen --check crds/

bundle: $(DEV) ## rebuild the script bundle (protocol/bundle/), its manifest and docs/protocol-scripts.md from lua/
	$(BIN)/python -m taskfleet.protocol.bundle --write

bundle-check: $(DEV) ## fail if the committed bundle, manifest or script reference drifted from lua/ and signatures.py
	$(BIN)/python -m taskfleet.protocol.bundle --check

bench: $(DEV) ## throughput and latency (PEERS=1: Python, Node and Go peers, taskfleet's Node rows), then the Redis Cluster figure (see bench/README.md)
	$(BIN)/python -m bench.run
	$(BIN)/python -m bench.cluster
	$(BIN)/python -m bench.isolation

bench-metrics: $(DEV) ## the drain with and without worker metrics, in alternating pairs (PAIRS=6)
	$(BIN)/python -m bench.metrics_ab

bench-fairness: $(DEV) ## groups: a skewed load (one group of 50,000, 99 of 50, 8 slots) fair vs FIFO; 10,000 groups' claim time and memory
	$(BIN)/python -m bench.fairness

bench-groups: $(DEV) ## the drain with every task in one of 100 groups against ungrouped (and BASE_PYTHON's build), rates and CPU per task (PAIRS=3)
	$(BIN)/python -m bench.groups_ab

bench-cluster: $(DEV) ## drain rate and Redis CPU per task per master: one server, a cluster with 1 and 3 queues
	$(BIN)/python -m bench.cluster

bench-isolation: $(DEV) ## --isolation process against threads: the cost per task (no-op handler), and a new child per task
	$(BIN)/python -m bench.isolation

bench-processes: $(DEV) ## a CPU-bound handler with 1 and N worker processes (see bench/README.md)
	$(BIN)/python -m bench.processes

bench-provider: $(DEV) ## fake providers answering 429 past their limit: claim pause vs RetryAfter; 3 queues (2 Python, 1 Node) sharing a quota vs per-queue limits; groups fair by spend (PROVIDER_SHORT=1: 20 s runs)
	$(BIN)/python -m bench.provider
	$(BIN)/python -m bench.provider_shared

bench-schedules: $(DEV) ## triggers/s with 10,000 and 100,000 schedules due every second, exactly-once counted
	$(BIN)/python -m bench.schedules

bench-expiry: $(DEV) ## 200,000 expired tasks at a queue's head: clearing time, longest script call (SLOWLOG), live-task claim latency
	$(BIN)/python -m bench.expiry

bench-flows: $(DEV) ## flows of 10,000 tasks (fan-out, run-time children, a chord, a failing chain): CPU of the longest script call
	$(BIN)/python -m bench.flows

bench-dashboard: $(DEV) ## a dashboard page view's Redis time with 1,000 and 1,000,000 tasks (DASHBOARD_TASKS=...)
	$(BIN)/python -m bench.dashboard

bench-autoscale: $(DEV) ## autoscaled vs fixed fleet on the local cluster: wake from zero, drain, pod-seconds
	e2e/cluster/prepare.sh
	KUBECONFIG=$${TASKFLEET_CACHE:-$$HOME/.cache/taskfleet}/cluster/kubeconfig $(BIN)/python -m bench.autoscale

bench-coldstart: $(DEV) ## a worker's cold start in this venv and with only the worker image's dependencies
	$(BIN)/python -m bench.coldstart

bench-podstart: $(DEV) ## a worker pod's start on the local cluster: pod created -> first task claimed, by phase
	e2e/cluster/prepare.sh
	KUBECONFIG=$${TASKFLEET_CACHE:-$$HOME/.cache/taskfleet}/cluster/kubeconfig $(BIN)/python -m bench.podstart

bench-operator: $(DEV) ## the operator with 50, 200, 1000 TaskQueues on the local cluster: idle CPU, memory, latencies
	e2e/cluster/prepare.sh
	KUBECONFIG=$${TASKFLEET_CACHE:-$$HOME/.cache/taskfleet}/cluster/kubeconfig $(BIN)/python -m bench.operator_scale

bench-operator-memory: $(DEV) ## two operator replicas, 10 create/delete cycles of 1,000 TaskQueues on a real apiserver: RSS per cycle (chart), burst latency
	$(BIN)/python -m bench.operator_memory

bench-operator-idle: $(DEV) ## operator pairs with 1,000 idle TaskQueues each on a real apiserver: each process's idle CPU (BENCH_IDLE_VARIANTS=a=dir,b=dir)
	$(BIN)/python -m bench.operator_idle

bench-operator-outage: $(DEV) ## the operator with 1,000 TaskQueues whose Redis refuses them + 1 healthy: CPU, dead-pod requeue
	$(BIN)/python -m bench.operator_outage

soak: $(DEV) ## 1,000,000 tasks through a small fleet: Redis memory, slowest scripts, accounting (SOAK_TASKS=...)
	$(BIN)/python -m bench.soak

soak-faults: $(DEV) ## BUSY, OOM, restarts and failovers under load, then flows with a 0.1.x worker and SIGKILLs; lost/stuck/stranded (SOAK_FAULTS_CYCLES=..., SOAK_FLOWS_CHAINS=...)
	$(BIN)/python -m bench.soak_faults
	$(BIN)/python -m bench.soak_flows

bench-redis-sizing: $(DEV) ## Redis bytes per pending and per retained task, by payload size (docs/redis.md)
	$(BIN)/python -m bench.redis_sizing

bench-scale: $(DEV) ## costs against the backlog: 10^3..10^6 pending and delayed, 10..10,000 groups, sweeps of 100,000; charts (SCALE_QUICK=1: up to 10^5)
	$(BIN)/python -m bench.scale

local-demo: $(DEV) ## a local worker fleet against a local redis-server (no Kubernetes)
	examples/local-demo.sh

k8s-bins: ## build the pinned Kubernetes components, and the oldest claimed minor's kube-apiserver (cached)
	e2e/cluster/build-k8s.sh
	e2e/cluster/build-k8s.sh --oldest

helm: ## build the pinned helm from its Go module (cached; prints its path)
	e2e/cluster/build-helm.sh

chart-files: ## copy the CRDs, monitoring and admission-policy files into charts/taskfleet
	charts/sync-files.sh

chart-lint: helm ## helm lint --strict on charts/taskfleet, and the copies checked for drift
	charts/sync-files.sh --check
	$$(e2e/cluster/build-helm.sh 2>/dev/null | tail -1) lint --strict charts/taskfleet

cluster-up: ## bring up the local single-node cluster (idempotent)
	e2e/cluster/up.sh

cluster-down: ## tear the local cluster down (idempotent)
	e2e/cluster/down.sh

images-local: ## build the project's images with buildah and import them into containerd
	e2e/cluster/build-images.sh

# The e2e scenarios each work in their own namespace with their own Redis, so they share the
# cluster in E2E_WORKERS processes (pytest-xdist); those marked exclusive (they stop, kill or
# replace the suite's operator, freeze a node or stop its kubelet) run alone afterwards. Both
# parts run whatever the first's outcome.
E2E_WORKERS ?= 2
e2e-local: $(DEV) ## the e2e suite on the local cluster (E2E_WORKERS processes, then the exclusive scenarios alone)
	@rc=0; \
	e2e/run-local.sh -m "not exclusive" -n $(E2E_WORKERS) --dist worksteal --durations=20 || rc=$$?; \
	e2e/run-local.sh -m exclusive --durations=5 || rc=$$?; \
	exit $$rc

# The scenarios make check runs at a size for CI, at their full size here: 20 busy pods
# force-deleted while their workers linger (8 in make check).
HEAVY_E2E := e2e/test_pod_disruption.py -k force_deleted_busy_pods_whose_workers_linger --durations=5
e2e-heavy: $(DEV) ## the e2e scenarios at their full size on the local cluster (TASKFLEET_E2E_FORCE_DELETES, default 20)
	TASKFLEET_E2E_FORCE_DELETES=$${TASKFLEET_E2E_FORCE_DELETES:-20} e2e/run-local.sh $(HEAVY_E2E)

demo-local: ## the demo on the local cluster
	e2e/demo.sh local

# kind: KIND_IMAGES=published (default) pulls kind's node image and the Dockerfiles' bases;
# KIND_IMAGES=local builds every image here and pulls nothing (see e2e/kind/up.sh).
kind-node-image: ## build kind's node image here from the pinned Kubernetes build (no registry)
	e2e/kind/node-image.sh

kind-up: ## create a multi-node kind cluster for the e2e suite (KIND_IMAGES, KIND_WORKERS)
	e2e/kind/up.sh

kind-down: ## delete the kind cluster
	e2e/kind/down.sh

e2e: $(DEV) ## the e2e suite on a multi-node kind cluster (Docker; KIND_IMAGES=local: no registry)
	e2e/kind/run.sh

demo: ## the demo on kind (needs Docker and kind)
	e2e/demo.sh kind

# A release (release/release.py): VERSION=x.y.z, semver; REGISTRY names the images (localhost);
# ALLOW_DIRTY=1 builds a tree with uncommitted changes. Root (buildah), helm (HELM=, else
# e2e/cluster/build-helm.sh), kubectl for kustomize. The build tools: pyproject's `release` group.
VERSION ?=
REGISTRY ?= localhost
RELEASE_FLAGS = $(if $(ALLOW_DIRTY),--allow-dirty)
release-tools: $(BIN)/python
	@$(BIN)/python -m pip install -q --upgrade pip
	@$(BIN)/python -m pip install -q --group release

release: release-tools ## dist/: wheels, sdists, image archives, Helm chart, install.yaml, SHA256SUMS (VERSION=x.y.z)
	$(BIN)/python release/release.py build "$(VERSION)" --registry "$(REGISTRY)" $(RELEASE_FLAGS)

release-check: release ## make release, then check dist/ and build the wheels, sdists and chart again: same bytes
	$(BIN)/python release/release.py verify "$(VERSION)" --rebuild $(RELEASE_FLAGS)

# The npm packages as a team installs them (tests/release/test_npm_install.py, outside
# `make test`: it packs both and installs a project, minutes): `release.py build --only npm`,
# a fresh project that installs the two tarballs alone, the NestJS quick start on real Redis.
release-npm-check: $(DEV) ## the release's npm tarballs installed in a fresh NestJS project, its quick start run on real Redis
	$(BIN)/pytest tests/release/test_npm_install.py -m npm_install -n 0

# The release stage, outside `make check` (it builds two releases and runs for long; see
# DESIGN.md section 5): `make release` (VERSION, 0.3.0 unless given) into dist/, the previous
# release of release/previous.env built by its own commit (cached), then e2e/release/ on the
# local cluster: installs from the artefacts alone, the upgrade under load, the uninstall.
e2e-release: $(DEV) ## install from a release's artefacts, upgrade from the previous one under load, uninstall (VERSION=0.3.0)
	VERSION="$(or $(VERSION),0.3.0)" ALLOW_DIRTY="$(ALLOW_DIRTY)" e2e/release/run.sh

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
