# The two commands of README.md are `make demo` and `make test`.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
export PATH := $(BIN):$(PATH)
export ANSIBLE_FORCE_COLOR ?= 0
# Local torch wheel for the control machine's unit tests (never the CUDA build).
WHEELS ?= /opt/wheels

.PHONY: venv venv-demo host test-host lint unit demo test clean bench collection docs

# The venv in two sets: venv-demo installs what make demo runs
# (requirements-demo.txt, a part of requirements.txt), venv all of
# requirements.txt (the linters, tests, docs and release gates) and torch.
venv: $(VENV)/.installed
venv-demo: $(VENV)/.demo-installed

$(BIN)/python:
	python3 -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# --no-compile: pip byte-compiles every module it installs, most of which no
# run imports (ansible's collections); Python compiles what is imported, once.
# requirements-demo.txt with a warm pip cache: 15.2 s against 33.7 s.
$(VENV)/.demo-installed: requirements-demo.txt | $(BIN)/python
	$(BIN)/pip install --quiet --no-compile -r requirements-demo.txt
	touch $@

$(VENV)/.installed: requirements.txt | $(BIN)/python
	$(BIN)/pip install --quiet --no-compile -r requirements.txt
	$(BIN)/pip install --quiet --no-compile --find-links $(WHEELS) 'torch==2.13.0+cpu' numpy
	touch $@ $(VENV)/.demo-installed

# Docker running, base image, wheelhouse and venv-demo present, side by side
# where they can (tools/demo_prep.py: the steps, what each waits for, their
# logs in results/demo-prep/). Each step skips itself when done. python3:
# standard library only, before the venv exists.
host:
	mkdir -p .cache/shared
	python3 tools/demo_prep.py $(if $(DEMO_TIMES),--times $(DEMO_TIMES))

# What the tests need beyond the demo: the Debian 13 base image (Slurm 24.11)
# and, for the nfs scenario, qemu and the VM image (cached by recipe hash).
test-host: host nfs-host
	$(BIN)/python molecule/shared/hostprep.py image --suite trixie

# test-host's builds without its package installs: first what the first
# scenarios need (the Debian 12 image, the wheelhouse: make test's preparation
# builds them as steps of its own), then what only the last two need (the
# Debian 13 image, the VM image: make test builds them in the background).
.PHONY: test-images test-images-first test-images-later
test-images: test-images-first test-images-later
test-images-first:
	$(BIN)/python molecule/shared/hostprep.py image --suite bookworm
	$(BIN)/python molecule/shared/hostprep.py wheelhouse
test-images-later:
	$(BIN)/python molecule/shared/hostprep.py image --suite trixie
	$(BIN)/python molecule/shared/vm.py image

# Linters (tools/private_vars.py: no role reads another role's __ variable),
# then the gates a published collection faces, on the built tarball, offline
# but for the package index: Galaxy's importer (any error or warning fails)
# and ansible-test sanity on every Python it supports that is installed here
# (tools/sanity.py: its pip bootstrap is tools/get_pip_standin.py; the test
# venvs are kept in ~/.ansible/test/venv after the first run).
lint: venv collection lint-checks

# lint without building the collection (make test runs it in the background
# beside a scenario, on the tarball built before the scenarios).
.PHONY: lint-checks
lint-checks: venv
	pre-commit validate-config .pre-commit-config.yaml
	yamllint --strict .
	ansible-lint
	ruff check .
	ruff format --check .
	$(BIN)/python tools/private_vars.py
	$(BIN)/python tools/docs_site.py check
	ANSIBLE_COLLECTIONS_PATH=$(CURDIR)/collections $(BIN)/antsibull-docs lint-collection-docs --plugin-docs .
	$(BIN)/python tools/galaxy_import.py
	$(BIN)/python tools/sanity.py

