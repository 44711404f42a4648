"""The built-in corpus: the English documentation that ships inside every CPython installation.

Nothing is downloaded: the text comes from the Python that runs this code.

* ``reference``: ``pydoc_data.topics``, the Python Language Reference and library topics that
  ``help()`` shows (one document per topic);
* ``library``: the docstrings of the standard library's modules, classes and functions, one document
  per module (test suites, IDLE, tkinter demos, lib2to3 and site-packages left out).

Licence: the CPython distribution's, the Python Software Foundation License Version 2 (documentation
and source). The corpus is generated on your machine from your own Python installation and never
redistributed by this project. Its content depends on the Python version (recorded in corpus.json
with the SHA-256 of every file), so two machines with the same Python build the same bytes.
"""

from __future__ import annotations

import ast
import platform
import sysconfig
from pathlib import Path

from optbench.corpus.prepare import Part
from optbench.common.errors import UserError

NAME = "pydocs"
LEFT_OUT = ("site-packages", "test", "tests", "idlelib", "lib2to3", "turtledemo", "tkinter", "ensurepip")
ABOUT = {
    "corpus": NAME,
    "what": "English documentation shipped with CPython: pydoc_data.topics (language reference topics) and the "
    "docstrings of the standard library, generated from the Python running the build",
    "licence": "Python Software Foundation License Version 2 (CPython's distribution licence); generated locally, "
    "not redistributed",
}


def _module_text(path: Path) -> str:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except (SyntaxError, ValueError):
        return ""
    texts = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node)
            if doc:
                texts.append(doc if isinstance(node, ast.Module) else f"{node.name}\n{doc}")
    return "\n\n".join(texts)


def pydocs_parts() -> list[Part]:
    """The reference topics and the standard library's docstrings of this Python."""
    try:
        from pydoc_data.topics import topics
    except ImportError as err:  # some distributions split the docs into their own package
        raise UserError(
            f"this Python ({platform.python_version()}) has no pydoc_data (install the python3-doc / full stdlib); "
            "or prepare your own folder with `make data INPUT=<folder>`",
            "corpus",
        ) from err
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    library = []
    for path in sorted(stdlib.rglob("*.py")):
        if path.relative_to(stdlib).parts[0] in LEFT_OUT:
            continue
        text = _module_text(path)
        if text.strip():
            library.append(text)
    reference = [text for _, text in sorted(topics.items()) if text.strip()]
    return [Part("reference", reference), Part("library", library)]


def ensure_pydocs(progress=print) -> None:
    """Build the corpus into <checkout>/data/pydocs (as ``make data`` does) unless it is there already
    (one an earlier optbench built without removing near-duplicate documents is built again)."""
    import json

    from optbench.common.checkout import repo_root
    from optbench.corpus.prepare import MANIFEST, prepare

    out = repo_root() / "data" / NAME
    try:
        if "near_duplicates" in json.loads((out / MANIFEST).read_text(encoding="utf-8")):
            return
    except (OSError, ValueError):
        pass
    progress(f"preparing the {NAME} corpus into {out} (make data; a few seconds, once)")
    prepare(pydocs_parts(), out, about=ABOUT)
