# Two commands do all set-up on a fresh machine: `make run` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: run test test-all test-e2e test-browser test-engine test-faults test-security lint typecheck format messages bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,embedded]'
	rm -f $(VENV)/.installed-*
	touch $@

run: $(STAMP)
	$(PY) -m panel.run

# The fast suite: unit and integration tests (needs a Redis: REDIS_URL, else an embedded one is started), side
# by side in FAST_WORKERS processes (one more than the cores, at most 4: most tests wait on servers and engines
# they started, so one process per core left a 2-core machine idle 60 % of the time; 3 there took 6:51 against
# 10:52 for 2, and 4 gave no more; since the end-to-end tests moved out, 3:26-3:33 in three runs on a quiet 2-core
# machine, 2026-12-07); a test module stays on one worker, since its tests share module-scoped
# servers and some run in file order as the steps of one story.
FAST_WORKERS ?= $(shell n=$$(( $$(nproc 2>/dev/null || echo 2) + 1 )); [ $$n -gt 4 ] && n=4; echo $$n)
FAST := $(PY) -m pytest tests/unit tests/integration -q -n $(FAST_WORKERS) --dist loadfile

test: $(STAMP)
	$(FAST)

# End to end: whole programs as an admin starts them (`make run` and Ctrl-C, agents installed over real SSH
# or by install-agent.sh into a venv, stacks installed with a venv and pip, several Celery workers and gateways
# at once, the gateway in front of sim engine processes, rolling updates, waits on a live web server while
# engines start and fail, podman containers): minutes each, so not in a contributor's `make test`; CI runs
# them in test-all. Same side-by-side processes as the fast tier.
E2E := $(PY) -m pytest tests/e2e -q -n $(FAST_WORKERS) --dist loadfile

test-e2e: $(STAMP)
	$(E2E)

test-browser: $(STAMP)
	$(PY) -m pytest tests/browser -q

test-engine: $(STAMP)
	$(PY) -m pytest tests/engine -q

# The API held to its schema: schemathesis against a live panel, every operation as an admin and as a viewer, no
# server error and no answer the schema does not describe (tests/contract; SCHEMA_FUZZ_EXAMPLES cases each).
.PHONY: test-contract
test-contract: $(STAMP)
	$(PY) -m pytest tests/contract -q

test-faults: $(STAMP)
	$(PY) -m pytest tests/faults -q

# Attacks as a node would make them, with its real credentials on the real broker (RabbitMQ: a vhost of the
# session's own; skipped with the reason when RabbitMQ is absent, a failure under REQUIRE_RABBITMQ=1 as in CI).
test-security: $(STAMP)
	$(PY) -m pytest tests/security -q

# Everything: fast, end-to-end, browser, engine, fault and security tiers, each in its own process (Playwright's sync API keeps an event
# loop running in the main thread for the whole session, which asyncio.run() elsewhere cannot share).
test-all: $(STAMP)
	$(FAST)
	$(E2E)
	$(PY) -m pytest tests/browser -q
	$(PY) -m pytest tests/engine -q
	$(PY) -m pytest tests/faults -q
	$(PY) -m pytest tests/security -q
	$(PY) -m pytest tests/contract -q

# The page scripts are parsed too (node's --check, as ES modules): one duplicate name stops a whole page.
lint: $(STAMP)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .
	for script in static/js/*.js; do node --experimental-default-type=module --check "$$script" || exit 1; done

# Types over the panel and the agent ([tool.mypy] in pyproject.toml; CI runs it after lint). Django's types come
# from django-stubs, whose mypy plugin loads panel.settings: PANEL_MODE=run is the settings `make run` starts
# with, which need no SECRET_KEY or broker password.
typecheck: $(STAMP)
	PANEL_MODE=run $(VENV)/bin/mypy

format: $(STAMP)
	$(VENV)/bin/ruff format . && $(VENV)/bin/ruff check --fix .

# Recompile translations after editing locale/*/LC_MESSAGES/django.po (needs GNU gettext; the .mo files are committed).
messages: $(STAMP)
	$(PY) manage.py makemessages -l zh_Hans --ignore '.venv/*' --ignore 'static/vendor/*'
	$(PY) manage.py compilemessages --ignore '.venv/*'

clean:
	rm -rf var staticfiles .pytest_cache
