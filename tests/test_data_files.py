"""Damaged package data (issue 78 item 6): every data file is read through one checked reader, and a file that is not
as committed (binary, header only, cut short, a ``nan`` where a bandwidth belongs, a column lost, rows lost) is one
line that names the file and ``git checkout -- <file>``, never a traceback, a silent acceptance or the user's field."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import REPO
from optbench.common import data_files
from optbench.common.data_files import DamagedData

DATA = REPO / "src" / "optbench" / "data"
CSV_FILES = sorted(p.name for p in DATA.glob("*.csv"))


def _clear_caches() -> None:
    from optbench.catalog.hardware import gpu_catalog
    from optbench.catalog.models import model_registry
    from optbench.projection import hybridep_all_to_all, interconnect, nccl_all_to_all
    from optbench.releases import presets, versions

    for cached in (
        data_files._read_table,
        data_files.read_json,
        gpu_catalog,
        model_registry,
        interconnect.interconnect_catalog,
        nccl_all_to_all.measurements,
        hybridep_all_to_all.measurements,
        versions._data,
        versions.containers,
        versions.fields,
        presets.load,
    ):
        cached.cache_clear()


@pytest.fixture
def data(tmp_path, monkeypatch) -> Path:
    """A copy of the package's data folder inside a fake checkout, read in place of the real one."""
    checkout = tmp_path / "checkout"
    for folder in ("recipes", "conf"):
        (checkout / folder).mkdir(parents=True)
    copy = checkout / "src" / "optbench" / "data"
    shutil.copytree(DATA, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(data_files, "data_path", lambda name: copy / name)
    _clear_caches()
    yield copy
    _clear_caches()


def _read_every_file() -> None:
    from optbench.catalog.hardware import gpu_catalog
    from optbench.catalog.models import model_registry
    from optbench.projection import hybridep_all_to_all, interconnect, nccl_all_to_all
    from optbench.releases import presets, versions

    gpu_catalog(), model_registry(), interconnect.interconnect_catalog()
    nccl_all_to_all.measurements(), hybridep_all_to_all.measurements()
    (
        versions.containers(),
        versions.fields(versions.runnable()[0].bridge),
        presets.load(versions.runnable()[0].bridge),
    )
    from optbench.releases.release_notes import notes_for

    notes_for("nemo:26.10.01", versions.runnable()[0].name, "kimi_k2", "gb300")
    from optbench.compose.recipe import compose_run
    from optbench.releases.known_issues import issues_for

    issues_for(compose_run("qwen3_30b_a3b_adamw", ["cluster=b200", "cluster.container=nemo:26.04.01"]))


def _refusal(name: str) -> str:
    with pytest.raises(DamagedData) as refused:
        _read_every_file()
    [line] = refused.value.report()
    assert line.startswith(f"error: src/optbench/data/{name}: "), line
    assert line.endswith(f"git checkout -- src/optbench/data/{name}"), line
    return line


def test_the_committed_data_reads(data):
    _read_every_file()


@pytest.mark.parametrize("name", CSV_FILES)
def test_a_damaged_csv_is_one_line_naming_the_file(data, name):
    path, good = data / name, (data / name).read_text()
    header, *rows = good.splitlines(keepends=True)
    for damage, said in (
        (bytes(range(256)) * 8, "is not UTF-8 text"),
        (header, "holds no rows"),
        (b"", "is empty"),
        (good[: len(good) - 7], "cut short"),
        (header.replace(header.split(",")[0] + ",", "", 1) + "".join(rows), "lacks the column"),
        (header + rows[0].rstrip("\n") + ",extra\n", "more cells"),
    ):
        path.write_bytes(damage if isinstance(damage, bytes) else damage.encode())
        _clear_caches()
        assert said in _refusal(name), damage[:80]


@pytest.mark.parametrize(
    "name, column",
    [
        ("nccl_all_to_all.csv", "busbw_gb_s"),
        ("hybridep_all_to_all.csv", "combine_kernel_gb_s"),
        ("interconnect.csv", "hbm_tb_s"),
        ("gpus.csv", "peak_bf16_tflops"),
    ],
)
def test_a_value_out_of_its_domain_is_refused_not_used(data, name, column):
    import csv
    import io

    rows = list(csv.DictReader(io.StringIO((data / name).read_text())))
    for bad in ("nan", "inf", "-5", "fast", ""):
        rows[-1][column] = bad
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        (data / name).write_text(out.getvalue())
        _clear_caches()
        assert f", {column}: " in _refusal(name)


def test_rows_lost_at_a_line_break_are_said_of_the_file_not_of_the_users_gpu(data, capsys):
    """A gpus.csv cut to its first rows is well-formed: it was read as 'gb300 is not one of h100, h200', blamed on
    cluster.gpu, which the user never typed."""
    from optbench.__main__ import main

    (data / "gpus.csv").write_text("".join((data / "gpus.csv").read_text().splitlines(keepends=True)[:3]))
    assert "lacks b200, b300, gb200, gb300, which interconnect.csv lists" in _refusal("gpus.csv")
    _clear_caches()
    with pytest.raises(SystemExit) as stopped:
        main(["plan", "kimi_k2_muon", "results_dir=" + str(data.parents[2] / "results")])
    assert stopped.value.code == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: src/optbench/data/gpus.csv: lacks") and "cluster.gpu" not in line
    assert not (data.parents[2] / "results").exists()


@pytest.mark.parametrize("name", ["bridge/containers.json", "bridge/fields-0.6.0.json", "bridge/presets-0.6.0.json"])
def test_a_damaged_json_is_one_line_naming_the_file(data, name):
    for damage, said in (
        (b"\xff\xfe{", "is not UTF-8"),
        (b"[1, 2]\n", "holds a list"),
        (b'{"x": 1\n', "is not JSON"),
        (b"{}\n", "lacks"),
    ):
        (data / name).write_bytes(damage)
        _clear_caches()
        assert said in _refusal(name)
