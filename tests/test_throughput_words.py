"""The local engine's closing throughput line names the matrix work it adds: Newton-Schulz for Muon and AdaMuon,
SOAP's products and QR for SOAP (which runs no Newton-Schulz), nothing for AdamW."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from optbench.compose.recipe import compose_run
from optbench.engine.local.trainer import Trainer


@pytest.mark.parametrize(
    "optimizer, words",
    [
        ("adamw", None),
        ("muon", "with Newton-Schulz"),
        ("adaptive_muon", "with Newton-Schulz"),
        ("soap", "with SOAP's matrix products and QR"),
    ],
)
def test_the_closing_line_names_the_optimizers_own_work(optimizer, words, capsys, tmp_path):
    run = compose_run("kimi_k2_tiny_adamw", [f"optimizer={optimizer}"])
    summary = {
        "initial_loss": 6.3,
        "final_loss": 2.2,
        "steps": 20,
        "tokens_per_s": 800.0,
        "tflops_per_gpu": 0.013,
        "tflops_per_gpu_with_ns": 0.05,
        "peak": None,
    }
    writer = SimpleNamespace(metrics_path=tmp_path / "m", summary_path=tmp_path / "s", wandb_dir=None)
    Trainer._outro(SimpleNamespace(run=run, run_dir=tmp_path), summary, writer)
    [line] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("throughput ")]
    assert ("Newton-Schulz" in line) == (words == "with Newton-Schulz")
    assert (words is None and "(" not in line) or f" {words})" in line
