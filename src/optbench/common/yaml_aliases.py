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


def yaml_error_place(err: Exception) -> str:
    """``:line:column`` (1-based) where a YAML syntax error was found, "" when PyYAML gives no mark."""
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    return f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""


def yaml_error_text(err: Exception) -> str:
    """A YAML syntax error's message on one line, without PyYAML's file excerpt (the place says where)."""
    parts = [getattr(err, "problem", None), getattr(err, "context", None)]
    text = "; ".join(p for p in parts if p) or str(err).splitlines()[0]
    return " ".join(text.split())[:200]
