# optbench: `make help` lists every target.
#
# Run targets take a recipe and Hydra overrides exactly as typed, e.g.
#   make plan RECIPE=kimi_k2_muon parallel.pp=8 parallel.ep=32
# Every lower-case key=value word is a Hydra override; upper-case ones (RECIPE, PYTHON) configure make.
# The overrides reach Python through the environment, never through a shell.

SHELL := /bin/bash
.DEFAULT_GOAL := help

RECIPE ?= kimi_k2_tiny_muon
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY ?= $(VENV)/bin/python
PIP := $(PY) -m pip

export OPTBENCH_MAKE_OVERRIDES := $(MAKEOVERRIDES)
export OPTBENCH_RECIPE := $(RECIPE)
LAUNCH := $(PY) -m launch

.PHONY: help setup test plan pretrain recipes clean

help: ## List every target with what it does
	@awk 'BEGIN {FS = ":.*## "} /^[a-z][a-zA-Z_-]*:.*## / {printf "  %-10s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@echo "  Variables: RECIPE=<name> (default $(RECIPE)); any lower-case key=value is a Hydra override."

setup: ## Create .venv and install the project with its local, launch and test extras (CPU torch)
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip
	$(PIP) install -e ".[local,launch,dev]"

test: ## Run the test suite (no GPU, no cluster, no network)
	$(PY) -m pytest

recipes: ## List the recipes
	@$(LAUNCH) recipes

plan: ## Validate RECIPE with overrides and write results/plans/<recipe>/plan.json
	@$(LAUNCH) plan --from-make

pretrain: ## Validate, plan and launch RECIPE (default: the tiny Muon recipe on this machine)
	@$(LAUNCH) pretrain --from-make

clean: ## Remove run outputs (results/runs, results/plans) and caches; keeps .venv
	rm -rf results/runs results/plans results/wandb results/checkpoints .pytest_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
