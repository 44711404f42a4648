"""Lay the offline configs of hf_configs/ out as a Hugging Face hub cache and point the hub at it, offline."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent
REVISION = "0" * 40
"""A fixed revision name: the cache holds one snapshot per model."""


def build(cache_dir: str | Path) -> Path:
    """``<cache_dir>/models--<org>--<name>/snapshots/<rev>/config.json`` for every file of hf_configs/."""
    cache = Path(cache_dir)
    for source in sorted((HERE / "hf_configs").glob("*.json")):
        repo = source.stem  # org--name
        snapshot = cache / f"models--{repo}" / "snapshots" / REVISION
        snapshot.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, snapshot / "config.json")
        refs = cache / f"models--{repo}" / "refs"
        refs.mkdir(parents=True, exist_ok=True)
        (refs / "main").write_text(REVISION)
    return cache


def use(cache_dir: str | Path) -> Path:
    """Build the cache and make transformers / huggingface_hub read only from it."""
    cache = build(cache_dir)
    os.environ["HF_HUB_CACHE"] = str(cache)
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    return cache
