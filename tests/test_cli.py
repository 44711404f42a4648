"""One command surface (issue 82 item 5): ``python -m optbench`` lists every command, each prints its own flags, an
unknown one is refused in one line, and every make target that runs optbench is an alias of one command."""

from __future__ import annotations

import re

import pytest

from conftest import REPO
from optbench.__main__ import COMMANDS, main

NOT_OPTBENCH = {
    "help",
    "setup",
    "setup-venv",
    "setup-submit",
    "bridge-env",
    "setup-container",
    "lint",
    "test",
    "test-fast",
    "clean",
}
"""Make targets that build environments, run the tests or clean: tools around optbench, not commands of it."""


def _recipes() -> dict[str, list[str]]:
    """Each Makefile target with its recipe lines (the tab-indented lines after ``target: ... ##``)."""
    recipes, current = {}, None
    for line in (REPO / "Makefile").read_text().splitlines():
        match = re.match(r"^([a-z][a-z-]*):(?!=)(?: [^#]*)?(?:##|$)", line)
        if match and " export " not in line:
            current = match[1]
            recipes.setdefault(current, [])
        elif line.startswith("\t") and current:
            recipes[current].append(line.strip())
        elif not line.strip() or line.startswith("#"):
            current = None
    return recipes


def test_every_make_target_that_runs_optbench_is_an_alias_of_one_command():
    targets = re.search(r"^TARGETS := (.*)$", (REPO / "Makefile").read_text(), re.M)[1].split()
    recipes = _recipes()
    assert set(targets) - NOT_OPTBENCH == set(COMMANDS), "a make target without a command, or a command without one"
    for target in COMMANDS:
        lines = [line for line in recipes[target] if "$(PY)" in line or "$(OPTBENCH)" in line]
        assert lines == [lines[0]] and lines[0].lstrip("@").startswith(f"$(OPTBENCH) {target}"), (target, lines)


def test_help_lists_every_command_and_an_unknown_one_is_refused_in_one_line(capsys):
    assert main(["--help"]) == 0
    listed = capsys.readouterr().out
    assert all(re.search(rf"^  {re.escape(name)} ", listed, re.M) for name in COMMANDS)
    assert main(["nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: command: 'nope' is not a command; use one of: {', '.join(COMMANDS)}"]


@pytest.mark.parametrize("command", list(COMMANDS))
def test_each_command_prints_its_own_flags(command, capsys):
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code == 0
    assert "usage:" in capsys.readouterr().out
