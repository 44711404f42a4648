"""Issue 79 item 3: each optional step-model term is re-decided inside every fold by an inner cross-validation on the
fold's own rows, and stays only if that nested choice improves the held-out error."""

from __future__ import annotations

from types import SimpleNamespace

from optbench.projection import term_selection


def _rows(models: dict[str, int]) -> list:
    """Stand-ins for published rows: what the schemes group by (model; one setup per row)."""
    return [
        SimpleNamespace(model=model, gpu=f"g{i}", num_gpus=8, precision="bf16")
        for model, n in models.items()
        for i in range(n)
    ]


def test_a_fold_keeps_a_term_by_its_inner_error_not_by_the_held_out_one(monkeypatch):
    """The term helps every model's rows but m2's; folds decide from their training groups only, so the fold holding
    out m2 keeps it (its training groups gain from it) although m2's own rows lose."""
    rows = _rows({"m1": 2, "m2": 2, "m3": 2})

    def fake_errors(held, holdout, published, row_runs, base):
        on = getattr(base, "activation_traffic")
        return [(6.0 if r.model == "m2" else 2.0) if on else 5.0 for r in held]

    monkeypatch.setattr(term_selection, "_errors", fake_errors)
    monkeypatch.setattr(term_selection, "TERMS", ("activation_traffic",))
    result = term_selection.select_terms(rows, "published", None)["terms"]["activation_traffic"]
    model_out = result["leave_one_model_out"]
    assert model_out["folds"] == 3 and model_out["folds_keeping_it"] == 3  # inner medians 2-4 % beat 5 %
    assert model_out["median_abs_error_percent"] == {"on": 2.0, "off": 5.0, "nested": 2.0}
    assert result["stays"]


def test_a_term_no_fold_keeps_does_not_stay(monkeypatch):
    rows = _rows({"m1": 2, "m2": 2})

    def fake_errors(held, holdout, published, row_runs, base):
        return [6.0 if getattr(base, "weight_roofline") else 4.0 for _ in held]

    monkeypatch.setattr(term_selection, "_errors", fake_errors)
    monkeypatch.setattr(term_selection, "TERMS", ("weight_roofline",))
    result = term_selection.select_terms(rows, "published", None)["terms"]["weight_roofline"]
    for scheme in term_selection.SCHEMES:
        assert result[scheme]["folds_keeping_it"] == 0
        assert result[scheme]["median_abs_error_percent"]["nested"] == result[scheme]["median_abs_error_percent"]["off"]
    assert not result["stays"]  # equal to always-off is no improvement


def test_the_command_refuses_a_folder_without_make_projections_output_in_one_line(tmp_path, capsys):
    import pytest

    from optbench.__main__ import main

    (tmp_path / "projection").mkdir()
    (tmp_path / "projection" / "validation.json").write_text("{damaged")
    for folder in (tmp_path / "absent", tmp_path):
        with pytest.raises(SystemExit) as stopped:
            main(["term-selection", "--results", str(folder)])
        [line] = capsys.readouterr().err.strip().splitlines()
        assert stopped.value.code == 2 and line.startswith("error: --results: ") and "run make projection" in line
    assert not (tmp_path / "absent").exists() and sorted(p.name for p in tmp_path.rglob("*")) == [
        "projection",
        "validation.json",
    ]
