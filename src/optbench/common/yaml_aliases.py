"""YAML aliases, which optbench refuses in every file it reads: a few lines of them expand to billions of values.

Below both readers: the config groups Hydra composes (:mod:`optbench.compose.config_files`) and a run's resolved
config read back by an engine (:mod:`optbench.runs`).
"""

from __future__ import annotations


def yaml_alias_used(text: str) -> bool:
    """Whether YAML ``text`` uses an alias (``*name``), found from its events without building a node."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return any(isinstance(event, yaml.AliasEvent) for event in yaml.parse(text, Loader=loader))
