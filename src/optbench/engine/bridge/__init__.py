"""The Megatron Bridge engine: our run config -> a Bridge recipe plus dotted overrides -> ``pretrain``.

* :mod:`optbench.engine.bridge.adapter` (pure Python, runs anywhere): which Bridge recipe function to start
  from and the ``section.field=value`` overrides that turn it into the configured run.
* :mod:`optbench.engine.bridge.entry` (inside the NeMo container): ``python -m optbench.engine.bridge.entry
  <config.yaml>`` builds the ConfigContainer with Bridge's own override mechanism and calls ``pretrain``.
* :mod:`optbench.engine.bridge.callback`: per-step throughput, MFU and memory from the accounting API,
  written to metrics.jsonl and wandb by the last rank.

Megatron Bridge imports Transformer Engine at import time, so every Bridge import lives inside a
function: these modules import on a CPU machine and are unit-tested there.
"""
