"""Hydra's config files, each read and parsed once per process while ``conf/`` and ``recipes/`` are unchanged.

Every Hydra composition builds a fresh config repository, which reads, parses and wraps in OmegaConf nodes every
file of its defaults list again: the recipe, each group option, the base and the schema, and Hydra's own
configs. A first ``make plan`` of a Muon recipe merges four group sets that share most of those files (the run,
its AdamW twin with the calibration anchor, the SOAP and AdaMuon siblings), ``make projection`` one per GPU
preset and release, a test worker dozens. So each file's loaded result (``ConfigRepository.load_config``: the
config, its header and its defaults list) is kept pickled for the process and each composition gets a fresh copy
of it (a loaded result is mutated while Hydra builds the defaults tree, so it is never shared).

The results are keyed on the config path and the repository's sources; they are all dropped when the stat of a
file under ``conf/`` or ``recipes/`` changes (:func:`optbench.compose.reuse.config_files_stat`, the key the kept
merges use). Hydra's own configs and the config store are not files under those folders: they are fixed for a
process (Hydra's are stored when it is imported, our schema once, :func:`optbench.compose.recipe._register_schema`),
so nothing else can make a kept result stale. A composition is the same config with or without them
(tests/test_compose_reuse.py).
"""

from __future__ import annotations

import pickle
from contextlib import contextmanager
from typing import Hashable, Iterator

_loaded: dict[tuple, bytes] = {}
"""Each file's load result, pickled: (config path, sources) -> bytes."""
_files_key: list[Hashable] = [None]
"""The config files' stat the kept results were read under."""


@contextmanager
def each_file_loaded_once(files_key: Hashable) -> Iterator[None]:
    """Within the block, Hydra compositions read each config file once per process (for this ``files_key``)."""
    from hydra._internal.config_repository import ConfigRepository

    if _files_key[0] != files_key:
        _loaded.clear()
        _files_key[0] = files_key
    original = ConfigRepository.load_config

    def load_config(self: ConfigRepository, config_path: str):
        key = (config_path, tuple((type(source).__name__, source.path) for source in self.get_sources()))
        kept = _loaded.get(key)
        if kept is None:
            kept = _loaded[key] = pickle.dumps(original(self, config_path), protocol=pickle.HIGHEST_PROTOCOL)
        return pickle.loads(kept)

    ConfigRepository.load_config = load_config  # type: ignore[method-assign]
    try:
        yield
    finally:
        ConfigRepository.load_config = original  # type: ignore[method-assign]
