# make demo   run clustercheck over the bundled demo cluster of recorded fixtures
# make test   the test suite (real sshd and Slurm daemons on loopback; installs them when root)
# make lint   ruff + mypy --strict
# make bench  speed and memory figures into bench/RESULTS.md
# make dist   the wheel and sdist, and dist/clustercheck.pyz: one file for compute nodes (README:
#             Deploying to compute nodes)
VENV    ?= .venv
PYTHON  ?= python3
STAMP   := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
CC      := $(VENV)/bin/clustercheck
# what the tests start or run for real: sshd and a login shell of each kind (fish, tcsh), Slurm and
# munge on loopback, bubblewrap containers over a debootstrap rootfs with a squashfs image
SYSTEM_PACKAGES := openssh-server openssh-client slurm-wlm munge bubblewrap debootstrap squashfs-tools tcsh fish shellcheck

.PHONY: venv demo test lint bench dist system-deps clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q -e '.[dev]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

venv: $(STAMP)

demo: venv
	@echo "== 1. GPU nodes: node basics, GPU health, image stack (fixtures/demo-cluster)"
	@$(CC) run --replay fixtures/demo-cluster --profile fixtures/demo-cluster/site-profile.yaml; test $$? -le 3
	@echo; echo "== 2. RDMA: InfiniBand ports, /dev/infiniband inside Apptainer/Enroot, NCCL settings (fixtures/rdma)"
	@$(CC) run $(foreach f,healthy-ndr apptainer-minimal-dev enroot-restrict-dev port-down-half-rate nccl-ib-hca-typo,--replay fixtures/rdma/$(f)); test $$? -le 3
	@echo; echo "== 3. Monitoring: would Prometheus see these nodes' GPUs? (fixtures/monitoring-*)"
	@$(CC) run --replay fixtures/monitoring-healthy --replay fixtures/monitoring-exporter-down \
	  --replay fixtures/monitoring-gpu-missing --replay fixtures/monitoring-no-xid; test $$? -le 3
	@echo; echo "== 4. Storage: mount options, a hung mount, shard reads and checkpoint writes (fixtures/storage-*)"
	@for f in storage-healthy storage-nfs-64k storage-hung-mount storage-slow-shared-fs storage-checkpoint-budget; do \
	  $(CC) run --replay fixtures/$$f; test $$? -le 3 || exit 1; done
	@echo; echo "Exit codes: 0 ok, 1 warn, 2 fail, 3 error. The demo nodes are broken on purpose."
	@echo "Add -v for evidence and remedies; --format json|jsonl|junit|prometheus|html for machines."

# The tests start a real OpenSSH server and real Slurm daemons on loopback; install them when we can.
system-deps:
	@missing=; for b in /usr/sbin/sshd /usr/sbin/slurmctld /usr/sbin/munged /usr/bin/bwrap /usr/sbin/debootstrap \
	    /usr/bin/mksquashfs /usr/bin/tcsh /usr/bin/fish; do test -x $$b || missing="$$missing $$b"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	      $(SYSTEM_PACKAGES) >/dev/null; \
	  else echo "make test needs /usr/sbin/sshd (openssh-server); missing:$$missing (apt-get install $(SYSTEM_PACKAGES); the tests that need them skip)"; \
	    test -x /usr/sbin/sshd || exit 1; fi; \
	fi

test: venv system-deps
	$(VENV)/bin/python -m pytest

lint: venv
	$(VENV)/bin/ruff check src checks tests bench tools
	$(VENV)/bin/ruff format --check src checks tests bench tools
	$(VENV)/bin/mypy

# Prolog-path timing beside `python -c pass`, and beside LBNL NHC when NHC=/path/to/sbin/nhc
# (with NHC_CFG_PREFIX for a copy not installed in /); see bench/RESULTS.md.
# Three side-by-side benchmarks, each against the tool people use today:
#   prolog path vs python -c pass and LBNL NHC (NHC=/path/to/sbin/nhc NHC_CFG_PREFIX=...),
#   nccl-log on a generated multi-GB log vs grep -c (appends its section to RESULTS.md),
#   storage read patterns vs fio with as many jobs, on a disk and on memory (apt-get install fio),
#   fleet runs over SSH on 256 loopback nodes vs clush and pdsh (apt-get install clustershell pdsh);
# then bench/summary.py puts every ratio, its target and commands in one table atop RESULTS.md.
bench: venv system-deps
	$(VENV)/bin/python bench/bench.py --markdown bench/RESULTS.md $(BENCH_ARGS)
	$(VENV)/bin/python bench/bench_nccl.py --markdown bench/RESULTS.md $(NCCL_BENCH_ARGS)
	$(VENV)/bin/python bench/bench_storage.py --size 2048 --rounds 4 --budget 20 --markdown bench/RESULTS.md $(STORAGE_BENCH_ARGS)
	$(VENV)/bin/python bench/bench_fleet.py --markdown bench/FLEET.md $(BENCH_FLEET_ARGS)
	$(VENV)/bin/python bench/bench_sweep.py --markdown bench/RESULTS.md $(SWEEP_BENCH_ARGS)
	$(VENV)/bin/python bench/summary.py bench/RESULTS.md bench/FLEET.md

# The single file carries clustercheck (from the wheel) and the pure-Python dependencies as this
# venv has them: see tools/build_pyz.py for why, and what it leaves out.
dist: venv
	rm -rf dist
	$(VENV)/bin/python -m build --outdir dist .
	$(VENV)/bin/python tools/build_pyz.py dist/clustercheck-*-py3-none-any.whl -o dist/clustercheck.pyz

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .mypy_cache .ruff_cache
