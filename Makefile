# semula: `make run` serves on http://127.0.0.1:8080 (SQLite; PORT=9000 elsewhere), `make test` runs the tests.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
PORT ?= 8080

.PHONY: install browser agents run test test-notice test-fast lint format bench clean

$(STAMP): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/semula serve --dev --port $(PORT)

# In parallel (pytest-xdist, TEST_WORKERS processes; most tests wait on servers and databases, so more
# than the cores): every test has its own database, each worker its own ports and directories. The
# tests that run real processes (-m acceptance) run beside the others in the same session; the files
# whose tests share something costly (the wheel, built once) go to one worker (--dist loadgroup, with
# the groups named in tests/conftest.py's TOGETHER; decisions 0067, 0069).
TEST_WORKERS ?= 4
# The suite starts some 700 Python processes (servers, the CLI, the answerer, inner pytests): with
# PYTHONDONTWRITEBYTECODE set (some shells and sandboxes set it), each would compile semula's sources
# again (a `semula serve` start: 1.09 s of CPU instead of 0.91 s) and each worker would rewrite every
# test module's asserts again (decision 0069). The compiled files go to __pycache__, which git ignores.
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest

test: test-notice $(STAMP) browser agents
	$(PYTEST) -n $(TEST_WORKERS) --dist loadgroup

test-notice:
	@echo "make test installs, when it can, Chromium (apt, as root) for the dashboard's browser tests and"
	@echo "the pinned Claude Code, Codex and Gemini CLI (npm, under $(SEMULA_AGENTS_PREFIX)) that the"
	@echo "real-agent tests drive; without them those tests are skipped with the reason (make test-fast"
	@echo "needs neither)."

# The dashboard's browser tests drive Debian's Chromium; as root it is installed here, otherwise
# those tests are skipped and the summary says why.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "chromium is missing and this is not root: the browser tests will be skipped"; fi; }

# The coding agents tests/acceptance/test_real_agents.py runs and tests/data/agents/ was captured from,
# at pinned versions, installed with npm outside the repository (SEMULA_AGENTS_PREFIX). Without npm
# those tests are skipped and the summary says why.
SEMULA_AGENTS_PREFIX ?= /opt/semula-agents
AGENTS := @anthropic-ai/claude-code@2.1.332 @openai/codex@0.171.0 @google/gemini-cli@0.61.0
agents:
	@command -v npm >/dev/null 2>&1 || { echo "npm is missing: the real-agent tests will be skipped"; exit 0; }; \
	if [ "$$(cat $(SEMULA_AGENTS_PREFIX)/.semula-agents 2>/dev/null)" != "$(AGENTS)" ]; then \
	  mkdir -p $(SEMULA_AGENTS_PREFIX) && \
	  npm install --prefix $(SEMULA_AGENTS_PREFIX) --no-audit --no-fund --loglevel=error $(AGENTS) && \
	  echo "$(AGENTS)" > $(SEMULA_AGENTS_PREFIX)/.semula-agents; fi

test-fast: $(STAMP)
	$(PYTEST) -m "not acceptance" -n $(TEST_WORKERS)

# The query lint: every named statement on a tenant table names its workspace or project (tests/query_scoping.py).
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m tests.query_scoping

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
