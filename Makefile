# Everything a fresh machine needs is behind these targets: `make test`, `make demo`.
# scripts/provision installs what they need from the system (python3-venv, OpenSSH's sshd, Slurm and munge)
# when it is missing, or stops with one line saying what to install; .ci/run uses the same script.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PROVISION := sh scripts/provision

.PHONY: venv provision test unit integration faults stress lint demo bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@PYTHON='$(PYTHON)' $(PROVISION) venv
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[cpu,test,tensorboard]'
	touch $(STAMP)

# The integration tests start real sshd processes (sshd and ssh-keygen) and a three-node Slurm cluster
# (slurmctld, slurmd, the client commands, munged); the quoting tests run commands under busybox sh too:
# installed if missing.
provision:
	@$(PROVISION) openssh slurm busybox

# The suite runs on TEST_WORKERS processes (pytest-xdist): most of its time is waiting on sshd, Slurm and
# TensorFlow starting, not CPU. `--dist loadgroup`: each test goes to whichever worker is free, except the
# groups tests/conftest.py marks (a fault module's stages, the Slurm tests), which stay together on one.
# `make test PYTEST_ARGS=--lf` reruns only what failed last time.
TEST_WORKERS ?= 3
PYTEST_ARGS ?=
PYTEST := $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

test: provision venv
	@start=$$(date +%s); $(PYTEST) tests; rc=$$?; \
	echo "make test: $$(( $$(date +%s) - start )) s, exit $$rc"; exit $$rc

unit: venv
	@$(PROVISION) busybox
	$(PY) -m pytest -q -n 2 $(PYTEST_ARGS) tests/unit

integration: provision venv
	$(PYTEST) tests/integration

# A race hunter: the integration and fault tiers STRESS_ROUNDS times, each round beside a busy loop per core
# (as on a loaded CI machine). Every round runs; each is recorded in benchmarks/results/stress.md (and .json),
# with how often each test failed. Exit 0 only when every round was green.
STRESS_ROUNDS ?= 5

stress: provision venv
	$(PY) scripts/stress.py --python $(PY) --rounds $(STRESS_ROUNDS) --workers $(TEST_WORKERS)

# The fault suite alone, with its figures written to benchmarks/results/faults.md and .json.
faults: provision venv
	$(PY) -m benchmarks.bench_faults

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

demo: venv
	$(VENV)/bin/tfcluster demo

bench: provision venv
	$(PY) -m benchmarks

clean:
	rm -rf $(VENV) build *.egg-info
