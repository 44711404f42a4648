"""User-facing errors: one line that names the field and the fix, exit code 2.

Anything a user can get wrong (a config value, a missing file, a missing tool) is
raised as :class:`UserError`. The command-line entry points catch it with
:func:`optbench.common.exits.exit_on_user_error` and print ``error: <field>: <message>`` on one line,
with no traceback unless ``debug=true``. When several things are wrong, the first is the
error line and the others are named on one compact line after it; the problem that involves
a field the user typed comes first, and the line names that field.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130
"""The shell's code for a command stopped by SIGINT."""
EXIT_BROKEN_PIPE = 141
"""128 + SIGPIPE: what a shell reports for a command whose reader left (``make search | head``)."""


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the input: the offending field and a sentence that says how to fix it."""

    field: str
    message: str
    related: tuple[str, ...] = ()
    """Other fields, or whole sections, whose values decide this problem too (e.g. parallel.tp for a
    world-size problem reported on parallel.num_gpus): a typed one among them is named instead."""

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message

    def typed_field(self, typed: Sequence[str]) -> str | None:
        """The typed key (``parallel.tp``, ``cluster``) that this problem involves, if any: its own field's when that
        was typed, else the first related one's."""
        involved = [name for name in (self.field, *self.related) if name]
        for name in involved:
            for key in typed:
                if key == name or key.startswith(name + ".") or name.startswith(key + "."):
                    return key
        return None

    def named_for(self, typed: Sequence[str]) -> "Problem":
        """This problem reported on the field the user typed, when it involves one (a field under the typed
        key, such as ``data.path.0`` of ``data.path=[...]``, is already precise and stays)."""
        key = self.typed_field(typed)
        if key is None or self.field == key or self.field.startswith(key + "."):
            return self
        return Problem(key, self.message, self.related)


class UserError(Exception):
    """An input problem the user can fix; carries one or more :class:`Problem`."""

    def __init__(self, problems: Problem | Sequence[Problem] | str, field: str = "") -> None:
        if isinstance(problems, str):
            problems = [Problem(field, problems)]
        elif isinstance(problems, Problem):
            problems = [problems]
        self.problems: list[Problem] = list(problems)
        super().__init__("; ".join(str(p) for p in self.problems))

    def lines(self) -> list[str]:
        """One line per problem, newlines flattened so each really is one line."""
        return ["error: " + _flat(str(p)) for p in self.problems]

    def focused(self, typed: Sequence[str]) -> "UserError":
        """The same problems, those involving a typed key first and named on it."""
        ranked = sorted(self.problems, key=lambda p: p.typed_field(typed) is None)
        return UserError([p.named_for(typed) for p in ranked])

    def report(self) -> list[str]:
        """What a command prints: the first problem as the error line, with every other problem of the same field on
        it (one of them may carry the fix: ``valid ep here: ...``), and the others named on one line."""
        head, *others = self.problems
        same = [p for p in others if p.field == head.field]
        rest = [p for p in others if p.field != head.field]
        first = "error: " + _flat(str(head))
        if same:
            first += "; also " + "; ".join(_flat(p.message) for p in same)
        if not rest:
            return [first]
        names = ", ".join(dict.fromkeys(p.field or "config" for p in rest))
        return [
            first,
            f"  and {len(rest)} more problem{'s' if len(rest) > 1 else ''} ({names}); debug=true lists them all",
        ]


def _flat(text: str) -> str:
    """``text`` on one line: every run of whitespace (line breaks included) one space."""
    return " ".join(text.split())