# The collection's documentation site, offline, in build/docs/html: antsibull-docs
# (roles with their argument specs, modules, filters, lookups, the strategy) and
# a page of the playbooks, by sphinx-build -W (tools/docs_site.py).
.PHONY: docs
docs: venv
	$(BIN)/python tools/docs_site.py build

# CHANGELOG.md from changelogs/: add a fragment to changelogs/fragments/, then
# this merges it into galaxy.yml's version (changelogs/config.yaml).
.PHONY: changelog
changelog: venv
	ANSIBLE_COLLECTIONS_PATH=$(CURDIR)/collections $(BIN)/antsibull-changelog release \
	  --version $$($(BIN)/python -c 'import yaml; print(yaml.safe_load(open("galaxy.yml"))["version"])') \
	  --update-existing

# promtool (Debian's prometheus) and chromium for the monitoring tests
# (alert rules, the cluster report in a real browser), and amtool (Debian's
# prometheus-alertmanager, taken out of its package into the venv: no
# Alertmanager runs on this machine); skipped when present.
.PHONY: test-tools
test-tools: venv
	command -v promtool >/dev/null && command -v chromium >/dev/null || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	   --no-install-recommends prometheus chromium >/dev/null)
	test -x $(BIN)/amtool || (d=$$(mktemp -d) && cd $$d && apt-get download -qq prometheus-alertmanager \
	  && dpkg-deb -x prometheus-alertmanager_*.deb root && install -m 0755 root/usr/bin/amtool $(BIN)/amtool; \
	  rc=$$?; rm -rf $$d; exit $$rc)

unit: venv test-tools
	pytest -q -n auto tests training/tests

# The Ansible collection gpulab.slurm_cluster (galaxy.yml) in dist/, with the
# smoke package's wheel inside (roles/smoke_train/files), built offline.
collection: venv
	rm -rf dist roles/smoke_train/files/ddp_smoke-*.whl
	$(BIN)/python training/build_wheel.py --out roles/smoke_train/files
	$(BIN)/ansible-galaxy collection build --output-path dist

# Bring up the 4-container cluster (ctl, node1, node2, login), provision it, prove it with a DDP job.
# (tools/molecule_state.py first clears molecule's state where it says the
# containers exist and Docker has none; molecule create would skip.)
# (molecule create runs the scenario's prepare itself, once: a second
# `molecule prepare --force` cost about 12 s.)
# Each phase's wall time (the preparation and each of its steps, then the
# three below) is printed at the end and kept in results/demo-times.txt (one
# line per phase, this run's only); a failed phase prints the times so far.
demo:
	@mkdir -p results && rm -f results/demo-times.txt && date +%s > results/.demo-start
	$(MAKE) --no-print-directory host DEMO_TIMES=results/demo-times.txt
	$(call demo_timed,molecule create,$(BIN)/python tools/molecule_state.py default && molecule create)
	$(call demo_timed,site.yml,ansible-playbook site.yml)
	$(call demo_timed,smoke_train.yml,ansible-playbook smoke_train.yml)
	@echo "make demo: total $(call since,results/.demo-start) s" >> results/demo-times.txt
	@cat results/demo-times.txt
	@$(BIN)/python tools/demo_next.py

# Everything: lint, unit tests, then every molecule scenario (molecule/README.md):
# default (all roles + DDP smoke job), topology (uneven lab), slurm on Debian
# 12 and 13, nfs on VMs.
# The cgroups check fails when a Docker scenario left Slurm cgroups on the host.
# Each scenario's wall time is printed after it and kept in
# results/make-test-times.txt (one line per scenario, this run's only).
# Seconds since the time kept in file $(1), in a recipe's shell.
since = $$(( $$(date +%s) - $$(cat $(1)) ))
define timed
	@if $(2); then rc=0; else rc=$$?; fi; \
	  echo "make test: $(1) $(call since,results/.scenario-start) s, rc $$rc" \
	  | tee -a results/make-test-times.txt; exit $$rc
