"""The cluster prerequisites a first run would trip over, said as one note each before a job is rendered or
submitted (launch/preflight.py; docs/cluster.md section 1)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from launch.jobs import job_parts
from launch.preflight import cluster_notes
from optbench.compose.recipe import compose_run
from optbench.validate import validate


def notes(recipe: str, *overrides: str) -> tuple[str, ...]:
    resolved = validate(compose_run(recipe, list(overrides)))
    parts = job_parts(resolved)
    return cluster_notes(resolved.run, parts.env, parts.mounts, parts.segment)


@pytest.fixture
def login_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A login node with enroot's login for nvcr.io, and an srun (pyxis) and sbatch (Slurm 23.11+) that know the
    options the job uses: every note then comes from the one thing a test takes away."""
    (tmp_path / "enroot").mkdir()
    (tmp_path / "enroot" / ".credentials").write_text("machine nvcr.io login $oauthtoken password SECRET-NGC-KEY\n")
    monkeypatch.setenv("ENROOT_CONFIG_PATH", str(tmp_path / "enroot"))
    (tmp_path / "bin").mkdir()
    for program, options in (("srun", "--container-image=NAME"), ("sbatch", "--segment=N")):
        path = tmp_path / "bin" / program
        path.write_text(f"#!/bin/sh\necho 'Usage: {program} [OPTIONS]'\necho '  {options}'\n")
        path.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    return tmp_path


MOUNTED = ("+cluster.env.HF_HOME=/lustre/hf_cache", "cluster.container_mounts=[/lustre/hf_cache:/lustre/hf_cache]")


def test_a_prepared_cluster_gets_no_note(login_node):
    assert notes("kimi_k2_muon", *MOUNTED) == ()


def test_a_hub_config_without_a_mounted_cache_is_said(login_node):
    [note] = notes("kimi_k2_muon")
    assert (
        note.startswith("note: hub config: Bridge reads moonshotai/Kimi-K2-Instruct's config.json")
        and "HF_HOME" in note
    )
    [note] = notes("qwen3_30b_a3b_muon", "+cluster.env.HF_HOME=/lustre/hf_cache")
    assert "cluster.env.HF_HOME=/lustre/hf_cache is inside no container mount" in note
    # Kimi K2's recipe reads no hub config before Bridge 0.4 (nemo:26.02): nothing to say there.
    assert notes("kimi_k2_muon", "cluster.container=nemo:26.02") == ()


def test_no_enroot_login_for_nvcr_is_said_and_the_credentials_never_printed(login_node):
    credentials = login_node / "enroot" / ".credentials"
    credentials.write_text("machine gitlab.example.com login me password SECRET-NGC-KEY\n")
    [note] = notes("kimi_k2_muon", *MOUNTED)
    assert note.startswith(f"note: enroot: no login for nvcr.io in {credentials}") and "SECRET" not in note
    credentials.unlink()
    assert len(notes("kimi_k2_muon", *MOUNTED)) == 1


def test_a_fifo_or_a_huge_file_in_place_of_the_credentials_neither_hangs_nor_fills_memory(login_node):
    import os
    import resource

    credentials = login_node / "enroot" / ".credentials"
    credentials.unlink()
    os.mkfifo(credentials)  # opened for reading, a FIFO with no writer blocks for ever (issue 78 item 4)
    [note] = notes("kimi_k2_muon", *MOUNTED)
    assert note.startswith(f"note: enroot: {credentials} is not a regular file")
    credentials.unlink()
    with credentials.open("wb") as handle:  # 512 MiB of one line, sparse on disk: only a bounded prefix is read
        handle.truncate(512 << 20)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    [note] = notes("kimi_k2_muon", *MOUNTED)
    assert note.startswith(f"note: enroot: no login for nvcr.io in {credentials}")
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100 * 1024  # KiB: well under the file


def test_an_srun_without_pyxis_and_an_sbatch_without_segment_are_said(login_node):
    for program in ("srun", "sbatch"):
        (login_node / "bin" / program).write_text("#!/bin/sh\necho 'Usage: a Slurm without it'\n")
    said = notes("kimi_k2_muon", *MOUNTED)
    assert [n.split(":")[1].strip() for n in said] == ["pyxis", "slurm"]
    assert "--segment=16" in said[1]
    resolved = validate(compose_run("kimi_k2_muon", list(MOUNTED)))  # a job that asks for no segment: nothing to say
    parts = job_parts(resolved)
    assert [n.split(":")[1].strip() for n in cluster_notes(resolved.run, parts.env, parts.mounts, None)] == ["pyxis"]


def test_a_dry_run_prints_the_notes_with_the_plan(login_node, capsys):
    from optbench.__main__ import main
    from conftest import marked_results

    results = marked_results(login_node / "results")
    assert main(["pretrain", "kimi_k2_muon", "dryrun=true", f"results_dir={results}"]) == 0
    out, err = capsys.readouterr()  # with the plan on stdout: a refusal's one line on stderr stays one line
    assert out.count("  note: hub config: ") == 1 and "note: enroot" not in out and "note: hub" not in err


def test_a_sweep_asks_srun_and_sbatch_once(login_node, capsys):
    from launch.dispatch import print_preflight

    asked = login_node / "asked"
    for program in ("srun", "sbatch"):
        path = login_node / "bin" / program
        path.write_text(f"#!/bin/sh\necho {program} >> {asked}\necho 'Usage: a Slurm without it'\n")
    resolved = [validate(compose_run("kimi_k2_muon", [*MOUNTED, f"train.gbs={gbs}"])) for gbs in (4096, 8192, 16384)]
    print_preflight([(r.run, job_parts(r)) for r in resolved])
    assert sorted(asked.read_text().split()) == ["sbatch", "srun"]
    assert capsys.readouterr().out.count("note: pyxis") == 1
