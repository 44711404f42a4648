# optbench: `make help` lists every target.
#
# Run targets take a recipe and Hydra overrides exactly as typed, e.g.
#   make plan RECIPE=kimi_k2_muon parallel.pp=8 parallel.ep=32
# Every lower-case key=value word is a Hydra override; upper-case ones (RECIPE, PYTHON, ...) configure make.
# The overrides reach Python through the environment, never through a shell.

SHELL := /bin/bash
.DEFAULT_GOAL := help

RECIPE ?= kimi_k2_tiny_muon
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY ?= $(VENV)/bin/python
CONTAINER_PYTHON ?= python
PIP := $(PY) -m pip

export OPTBENCH_MAKE_OVERRIDES := $(MAKEOVERRIDES)
export OPTBENCH_RECIPE := $(RECIPE)
# Make exports command-line variables whose names are shell names (the run's top-level fields), and to
# export one it expands it: a value such as description='$${description}' would stop make ("Recursive
# variable"). They reach Python through OPTBENCH_MAKE_OVERRIDES only. (tests check this list)
unexport recipe description compare_with engine intent run_id results_dir debug dryrun force resume step_time_s
OPTBENCH := $(PY) -m optbench
# One command surface (python -m optbench --help): every target below that runs optbench is an alias of one command.

# A target's options are upper-case variables (CHECK=bridge, WARMUP=3): python -m optbench <command> --from-make reads
# them from OPTBENCH_MAKE_OVERRIDES, which holds only what was typed on make's command line, so that an unrelated
# MODEL or TARGET in your shell's environment is ignored.

TARGETS := help setup setup-venv setup-submit bridge-env setup-container lint test test-fast recipes plan pretrain sweep bench bench-gpu gpu-smoke table projection docs-projection search search-ranks compare study data clean
.PHONY: $(TARGETS)

# A word without '=' after a target is another goal to make, which would run after the first target had
# already written its files: refuse it before any target runs. (make expands a lone '~' to your home folder
# before we see it; make's own -b and -m options are accepted and ignored by make itself.)
stray_goals := $(filter-out $(TARGETS),$(MAKECMDGOALS))
ifneq ($(stray_goals),)
$(error error: arguments: '$(firstword $(stray_goals))' is neither a target nor a key=value override (e.g. parallel.pp=8); nothing was run; `make help` lists the targets)
endif

help: ## List every target with what it does
	@awk 'BEGIN {FS = ":.*## "} /^[a-z][a-zA-Z_-]*:.*## / {printf "  %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@echo "  Variables: RECIPE=<name> (default $(RECIPE)); any lower-case key=value is a Hydra override."

setup: ## Create .venv (project + local, launch, test extras; CPU torch) and, beside it, the Bridge environments (make bridge-env)
	@echo "setup: $(VENV) (optbench with the local engine, CPU torch, NeMo-Run and the test tools) and, side by side, the real Megatron Bridge + Core of every NeMo container (make bridge-env)"
	# Independent pip installs, partly waiting on downloads and disks, so run side by side: a fresh clone's set-up
	# took 6 min 20 s on a 2-core VM (2026-11-29), about 7 min 20 s one after the other. Either failing fails it.
	$(MAKE) --no-print-directory -j2 setup-venv bridge-env
	# pytest's rewritten modules (tests, and the plugins' packages it rewrites: Hypothesis, Hydra's), written once as
	# setup-venv compiles ours: pytest reads them beside each file even where Python may not write, so no test
	# worker rewrites ~200 modules at start.
	-PYTHONDONTWRITEBYTECODE= $(PY) -m pytest --collect-only -q -p no:cacheprovider > /dev/null

setup-venv: ## make setup's first half: .venv alone (project + local, launch, test extras; CPU torch)
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip
	$(PIP) install -e ".[local,launch,dev]"
	# An editable install compiles none of our modules, and where PYTHONDONTWRITEBYTECODE is set (CI images, this
	# project's VMs) Python never caches them: every command would compile ~250 modules (0.1 s of a make plan).
	$(PY) -m compileall -q src launch tools
	# Megatron Bridge's source only (its dependencies need CUDA): the adapter tests read its dataclasses.
	$(PIP) install --no-deps megatron-bridge==0.3.1

setup-submit: ## A login node's set-up: .venv with optbench and NeMo-Run only (plan, search, sweep, Slurm submission; no torch, no local engine; CHECK=bridge needs make bridge-env)
	@echo "setup-submit: $(VENV): optbench and NeMo-Run, no torch (make setup adds the local engine, the tests and the Bridge environments)"
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip
	$(PIP) install -e ".[launch]"
	$(PY) -m compileall -q src launch

bridge-env: ## Create the real Megatron Bridge + Core of every NeMo container on CPU stand-ins (.venv-bridge, .venv-bridge5, .bridge-releases/)
	$(PYTHON) src/optbench/engine/bridge/cpu_check/environments.py build

setup-container: ## Inside the NeMo container: install optbench with --no-deps (keeps its torch, Megatron, TE)
	$(CONTAINER_PYTHON) -m pip install --no-deps --no-build-isolation -e .
	$(CONTAINER_PYTHON) -c "import hydra, omegaconf, yaml, optbench.engine.bridge.entry; print('optbench installed; torch, megatron-core, megatron-bridge and transformer-engine untouched')"

LINTED := src launch tests tools

