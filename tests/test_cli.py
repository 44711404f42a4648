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
    no_target = set(COMMANDS) - set(targets)
    assert set(targets) - NOT_OPTBENCH <= set(COMMANDS), "a make target without a command"
    assert no_target == {"projection-tables", "ns-count", "gpu-smoke-page", "term-selection"}
    assert all(COMMANDS[name].about.startswith("maintainers: ") for name in no_target)
    for target in set(targets) - NOT_OPTBENCH:
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


PROCESS_ENTRIES = {
    "src/optbench/engine/bridge/entry.py",  # the job's entry inside the NeMo container
    "src/optbench/engine/bridge/cpu_check/plan_check.py",  # one process per Bridge environment (CHECK=bridge)
    "src/optbench/experiments/one_gpu/worker.py",  # one process per gpu-smoke arm
}
"""Processes our commands start, each its own program: they end their own way, and no user types them."""


def test_one_dispatcher_owns_from_make_and_the_one_line_refusal():
    """Issue 82 item 5: the commands' modules parse their own flags only; make's command line and how a command ends
    (one line, exit code 2) belong to python -m optbench."""
    code = [p for root in ("src", "launch") for p in (REPO / root).rglob("*.py") if "__pycache__" not in p.parts]
    rel = {p: str(p.relative_to(REPO)) for p in code}
    from_make = {rel[p] for p in code if '"--from-make"' in p.read_text()}
    ending = {rel[p] for p in code if "exit_on_user_error(" in p.read_text()}
    mains = {rel[p] for p in code if p.name == "__main__.py"}
    assert from_make == {"src/optbench/__main__.py"}
    assert ending == {"src/optbench/__main__.py", "src/optbench/common/exits.py", *PROCESS_ENTRIES}
    assert mains == {"src/optbench/__main__.py", "src/optbench/engine/local/__main__.py"}  # the local job's entry
