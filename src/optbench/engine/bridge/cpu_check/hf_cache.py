"""Lay the offline configs of hf_configs/ out as a Hugging Face hub cache and point the hub at it, offline.

``hf_configs/<org>--<name>.json`` is a model's config.json; a folder ``hf_configs/<org>--<name>/`` holds a
snapshot of several files (Kimi K2's config.json and the configuration module its ``auto_map`` names).
Every snapshot is laid out under a fixed revision name and under every commit a recipe pins (Megatron
Bridge 0.6 pins Qwen3's hub revision): :func:`pinned_revisions` reads them from the installed Bridge.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterable
from pathlib import Path

HERE = Path(__file__).resolve().parent
REVISION = "0" * 40
"""A fixed revision name: the cache holds one snapshot per model (plus the pinned revisions)."""
PINNED = re.compile(r"""_REVISION\s*=\s*["']([0-9a-f]{40})["']""")


def pinned_revisions() -> set[str]:
    """Every 40-hex revision constant in the installed Megatron Bridge's recipes (none before 0.6)."""
    import importlib.util

    spec = importlib.util.find_spec("megatron.bridge")
    if spec is None or not spec.submodule_search_locations:
        return set()
    recipes = Path(list(spec.submodule_search_locations)[0]) / "recipes"
    return {
        m for path in recipes.rglob("*.py") for m in PINNED.findall(path.read_text(encoding="utf-8", errors="replace"))
    }


def _snapshots() -> dict[str, dict[str, Path]]:
    """org--name -> {file name in the snapshot: source file}."""
    found: dict[str, dict[str, Path]] = {}
    for source in sorted((HERE / "hf_configs").iterdir()):
        if source.suffix == ".json":
            found[source.stem] = {"config.json": source}
        elif source.is_dir():
            found[source.name] = {
                p.name: p for p in sorted(source.iterdir()) if p.is_file() and p.suffix in (".json", ".py")
            }
    return found


def build(cache_dir: str | Path, revisions: Iterable[str] = ()) -> Path:
    """``<cache_dir>/models--<org>--<name>/snapshots/<rev>/<files>`` for every offline config and revision."""
    cache = Path(cache_dir)
    for repo, files in _snapshots().items():
        for revision in {REVISION, *revisions}:
            snapshot = cache / f"models--{repo}" / "snapshots" / revision
            snapshot.mkdir(parents=True, exist_ok=True)
            for name, source in files.items():
                shutil.copyfile(source, snapshot / name)
        refs = cache / f"models--{repo}" / "refs"
        refs.mkdir(parents=True, exist_ok=True)
        (refs / "main").write_text(REVISION)
    return cache


def use(cache_dir: str | Path) -> Path:
    """Build the cache and make transformers / huggingface_hub read only from it."""
    cache = build(cache_dir, pinned_revisions())
    os.environ["HF_HUB_CACHE"] = str(cache)
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    return cache
