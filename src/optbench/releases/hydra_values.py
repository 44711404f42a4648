"""Render Python values as Hydra override values that Hydra's parser reads back exactly.

Bridge applies our overrides with Hydra's override grammar, where ``true``, ``null``, ``1e-8``,
``[a,b]`` and quoted strings mean typed values. A string is written bare when Hydra reads it back as
that same string, else single-quoted (backslashes are literal in Hydra's quoted strings except
before a quote or at the end, where they are doubled).
"""

from __future__ import annotations

import re
from typing import Any

_BARE_STRING = re.compile(r"[A-Za-z_/][A-Za-z0-9_./:+@-]*")
_HYDRA_WORDS = {"true", "false", "null", "nan", "inf"}
"""Words Hydra reads as bool, None or float (in any case): quoted when meant as strings."""


def _quote(text: str) -> str:
    """A Hydra single-quoted string: backslashes are literal except before a quote or at the end."""
    escaped = re.sub(r"(\\*)'", lambda m: m.group(1) * 2 + "\\'", text)
    escaped = re.sub(r"(\\+)$", lambda m: m.group(1) * 2, escaped)
    return f"'{escaped}'"


def hydra_value(value: Any) -> str:
    """Render a Python value so that Hydra's override parser reads back exactly that value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        bare = _BARE_STRING.fullmatch(value) and value.lower() not in _HYDRA_WORDS
        return value if bare else _quote(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(item) for item in value) + "]"
    raise TypeError(f"cannot render {value!r} as a Hydra override value")


MAPPINGS = ("env_vars.",)
"""ConfigContainer fields that are plain dicts (Bridge 0.6's ``env_vars``): a key may be new, so it is added or set
(``++``)."""


def format_override(key: str, value: Any) -> str:
    prefix = "++" if key.startswith(MAPPINGS) else ""
    return f"{prefix}{key}={hydra_value(value)}"
