"""``data.path``: Megatron's dataset prefixes, alone or as a weighted blend, and what exists of them here.

``data.path=[prefix]`` or ``data.path=[w1,prefix1,w2,prefix2,...]`` (Megatron's ``--data-path``
syntax; a prefix names ``<prefix>.bin`` and ``<prefix>.idx``). The same list drives Megatron Bridge's
``dataset.blend`` and the local engine's blended sampler.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from optbench.common.errors import Problem, UserError


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def dataset_blend(path: list[str]) -> list[Any]:
    """Megatron's blend ``[[prefix, ...], [weight, ...] or None]`` from ``data.path``."""
    items = [str(entry) for entry in path]
    if not items:
        raise UserError(
            Problem("data.path", "names no dataset; give prefixes, e.g. data.path=[data/pydocs/library_text_document]")
        )
    if any("${" in item for item in items):
        raise UserError(Problem("data.path", "must not contain '${' (it is passed to Megatron Bridge as it is)"))
    weights = [_number(w) for w in items[0::2]]
    if len(items) % 2 == 0 and all(w is not None for w in weights):
        if not all(math.isfinite(w) and w > 0 for w in weights):  # type: ignore[arg-type]
            raise UserError(Problem("data.path", f"blend weights must be positive finite numbers, got {items[0::2]}"))
        return [items[1::2], weights]
    if any(_number(item) is not None for item in items):
        raise UserError(Problem("data.path", "give either prefixes only, or weight, prefix, weight, prefix, ..."))
    return [items, None]


def prefix_status(path: list[str]) -> list[dict[str, Any]]:
    """Each prefix of ``data.path`` with whether its .bin and .idx exist on this machine (and their sizes)."""
    prefixes, weights = dataset_blend(path)
    found = []
    for index, prefix in enumerate(prefixes):
        files = {suffix: Path(prefix + suffix) for suffix in (".bin", ".idx")}
        exists = all(p.is_file() for p in files.values())
        found.append(
            {
                "prefix": prefix,
                "weight": weights[index] if weights else None,
                "exists_here": exists,
                "bytes": {s: p.stat().st_size for s, p in files.items() if p.is_file()},
            }
        )
    return found


def split_weights(text: str) -> list[float]:
    """``"98,2,0"`` -> [0.98, 0.02, 0.0] (missing parts are 0), as Megatron Core's ``parse_and_normalize_split``."""
    weights = [float(part) for part in re.findall(r"[.0-9]+", text)][:3]
    weights += [0.0] * (3 - len(weights))
    total = sum(weights)
    if not total > 0 or not weights[0] > 0:
        raise UserError(
            Problem("data.split", f"gives the training split no documents ({text}); e.g. data.split='98,2,0'")
        )
    return [w / total for w in weights]


def split_ranges(documents: int, weights: list[float]) -> list[tuple[int, int]]:
    """[start, end) documents of each split, as Megatron Core 0.16 cuts them: cumulative book-ends of the
    normalised shares (``convert_split_vector_to_split_matrix``), each rounded against the document count
    (``BlendedMegatronDatasetBuilder._build_megatron_dataset_splits``)."""
    ends = [0.0]
    for weight in weights:
        ends.append(ends[-1] + weight)
    return [
        (int(round(lo * float(documents))), int(round(hi * float(documents)))) for lo, hi in zip(ends[:-1], ends[1:])
    ]
