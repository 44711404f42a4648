"""User-facing errors: one line that names the field and the fix, exit code 2.

Anything a user can get wrong (a config value, a missing file, a missing tool) is
raised as :class:`UserError`. The command-line entry points catch it with
:func:`exit_on_user_error` and print ``error: <field>: <message>`` on one line,
with no traceback unless ``debug=true``.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130
"""The shell's code for a command stopped by SIGINT."""


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the input: the offending field and a sentence that says how to fix it."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


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
        return ["error: " + " ".join(str(p).split()) for p in self.problems]


@contextlib.contextmanager
def exit_on_user_error(debug: bool = False) -> Iterator[None]:
    """Turn a :class:`UserError` into its one-line messages on stderr and exit code 2, Ctrl-C into one line and 130."""
    try:
        yield
    except UserError as err:
        if debug:
            raise
        for line in err.lines():
            print(line, file=sys.stderr)
        raise SystemExit(EXIT_USER_ERROR) from None
    except KeyboardInterrupt:
        if debug:
            raise
        print(
            "interrupted (Ctrl-C): what was written is complete (metrics.jsonl holds the finished steps); a local run "
            "with train.save_interval continues from its last checkpoint with resume=true run_id=<its run id>",
            file=sys.stderr,
        )
        raise SystemExit(EXIT_INTERRUPTED) from None
