# rt-appliance: `make demo` and `make test` set up .venv themselves on a fresh machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test test-appliance test-spark-cluster package units fuzz chaos lint bench bench-peers peer-servers docs clean

# The product (rt_appliance, with its test tools) and the lab beside it (lab/: rt demo,
# rt bench, rt chaos and the test harness), both editable. Editable as a path entry
# (EDITABLE): PySpark's data source lookup lists the modules on sys.path, and finds the
# `pyspark_rt` module (format("rt") with no line) only so.
EDITABLE := --config-settings editable_mode=compat
$(STAMP): pyproject.toml setup.py rt_appliance/log/_walk.c lab/pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check $(EDITABLE) -e '.[dev]' -e ./lab
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/rt demo

test: $(STAMP)
	$(PY) -m pytest -m "not container" --durations=30

# Boots real systemd in systemd-nspawn containers and installs the built .deb (root).
test-appliance: $(STAMP) package
	$(PY) -m pytest -m "container and not spark_cluster" tests/appliance

# Spark on the nodes in containers: the stream's Spark cluster, and the one pipeline for
# the stream failing over between nodes (JVMs on every node: about 15 minutes).
test-spark-cluster: $(STAMP) package
	$(PY) -m pytest -m spark_cluster tests/appliance

# .deb and .rpm of rt-appliance and rt-appliance-spark in dist/ (packaging/build.sh: a venv
# under /opt/rt-appliance, nfpm); RT_PKG_SPARK=0 make package skips the Spark package.
package:
	bash packaging/build.sh

# The decoders of tests/fuzz with a large budget (FUZZ_EXAMPLES random inputs per
# property, 200,000 by default); `make test` runs them with hypothesis's default 100.
# Then each atheris target of fuzz/ (coverage-guided) for FUZZ_SECONDS, the compiled record
# walk built with clang and AddressSanitizer; corpus and findings stay in FUZZ_DIR/<target>.
# clang (and llvm-symbolizer) come from Debian's packages, installed only if missing (root).
FUZZ_EXAMPLES ?= 200000
FUZZ_SECONDS  ?= 600
FUZZ_DIR      ?= /tmp/rt-fuzz
FUZZ_STAMP    := $(VENV)/.installed-fuzz

$(FUZZ_STAMP): $(STAMP) pyproject.toml
	$(PY) -m pip install --quiet --disable-pip-version-check $(EDITABLE) -e '.[dev,fuzz]' -e ./lab
	touch $(FUZZ_STAMP)

fuzz: $(FUZZ_STAMP)
	@command -v clang >/dev/null && command -v llvm-symbolizer >/dev/null || { \
	  if [ "$$(id -u)" != 0 ]; then \
	    echo "clang is missing; install it as root with: apt-get install -y clang llvm" >&2; \
	    exit 1; \
	  fi; \
	  apt-get update -q && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends clang llvm; }
	HYPOTHESIS_PROFILE=fuzz FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PY) -m pytest -q tests/fuzz
	$(PY) -m fuzz.run all --seconds $(FUZZ_SECONDS) --workdir $(FUZZ_DIR)

# rt chaos: a 3-node stream under load for CHAOS_MINUTES with every fault this machine
# allows (partition, disk-full and power-loss need root), then the checker's verdict
# (exit 1 on any violation). CHAOS_SEED picks the schedule (default: random, printed).
# The report, timeline and every daemon's log stay in CHAOS_DIR. CHAOS_MAX_STALL, if
# set, is the availability bound (--max-stall; default: the election timeout + 1 s).
CHAOS_MINUTES   ?= 2
CHAOS_SEED      ?=
CHAOS_DIR       ?= /tmp/rt-chaos
CHAOS_MAX_STALL ?=
chaos: $(STAMP)
	rm -rf $(CHAOS_DIR)
	$(VENV)/bin/rt chaos --minutes $(CHAOS_MINUTES) $(if $(CHAOS_SEED),--seed $(CHAOS_SEED)) \
	    $(if $(CHAOS_MAX_STALL),--max-stall $(CHAOS_MAX_STALL)) --workdir $(CHAOS_DIR)

lint: $(STAMP)
	$(VENV)/bin/ruff check rt_appliance lab fuzz tests
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(VENV)/bin/rt bench log --output docs/BENCHMARKS.md

# rt bench peers: NATS JetStream, a RabbitMQ stream and Redis Streams beside our stream.
# Their Python clients come from rt-lab's pinned `peers` extra; their servers from Debian's
# packages (installed only if missing, as root). The bench starts and stops the servers
# itself on 127.0.0.1; on a machine that runs systemd, installing the packages also
# starts their system services, which the bench does not use
# (`systemctl disable --now nats-server rabbitmq-server redis-server` if unwanted).
PEER_SERVERS := nats-server rabbitmq-server redis-server
PEERS_STAMP  := $(VENV)/.installed-peers

$(PEERS_STAMP): $(STAMP) lab/pyproject.toml
	$(PY) -m pip install --quiet --disable-pip-version-check $(EDITABLE) -e '.[dev]' -e './lab[peers]'
	touch $(PEERS_STAMP)

peer-servers:
	@missing=""; \
	for p in $(PEER_SERVERS); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' \
	    || missing="$$missing $$p"; \
	done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ]; then \
	  echo "missing Debian packages:$$missing; install them as root with:" >&2; \
	  echo "  apt-get update && apt-get install -y$$missing" >&2; \
	  exit 1; \
	fi; \
	apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q$$missing

bench-peers: $(PEERS_STAMP) peer-servers
	$(VENV)/bin/rt bench peers --output docs/BENCHMARKS.md

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis

# systemd/ (the units of etc/rt.yaml) and etc/rt.schema.json, after changing either's source.
units: $(STAMP)
	$(PY) -m rt_appliance.appliance.golden etc/rt.yaml systemd
	$(VENV)/bin/rt config schema > etc/rt.schema.json

docs: $(STAMP)
	$(PY) -m rt_appliance.cli.docs > docs/CLI.md