endef
define start
	@mkdir -p results && date +%s > results/.scenario-start
endef
# make demo's phase $(1), command $(2): its wall time in results/demo-times.txt.
define demo_timed
	@date +%s > results/.demo-phase-start; \
	  if $(2); then rc=0; else rc=$$?; fi; \
	  echo "make demo: $(1) $(call since,results/.demo-phase-start) s, rc $$rc" >> results/demo-times.txt; \
	  if [ $$rc -ne 0 ]; then cat results/demo-times.txt; fi; exit $$rc
endef

# A step in the background: command $(2), its output in results/$(1).log,
# its wall time in results/.$(1)-s, then its exit status in results/.$(1)-rc
# (written whole: a reader never sees it half written).
# It runs at niceness $(3) (default BG_NICE): the scenario in the foreground
# goes first. Host cgroups are v1, and all the containers together are one
# cgroup of weight 1024 beside each host process: at niceness 0 a pytest -n 2
# or three qemu VMs outweighed the whole cluster 2-3 to 1 (a converge took
# 210-241 s beside them, 114 s alone). Niceness 10 is weight 110.
# Measured (make test in a fresh clone, 2026-12-06): default's converge took
# 142 s at 07:06 and 133 s at 08:15 beside the Debian 13 and VM images (210 s
# at 04:45 at niceness 0); the whole run 2,678 s and 2,460 s (2,519 s at
# 04:45), topology, which runs alone, 505 s and 467 s (479 s): the machine
# drifts within hours, so the totals show no clear gain.
BG_NICE ?= 10
# The nfs VMs' guests have 20 s mount timeouts: less far back (3 VMs at
# weight 335 about match the cluster's 1024).
NFS_NICE ?= 5
define bg
	@rm -f results/.$(1)-rc results/.$(1)-s; date +%s > results/.$(1)-start; \
	  (if nice -n $(or $(3),$(BG_NICE)) $(2); then r=0; else r=$$?; fi; echo $(call since,results/.$(1)-start) > results/.$(1)-s; \
	   echo $$r > results/.$(1)-rc.tmp; mv results/.$(1)-rc.tmp results/.$(1)-rc) \
	  < /dev/null > results/$(1).log 2>&1 & echo $$! > results/.$(1)-pid
endef
# Waits for background step $(1) (a shell command, no @): its exit status;
# 1 when it ended without one (killed).
bgwait = while [ ! -e results/.$(1)-rc ]; do \
	  kill -0 $$(cat results/.$(1)-pid) 2>/dev/null || { sleep 1; [ -e results/.$(1)-rc ] || \
	    { echo "make test: $(1) ended without an exit status (results/$(1).log)"; exit 1; }; }; \
	  sleep 2; done; exit $$(cat results/.$(1)-rc)
# Scenario $(1) by command $(2) while background step $(3) runs beside it:
# both end, both times are kept, either failing fails.
define beside
	@if $(2); then rc=0; else rc=$$?; fi; \
	  echo "make test: $(1) $(call since,results/.scenario-start) s, rc $$rc" \
	  | tee -a results/make-test-times.txt; \
	  if ($(call bgwait,$(3))); then b=0; else b=$$?; fi; \
	  tail -n $$([ $$b -eq 0 ] && echo 5 || echo 150) results/$(3).log; \
	  echo "make test: $(3) $$(cat results/.$(3)-s) s, rc $$b (beside $(1); results/$(3).log)" \
	  | tee -a results/make-test-times.txt; \
	  [ $$rc -eq 0 ] && [ $$b -eq 0 ]
endef

