"""Every table goes through one library (optbench.common.tables over tabulate): its cells are kept as written, and no
module builds a markdown table by hand."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from optbench.common.tables import console_table, markdown_table

REPO = Path(__file__).resolve().parents[1]


def test_markdown_cells_are_kept_as_written_and_a_pipe_cannot_end_a_cell():
    lines = markdown_table(["model", "TFLOP/s", "note"], [["kimi_k2", "1051.0", "a | b"], ["qwen3", "0.50"]])
    assert lines[0].startswith("| model") and set(lines[1]) <= {"|", "-"}
    assert "1051.0" in lines[2] and "0.50" in lines[3]  # never re-parsed as numbers (1051, 0.5)
    assert "a \\| b" in lines[2]
    assert lines[3].count("|") == lines[2].count("|") - 1  # the short row is padded with an empty cell


def test_a_row_longer_than_its_header_is_an_error():
    with pytest.raises(ValueError, match="a row of 3 cells under a header of 2"):
        markdown_table(["a", "b"], [[1, 2, 3]])


def test_console_columns_align_as_asked_and_sit_indented():
    lines = console_table(
        ["#", "layout", "TFLOP/s"], [[1, "TP1 EP8", "936.7"], [10, "TP2", "95.1"]], ("right", "left", "right")
    )
    assert all(line.startswith("  ") for line in lines)
    assert lines[1].index("936.7") + 5 == lines[2].index("95.1") + 4  # right-aligned: the numbers end together
    assert lines[1].index("TP1") == lines[2].index("TP2")
    with pytest.raises(ValueError, match="2 alignments for 3 columns"):
        console_table(["a", "b", "c"], [], ("left", "left"))


def test_no_module_builds_a_markdown_table_by_hand():
    rule = re.compile(r"""["']\|-{3}""")
    hand_built = [
        str(p.relative_to(REPO))
        for folder in ("src", "launch", "tools")
        for p in (REPO / folder).rglob("*.py")
        if rule.search(p.read_text(encoding="utf-8"))
    ]
    assert hand_built == []


def test_identifiers_from_runs_are_code_on_one_line_and_never_markup():
    """Issue 78 item 8: a carriage return in a run id split a row of results/throughput.md, and HTML and javascript:
    links in run ids and commands were copied raw."""
    from optbench.common.tables import code, escaped, markdown_table

    hostile = "x<img src=x onerror=alert(1)>[a](javascript:alert(1))`b``\rrow|pipe\x1b[31m"
    [header, rule, row] = markdown_table(["run", "notes"], [[code(hostile), escaped(hostile)]])
    assert "\r" not in row and "\x1b" not in row and row.count(" | ") == 1  # one row, two cells: the pipes are escaped
    cell = row.split(" | ")[0].lstrip("| ")
    assert cell.startswith("```") and cell.rstrip().endswith("```")  # a fence longer than any backtick run inside
    notes = row.split(" | ")[1]
    assert not re.search(r"(?<!\\)[<>\[\]`]", notes), notes  # nothing that makes a link, HTML or code is left bare
    assert "\\<img" in notes and "\\[a\\](javascript" in notes
