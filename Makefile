# The two commands a newcomer needs: `make demo` and `make test`.
# Each creates or updates .venv and installs what it needs.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.phalanx-installed
# Azure's storage emulator, the real Blob API the tests run against.
AZURITE_VERSION := 3.37.0
TOOLS := .tools
AZURITE := $(TOOLS)/node_modules/.bin/azurite-blob

.PHONY: gpu-check gpu-wheels demo test check test-hosts lint format typecheck pytest bench clean fuse mpi postgresql chromium \
	containers test-image

$(STAMP): pyproject.toml constraints.txt | mpi
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev,azure,s3,fuse,mpi,tensorflow,ray,postgresql,mlflow]'
	@touch $@

$(AZURITE):
	@command -v npm >/dev/null || { echo "make: npm is needed for Azurite (apt-get install npm)"; exit 1; }
	npm install --silent --no-audit --no-fund --prefix $(TOOLS) azurite@$(AZURITE_VERSION)

# FUSE for ro_mount/rw_mount inputs: libfuse3 and fusermount3, from apt where we are root.
fuse:
	@command -v fusermount3 >/dev/null || { [ "$$(id -u)" = 0 ] && \
	  (apt-get install -y -qq fuse3 >/dev/null 2>&1 || \
	   (apt-get update -qq && apt-get install -y -qq fuse3 >/dev/null)) ; } || \
	  echo "make: fuse3 not installed (not root); the FUSE mount tests will report it"

# Open MPI (mpirun, and the headers mpi4py builds against) for `distribution: mpi`, from apt.
mpi:
	@command -v mpirun >/dev/null || { [ "$$(id -u)" = 0 ] && \
	  (apt-get install -y -qq openmpi-bin libopenmpi-dev >/dev/null 2>&1 || \
	   (apt-get update -qq && apt-get install -y -qq openmpi-bin libopenmpi-dev >/dev/null)) ; } || \
	  echo "make: Open MPI not installed (not root); the MPI tests will report it"

# PostgreSQL (initdb, pg_ctl): the store's tests run on it too, each session starting its own
# server in a temporary folder. From apt where we are root.
postgresql:
	@ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && \
	  (apt-get install -y -qq postgresql >/dev/null 2>&1 || \
	   (apt-get update -qq && apt-get install -y -qq postgresql >/dev/null)) ; } || \
	  echo "make: PostgreSQL not installed (not root); the PostgreSQL tests will report it"

# Chromium for the studio's browser tests (Playwright drives it; its own browser download
# cannot be relied on). From apt where we are root.
chromium:
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && \
	  (apt-get install -y -qq chromium >/dev/null 2>&1 || \
	   (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)) ; } || \
	  echo "make: chromium not installed (not root); the studio's browser tests will report it"

# podman (and runc, which phalanx's containers.conf picks) for `environment: {image: ...}`,
# and debootstrap to make the test image without a registry. From apt where we are root.
containers:
	@{ command -v podman >/dev/null && command -v runc >/dev/null && command -v debootstrap >/dev/null; } || \
	  { [ "$$(id -u)" = 0 ] && \
	  (apt-get install -y -qq podman runc debootstrap >/dev/null 2>&1 || \
	   (apt-get update -qq && apt-get install -y -qq podman runc debootstrap >/dev/null)) ; } || \
	  echo "make: podman not installed (not root); the container tests will report it"

# The image the container tests run jobs in (Debian bookworm minbase + python3, from the
# machine's Debian mirror, about a minute); once per machine: kept while it exists.
test-image: containers
	@command -v podman >/dev/null && sh tests/images/make-test-image.sh || \
	  echo "make: no test image; the container tests will report it"

## demo: the reference ResNet-50 workload on a small sharded dataset, 2 nodes x 1 process, here
demo: $(STAMP)
	$(BIN)/python examples/imagenet/prepare_demo_data.py
	$(BIN)/phalanx run examples/imagenet/job-demo.yml

## test: lint, type-check and the whole test suite
test: lint typecheck pytest

## check: the edit-test loop: lint, type-check and the unit tests (a few minutes at most)
# tests/unit holds the tests that start no job, no server (PostgreSQL aside) and no container.
check: lint typecheck
	$(BIN)/python tools/sqlcount.py --check
	$(BIN)/python -m pytest -q -p no:cacheprovider -k "not postgresql" tests/unit

## test-hosts: the tests on separate hosts (network, mount, PID namespaces; root)
# What they run on the hosts: Azurite (the blob host), PostgreSQL (the server's), Open MPI
# (an MPI job) and the test image (a job in an image built on the worker hosts).
test-hosts: $(STAMP) $(AZURITE) mpi postgresql test-image
	PHALANX_AZURITE=$(abspath $(AZURITE)) $(BIN)/python -m pytest -q -p no:cacheprovider \
	  tests/system/hosts

lint: $(STAMP)
	$(BIN)/ruff check src tests examples benchmarks tools
	$(BIN)/ruff format --check src tests examples benchmarks tools
	$(BIN)/lint-imports --no-cache

format: $(STAMP)
	$(BIN)/ruff format src tests examples benchmarks tools
	$(BIN)/ruff check --fix src tests examples benchmarks tools

typecheck: $(STAMP)
	$(BIN)/mypy

# The slowest tests, and each suite's time against its budget (tests/budgets.toml), are
# listed at the end: what to look at when the suite grows.
PYTEST_ARGS ?= --durations=30
# pytest-xdist workers, each given a whole test file at a time (its tests keep their order
# and share their module's fixtures). A test mostly waits on the processes it started, so
# more workers than cores pay: 4 on 2 cores.
PYTEST_WORKERS ?= 4

pytest: $(STAMP) $(AZURITE) fuse mpi postgresql chromium test-image
	PHALANX_AZURITE=$(abspath $(AZURITE)) $(BIN)/python -m pytest \
	  -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

## bench: phalanx's launch overhead against bare torchrun
bench: $(STAMP)
	$(BIN)/python benchmarks/launch_overhead.py

## gpu-check: the GPU path measured in one call (benchmarks/gpu_check.py); without a GPU, a dry run
gpu-check:
	sh benchmarks/gpu_check.sh

# The wheels the GPU machine lacks (benchmarks/gpu_wheels.txt), for its Python 3.12 on
# manylinux x86-64, into .whl/ (ignored; the device call carries it). Their total size
# counts towards the 64 MiB that travels with the working tree.
GPU_PY ?= 3.12
gpu-wheels:
	$(PYTHON) -m pip download -q --no-deps --only-binary=:all: --python-version $(GPU_PY) \
	  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
	  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
	  --platform manylinux1_x86_64 -d .whl -r benchmarks/gpu_wheels.txt
	@$(PYTHON) -c 'import pathlib, subprocess; \
	  w = sum(f.stat().st_size for f in pathlib.Path(".whl").glob("*.whl")); \
	  t = sum(pathlib.Path(f).stat().st_size for f in subprocess.run(["git", "ls-files", "-co", \
	    "--exclude-standard"], capture_output=True, text=True).stdout.split() \
	    if pathlib.Path(f).is_file()); \
	  print(f"gpu-wheels: {w / 2**20:.1f} MiB of wheels + {t / 2**20:.1f} MiB of working tree" \
	    f" = {(w + t) / 2**20:.1f} MiB of the 64 MiB a device call carries")'

clean:
	rm -rf $(VENV) $(TOOLS) .pytest_cache .mypy_cache .ruff_cache