# The host preparation (tools/demo_prep.py --for test: its steps side by side,
# their logs in results/test-prep/): the packages (docker.io and mmdebstrap,
# then qemu, promtool and chromium), dockerd, the Debian 12 image, the whole
# venv, the wheelhouse, amtool and the collection's tarball. Then the Debian
# 13 and VM images in the background (results/images-later.log), behind the
# first scenarios (only the last two need them). Lint, then the unit tests,
# run beside slurm on Debian 12 (results/checks.log, both to the end; lint on
# the collection built in the preparation: the default scenario's
# test_collection builds it again).
# Hiding them is not free: beside slurm 12 they cost its verify about 2 min
# (689 s against 561 s alone, 2026-12-05), as the unit tests alone cost
# default's converge 2.5 min; they still save about 4.5 min.
test:
	@mkdir -p results .cache/shared && rm -f results/make-test-times.txt
	python3 tools/demo_prep.py --for test --times results/make-test-times.txt
	$(call bg,images-later,$(MAKE) --no-print-directory test-images-later)
	$(call start)
	$(call timed,default,molecule test)
	$(call start)
	$(call timed,topology,molecule test -s topology)
	$(call bg,checks,$(MAKE) --no-print-directory -k lint-checks unit)
	$(call start)
	$(call beside,slurm-bookworm,CLUSTER_SUITE=bookworm molecule test -s slurm,checks)
	@if ($(call bgwait,images-later)); then rc=0; else rc=$$?; fi; cat results/images-later.log; \
	  echo "make test: the Debian 13 and VM images $$(cat results/.images-later-s) s, rc $$rc (behind the scenarios)" \
	  | tee -a results/make-test-times.txt; exit $$rc
	$(MAKE) --no-print-directory test-trixie-nfs
	$(BIN)/python molecule/shared/hostprep.py cgroups

# The last two scenarios side by side: nfs (three qemu VMs, no Docker; its
# output in results/nfs.log, its tail printed after) beside slurm on Debian 13
# (Docker). A Docker scenario keeps the two cores about a third busy (it
# waits on Ansible's round trips, Slurm and the tests' timeouts), so the VMs'
# emulation mostly fills what it leaves. Both always run to the end.
.PHONY: test-trixie-nfs
test-trixie-nfs:
	@mkdir -p results
	$(call bg,nfs,molecule test -s nfs,$(NFS_NICE))
	$(call start)
	$(call beside,slurm-trixie,CLUSTER_SUITE=trixie molecule test -s slurm,nfs)

clean:
	-molecule destroy
	rm -rf .cache/shared results

# Timed provisioning and smoke job on fresh containers, with ansible-runner
# (a benchmark: not part of `make test`). BENCH_ARGS="--compare FILE" etc.
# BENCH_NODES=3,8,16: the same phases on 1 controller + N compute containers
# for each N (bench/scale.py; JSON and PNG in bench/results/scale-*).
bench: venv host
	$(if $(BENCH_NODES),$(BIN)/python bench/scale.py --nodes $(BENCH_NODES) $(BENCH_ARGS),$(BIN)/python bench/bench.py $(BENCH_ARGS))

# NFS server/client roles on three qemu VMs (software emulation: the host
# kernel has no NFS). nfs-host installs qemu and builds the VM base image
# (a few minutes once, cached in .cache/nfs-vm by recipe hash).
.PHONY: nfs-host test-nfs
nfs-host: venv
	$(BIN)/python molecule/shared/vm.py host
	$(BIN)/python molecule/shared/vm.py image

test-nfs: nfs-host
	molecule test -s nfs

# The project's GPU code against this machine's real NVIDIA GPUs, offline and
# read-only: slurm_node_info, gres.conf, the cuda role's PCI detection, the
# torch variant, and with a CUDA torch the ddp_smoke job on NCCL and a copy
# bandwidth. Writes results/gpu-check-<UTC>.json and .txt; exits 0 where
# there is no GPU. Installs nothing: the venv's python if there is one, else python3.
.PHONY: gpu-check
gpu-check:
	$(if $(wildcard $(BIN)/python),$(BIN)/python,python3) tools/gpu_check.py $(GPU_CHECK_ARGS)