lint: ## The formatter's check and the linter (ruff, [tool.ruff] in pyproject.toml; a few seconds); `make test` runs it first
	$(PY) -m ruff format --check --quiet $(LINTED)
	$(PY) -m ruff check --quiet $(LINTED)

test: lint ## Run the test suite (no GPU, no cluster, no network; one worker per core, at most 4)
	$(PY) -m pytest -n auto --maxprocesses=4 --dist loadgroup

test-fast: lint ## The inner loop: every test not marked slow (about 2 min on 2 idle cores; `make test` runs them all, about 14 min)
	$(PY) -m pytest -n auto --maxprocesses=4 --dist loadgroup -m "not slow"

recipes: ## List the recipes
	@$(OPTBENCH) recipes

plan: ## Validate RECIPE with overrides and write results/plans/<recipe>/plan.json (CHECK=bridge: build it with its container's real Megatron Bridge on this CPU; COMPARE=soap,adaptive_muon: those optimizers projected beside a Muon run's AdamW twin)
	@$(OPTBENCH) plan --from-make

pretrain: ## Validate, plan and launch RECIPE (default: the tiny Muon recipe on this machine; CHECK=bridge as for plan, before launching)
	@$(OPTBENCH) pretrain --from-make

sweep: ## Validate, plan and rank every point of a sweep (parallel.ep=32,64 parallel.pp=4,8); launch the valid ones (CHECK=bridge: each point through its container's real Megatron Bridge first)
	@$(OPTBENCH) sweep --from-make

bench: ## Benchmarks into results/bench/: optimizer step times and imbalance, `make pretrain` wall time, callback cost
	$(OPTBENCH) bench --from-make

bench-gpu: ## On a GPU machine: measure only the benchmarks' GPU sections, keep their CPU sections in results/bench/
	$(OPTBENCH) bench-gpu --from-make

# make gpu-smoke [SMOKE="--steps 20 --optimizers muon,adamw --loops core,bridge"]; the wheels and the command: docs/gpu.md
gpu-smoke: ## On a GPU: the real Megatron Bridge + Core train the Qwen3 proxy (Muon, AdamW, SOAP, AdaMuon) -> results/bench/megatron_one_gpu.json
	$(OPTBENCH) gpu-smoke $(SMOKE)

#   make data [INPUT=<folder of .txt/.jsonl>] [OUT=data/<name>] [TOKENIZER=<tokenizer.json or folder>] [VOCAB=512]
data: ## Build Megatron .bin/.idx datasets: the built-in pydocs corpus (CPython's docs), or INPUT=<folder of .txt/.jsonl>
	@$(OPTBENCH) data --from-make

#   make table [WARMUP=3] [LOGS="path/to/bridge.log ..."]
table: ## Write results/throughput.{md,csv} + plots: published rows beside measured runs (WARMUP=3 LOGS=<bridge logs>)
	@$(OPTBENCH) table --from-make

#   make search RECIPE=kimi_k2_muon [FIX=ep,mbs]
search: ## Every valid layout of RECIPE's model at its GPU count, projected and ranked (top 10, Muon vs AdamW gap, your layout's rank; FIX=ep,mbs holds those at the recipe's values; HBM=0.9 keeps layouts estimated at most 90 % of HBM; CHECK=bridge sends the ten best through the real Megatron Bridge)
	@$(OPTBENCH) search --from-make

#   make search-ranks [MODELS=qwen3_30b_a3b,kimi_k2]   (MODELS: search those again, keep the other rows)
search-ranks: ## Where NVIDIA's own layout ranks in `make search`, for every published row: results/projection/search_ranks.md
	@$(OPTBENCH) search-ranks --from-make

projection: ## The projection against every published row, in sample and out of sample (leave one setup / model / GPU architecture / system family / GPU / layout / release / row out, each beside copying the nearest published row it keeps, with its 80 % band held out and a bootstrap over setups): results/projection/validation.md (~1 min on 2 cores; writes results/ only)
	@$(OPTBENCH) projection --from-make

docs-projection: ## Maintainers: make projection, then rewrite the summary block of README.md and docs/projection.md from it (commit them together)
	@$(OPTBENCH) docs-projection --from-make

#   make study [SIZE=cpu|gpu] [hydra overrides for every run, e.g. train.iters=300]
study: ## Muon (2 scales), AdaMuon and SOAP vs AdamW, each lr swept, winners on held-out seeds, on real text: results/study.md (~4 h on 2 cores)
	@$(OPTBENCH) study --from-make

#   make compare [MODEL=kimi_k2_tiny] [SEEDS=3 | SEEDS=1,2,3] [TARGET=auto | TARGET=4.5] [ITERS=<steps>]
#                [WINDOW=5] [MUON_RECIPE=<recipe> ADAMW_RECIPE=<recipe>] [REUSE=compare-<model>-<time>] [train.gbs=8 ...]
compare: ## Train MODEL's Muon and AdamW recipes over SEEDS to a TARGET loss; time-to-target in results/compare.md
	@$(OPTBENCH) compare --from-make

clean: ## Remove run outputs (new runs, plans, wandb, checkpoints) and caches; keeps committed runs and the venvs
	rm -rf results/plans results/sweeps results/wandb results/checkpoints .pytest_cache
	if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then git clean -fdxq -- results/runs; else rm -rf results/runs; fi
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
