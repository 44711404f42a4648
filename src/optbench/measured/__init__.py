"""What ran, read back: a run folder, its metrics file or a raw Megatron Bridge log into a :class:`~.runs.MeasuredRun`.

Below every reader of measured runs (``make table`` in :mod:`optbench.report`, ``make compare`` and ``make study``
in :mod:`optbench.experiments`, the benches), above the metrics files it reads (:mod:`optbench.metrics`).

* :mod:`.megatron_log`, :mod:`.log_throughput` -- raw Megatron Bridge logs into step records;
* :mod:`.collect`, :mod:`.runs` -- results/runs/<run_id>/ into :class:`~.runs.MeasuredRun`, warm-up, medians;
* :mod:`.stats` -- the spread of repeated measurements; :mod:`.comparable` -- which two runs may be paired;
* :mod:`.loss_plot` -- loss curves of measured runs, and the one way a PNG is written.

Importing this package imports neither torch nor matplotlib (:mod:`.loss_plot` does, when imported).
"""
