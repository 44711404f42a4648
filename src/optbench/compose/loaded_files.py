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

Our own merge of the groups (:mod:`optbench.compose.defaults_merge`, which Hydra's composition backs) reads the
files through :func:`file_data` and keeps what it derives from them alone in :func:`kept_for_files`, under the
same key.
"""

from __future__ import annotations

import functools
import pickle
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Hashable, Iterator

_loaded: dict[tuple, Any] = {}
"""Each file's load result, pickled: (config path, sources) -> bytes; ("file", path) -> a parsed file's bytes;
and what :func:`kept_for_files`'s users keep."""
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


def file_data(path: Path) -> tuple[str, Any]:
    """The head of a config file (its first 512 characters, where Hydra reads the ``# @package`` header) and a
    fresh copy of the plain data ``OmegaConf.load(path)`` builds its config from, the file read once per process
    while its stat is unchanged: for :mod:`optbench.compose.defaults_merge`, inside :func:`each_file_loaded_once`
    (whose key it shares). Parsed by libyaml where PyYAML has it (a sixth of the pure-Python parser's time) with
    OmegaConf's own resolvers, constructors and duplicate-key check (tests/test_defaults_merge.py holds every
    config file to the pure-Python parse)."""
    import yaml

    key = ("file", str(path))
    kept = _loaded.get(key)
    if kept is None:
        text = Path(path).read_text(encoding="utf-8")
        kept = _loaded[key] = (text[:512], pickle.dumps(yaml.load(text, Loader=_yaml_loader()),
                                                        protocol=pickle.HIGHEST_PROTOCOL))
    return kept[0], pickle.loads(kept[1])


def kept_for_files() -> dict:
    """A dict of the process's own, emptied with the loaded files whenever the config files change (inside
    :func:`each_file_loaded_once`): for what is derived from those files alone."""
    return _loaded


@functools.cache
def _yaml_loader() -> type:
    """OmegaConf's YAML loader, on libyaml's parser when PyYAML was built with it."""
    from omegaconf._utils import get_yaml_loader

    omegaconf_loader = get_yaml_loader()
    try:
        from yaml._yaml import CParser
    except ImportError:
        return omegaconf_loader

    class LibyamlOmegaConfLoader(CParser, omegaconf_loader):  # type: ignore[misc, valid-type]
        def __init__(self, stream) -> None:
            import yaml

            CParser.__init__(self, stream)
            yaml.constructor.SafeConstructor.__init__(self)
            yaml.resolver.Resolver.__init__(self)

    return LibyamlOmegaConfLoader
