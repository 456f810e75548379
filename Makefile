# rt-appliance: `make demo` and `make test` set up .venv themselves on a fresh machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test test-appliance package units lint bench docs clean

$(STAMP): pyproject.toml setup.py rt_appliance/log/_walk.c
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/rt demo

test: $(STAMP)
	$(PY) -m pytest -m "not container"

# Boots real systemd in systemd-nspawn containers and installs the built .deb (root).
test-appliance: $(STAMP) package
	$(PY) -m pytest -m container tests/appliance

# .deb and .rpm of rt-appliance and rt-appliance-spark in dist/ (packaging/build.sh: a venv
# under /opt/rt-appliance, nfpm); RT_PKG_SPARK=0 make package skips the Spark package.
package:
	bash packaging/build.sh

lint: $(STAMP)
	$(VENV)/bin/ruff check rt_appliance tests
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(VENV)/bin/rt bench log --output docs/BENCHMARKS.md

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis

# systemd/ (the units of etc/rt.yaml) and etc/rt.schema.json, after changing either's source.
units: $(STAMP)
	$(PY) -m rt_appliance.appliance.golden etc/rt.yaml systemd
	$(VENV)/bin/rt config schema > etc/rt.schema.json

docs: $(STAMP)
	$(PY) -m rt_appliance.cli.docs > docs/CLI.md
