# Everything a fresh machine needs is behind these targets: `make test`, `make demo`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: venv test unit integration lint demo bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[cpu,test]'
	touch $(STAMP)

test: venv
	$(PY) -m pytest -q tests

unit: venv
	$(PY) -m pytest -q tests/unit

integration: venv
	$(PY) -m pytest -q tests/integration

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

demo: venv
	$(VENV)/bin/tfcluster demo

bench: venv
	$(PY) -m benchmarks

clean:
	rm -rf $(VENV) build *.egg-info
