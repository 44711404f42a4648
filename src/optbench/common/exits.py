"""How a command ends: a :class:`~optbench.common.errors.UserError` as one line and exit code 2, Ctrl-C as one line
and 130, with every known secret kept out of what is printed.

Apart from :mod:`optbench.common.errors` because it needs the redaction and the file-system messages, which
themselves raise :class:`~optbench.common.errors.UserError` (one module would be an import cycle).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Sequence

from optbench.common.errors import EXIT_BROKEN_PIPE, EXIT_INTERRUPTED, EXIT_USER_ERROR, UserError
from optbench.common.outputs import filesystem_problem
from optbench.common.redact import install_redacting_excepthook, redacted_streams


@contextlib.contextmanager
def exit_on_user_error(debug: bool = False, typed: Sequence[str] = ()) -> Iterator[None]:
    """Turn a :class:`UserError` into its report on stderr and exit code 2, Ctrl-C into one line and 130, a reader
    that left the pipe into a quiet 141.

    A file-system failure a user can fix (read-only, full disk, permission, a name too long) is one
    line too (:func:`optbench.common.outputs.filesystem_problem`). Inside the block nothing printed, tracebacks
    included, shows a known secret (:func:`optbench.common.redact.redacted_streams`).
    ``typed``: the keys of the overrides the user typed, so that the error line names one of them.
    """
    install_redacting_excepthook()
    with redacted_streams():
        try:
            yield
        except UserError as err:
            if debug:
                raise err.focused(typed) from err
            for line in err.focused(typed).report():
                print(line, file=sys.stderr)
            raise SystemExit(EXIT_USER_ERROR) from None
        except KeyboardInterrupt:
            if debug:
                raise
            print(
                "interrupted (Ctrl-C): what was written is complete (metrics.jsonl holds the finished steps); a local "
                "run with train.save_interval continues from its last checkpoint with resume=true run_id=<its run id>",
                file=sys.stderr,
            )
            raise SystemExit(EXIT_INTERRUPTED) from None
        except BrokenPipeError:
            if debug:
                raise
            # The reader of our output left (`make search | head`): stop as a Unix tool stops on SIGPIPE, with no
            # traceback, and keep the interpreter's last flush of stdout from failing once more at exit.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.__stdout__.fileno())
            raise SystemExit(EXIT_BROKEN_PIPE) from None
        except OSError as err:
            problem = filesystem_problem(err)
            if debug or problem is None:
                raise
            print(UserError(problem).lines()[0], file=sys.stderr)
            raise SystemExit(EXIT_USER_ERROR) from None
