"""tools/gpu_wheels.py: the wheels carried to a lent GPU machine are the project's own pins (issue 55 item 3)."""

from __future__ import annotations

import importlib.util
import re
from importlib.metadata import version

import pytest

from conftest import REPO
from optbench.common.errors import UserError


def _tool():
    spec = importlib.util.spec_from_file_location("gpu_wheels", REPO / "tools" / "gpu_wheels.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_carried_wheel_is_an_exact_pin_of_what_the_project_runs():
    tool = _tool()
    wanted = tool.wanted()
    assert all(re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][0-9A-Za-z.]*", spec) for spec in wanted), wanted
    pins = dict(spec.split("==") for spec in wanted)
    for name in tool.PROJECT_PACKAGES:  # what make setup installed for the tests
        assert pins[name] == version(name)
    from optbench.engine.bridge.cpu_check.environments import EMERGING_OPTIMIZERS, TRANSFORMERS
    from optbench.releases import versions

    newest = versions.runnable()[0]  # make gpu-smoke plans for it, and the job refuses any other Bridge
    assert (pins["megatron-core"], pins["megatron-bridge"], pins["emerging-optimizers"]) == (
        tool.newest_container().core,
        newest.bridge,
        EMERGING_OPTIMIZERS,
    )
    assert len(pins) == len(wanted)  # no package twice
    overlay = dict(spec.split("==") for spec in tool.bridge_overlay())
    assert overlay["transformers"] == TRANSFORMERS[".".join(newest.bridge.split(".")[:2])]


def test_a_folder_the_tool_did_not_make_is_refused_and_left_alone(tmp_path):
    tool = _tool()
    mine = tmp_path / "wheels"
    mine.mkdir()
    (mine / "keep.whl").write_text("a user's file")
    with pytest.raises(UserError, match="did not make it"):
        tool._folder(mine)
    assert [p.name for p in mine.iterdir()] == ["keep.whl"]


def test_only_the_wheels_it_downloaded_are_replaced_and_only_after_a_complete_download(tmp_path):
    """Issue 78 item 10: a wheel the user put in the tool's folder was deleted, even when the download then failed."""
    tool = _tool()
    made = tool._folder(tmp_path / "new")
    (made / "old.whl").write_text("from an earlier run")
    tool._record(made, ["old.whl"])
    (made / "mine.whl").write_text("the user's own wheel")

    def fails(staging):
        (staging / "half.whl").write_text("a partial download")
        raise UserError("`pip download` failed", "pip")

    before = sorted(p.name for p in made.rglob("*"))
    with pytest.raises(UserError, match="failed"):
        tool.download(tool._folder(made), fetch=fails)
    assert sorted(p.name for p in made.rglob("*")) == before  # nothing changed, no staging folder left

    def fetches(staging):
        (staging / "new.whl").write_text("downloaded")
        (staging / "bridge" / "overlay.whl").write_text("downloaded")

    got = tool.download(tool._folder(made), fetch=fetches)
    assert sorted(p.relative_to(made).as_posix() for p in got) == ["bridge/overlay.whl", "new.whl"]
    assert not (made / "old.whl").exists() and (made / "mine.whl").read_text() == "the user's own wheel"
    assert tool._downloaded(made) == ["bridge/overlay.whl", "new.whl"]
    (made / "new.whl").unlink()
    (made / "new.whl").write_text("the user's own build of it, after the run")
    tool._record(made, ["bridge/overlay.whl"])
    with pytest.raises(UserError, match="did not download"):  # a download would replace the user's file: refused
        tool.download(made, fetch=fetches)
    assert (made / "new.whl").read_text() == "the user's own build of it, after the run"


def test_a_marker_line_naming_a_place_outside_the_folder_is_never_acted_on(tmp_path):
    """A marker edited (or forged) to list /abs/path.whl or ../x.whl must not make a download delete that file."""
    tool = _tool()
    victim, sibling = tmp_path / "victim.whl", tmp_path / "sibling.whl"
    victim.write_text("the user's")
    sibling.write_text("the user's")
    made = tool._folder(tmp_path / "out")
    tool._record(made, [str(victim), "../sibling.whl", "other/x.whl", "bridge/ok.whl", "ok.whl"])
    assert tool._downloaded(made) == ["bridge/ok.whl", "ok.whl"]
    tool.download(made, fetch=lambda staging: (staging / "new.whl").write_text("downloaded"))
    assert victim.read_text() == sibling.read_text() == "the user's"
