"""A NeMo container newer than the newest checked one (issue 80 item 1): refused in one line without the word that
accepts it; with it, planned on the newest checked release's facts, saying so, listing what NVIDIA's public notes
say changed for the run's model and GPU (with their sources), in the widest band; the job names what it found."""

from __future__ import annotations

import pytest

from optbench.common.errors import UserError
from optbench.compose.recipe import compose_run
from optbench.config.schema import DEFAULT_CONTAINER
from optbench.releases import versions
from optbench.releases.release_notes import notes_for

NEWER = "nemo:26.10.01"


def test_the_default_container_is_the_newest_checked_one_and_defined_once():
    """A run that names no container gets the newest release checked against its real Bridge; the cluster configs
    leave the field to the schema's one default rather than each writing it again."""
    from conftest import REPO

    assert DEFAULT_CONTAINER == versions.runnable()[0].name
    from optbench.engine.bridge.cpu_check.environments import NEXT, targets

    unseen = targets()[-1]  # the CI's stand-in for an unseen release checks the newest checked container's plan
    assert unseen.name == NEXT["name"] and unseen.container == DEFAULT_CONTAINER
    assert compose_run("kimi_k2_muon", []).cluster.container == DEFAULT_CONTAINER
    written = [p.name for p in (REPO / "conf" / "cluster").glob("*.yaml") if "\ncontainer:" in p.read_text()]
    assert written == [], f"conf/cluster/{written} write cluster.container again: leave it to DEFAULT_CONTAINER"


def test_a_newer_container_needs_the_word_and_the_word_needs_a_newer_container():
    newest = versions.runnable()[0].name
    with pytest.raises(UserError) as refused:
        versions.container_of(compose_run("kimi_k2_muon", [f"cluster.container={NEWER}"]))
    [line] = refused.value.report()
    assert line.startswith(
        f"error: cluster.container: '{NEWER}' is newer than the newest release we checked ({newest})"
    )
    assert "cluster.unverified_container=true" in line
    with pytest.raises(UserError, match="drop cluster.unverified_container"):
        versions.container_of(
            compose_run("kimi_k2_muon", [f"cluster.container={newest}", "cluster.unverified_container=true"])
        )
    with pytest.raises(UserError, match="not a NeMo container we know"):  # an unknown older one stays refused
        versions.container_of(compose_run("kimi_k2_muon", ["cluster.container=nemo:26.05"]))


def test_the_notes_that_apply_are_those_after_the_assumed_release_for_the_model_and_gpu():
    newest = versions.runnable()[0].name
    kimi = notes_for(NEWER, newest, "kimi_k2", "gb300")
    assert {n.container for n in kimi} == {"nemo:26.10", "nemo:26.10.01"}
    assert any(n.topic == "dispatcher" and "NCCL EP" in n.change and n.source.startswith("https://") for n in kimi)
    assert not any(n.topic == "dispatcher" for n in notes_for("nemo:26.10", newest, "qwen3_30b_a3b", "gb200"))
    assert any(n.topic == "dispatcher" for n in notes_for(NEWER, newest, "qwen3_30b_a3b", "gb200"))
    assert notes_for(newest, newest, "kimi_k2", "gb300") == []


def test_the_plan_says_what_it_assumed_what_changed_and_takes_the_widest_band(capsys, tmp_path):
    from optbench.__main__ import main

    assert (
        main(
            [
                "plan",
                "kimi_k2_muon",
                f"cluster.container={NEWER}",
                "cluster.unverified_container=true",
                f"results_dir={tmp_path}",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    newest = versions.runnable()[0]
    assert (
        f"release     {NEWER} is a release we did not check: planned on {newest.name}'s facts (Megatron Bridge "
        f"{newest.bridge}, Megatron Core {newest.core})"
    ) in out
    assert "nemo:26.10 dispatcher: NVIDIA's Kimi K2 GB300 MXFP8 performance recipe runs the NCCL EP dispatcher" in out
    band = next(line for line in out.splitlines() if "80 % band [" in line)
    assert "class: software NVIDIA ran that we did not check" in band and "the widest held-out band" in band
    import json

    plan = json.loads((tmp_path / "plans" / "kimi_k2_muon" / "plan.json").read_text())
    assert plan["bridge"]["unverified"]["assumed_from"] == newest.name and plan["bridge"]["unverified"]["notes"]


def test_the_job_names_the_bridge_it_found_instead_of_refusing_it(capsys):
    from optbench.engine.bridge.entry import check_release

    run = compose_run("kimi_k2_muon", [f"cluster.container={NEWER}", "cluster.unverified_container=true"])
    check_release(run, "0.7.1")
    assert capsys.readouterr().out.startswith(f"note: unverified container {NEWER}: it has Megatron Bridge 0.7.1")
    with pytest.raises(UserError, match=f"the plan was made for {DEFAULT_CONTAINER}"):  # a checked one must match
        check_release(compose_run("kimi_k2_muon", [f"cluster.container={DEFAULT_CONTAINER}"]), "0.7.1")


def test_known_issues_apply_where_their_row_says_and_only_there():
    """Issue 80 item 3: a Muon run resuming on an unverified container is warned of Megatron-LM PR #6920 with its
    source; not without resume, not on a checked container (whose Core lacks the code it fixes); Bridge #4439 only
    for Qwen3-30B-A3B on B200 MXFP8 in the container it was reported on."""
    from optbench.releases.known_issues import issues_for

    unverified = [f"cluster.container={NEWER}", "cluster.unverified_container=true"]
    [issue] = issues_for(compose_run("kimi_k2_muon", [*unverified, "resume=true", "intent=train"]))
    assert issue.id == "megatron-lm#6920" and issue.source == "https://github.com/NVIDIA/Megatron-LM/pull/6920"
    assert issues_for(compose_run("kimi_k2_muon", unverified)) == []
    assert issues_for(compose_run("kimi_k2_muon", ["resume=true", "intent=train"])) == []
    assert issues_for(compose_run("kimi_k2_adamw", [*unverified, "resume=true"])) == []
    b200 = ["cluster=b200", "cluster.container=nemo:26.04.01"]
    assert [i.id for i in issues_for(compose_run("qwen3_30b_a3b_adamw", b200))] == ["megatron-bridge#4439"]
    assert issues_for(compose_run("qwen3_30b_a3b_adamw", ["cluster=b200"])) == []
