"""Reports: published figures beside measured runs (``make table``) and Muon's time-to-target (``make compare``).

Modules, in the order data flows (docs/results.md explains the rules):

* :mod:`.published` -- results/published/published.csv and sources.csv;
* :mod:`.megatron_log`, :mod:`.log_throughput` -- raw Megatron Bridge logs into step records;
* :mod:`.collect`, :mod:`.runs` -- results/runs/<run_id>/ into :class:`~.runs.MeasuredRun`, warm-up, medians;
* :mod:`.table`, :mod:`.table_format`, :mod:`.plots`, :mod:`.throughput` -- results/throughput.{md,csv} and plots;
* :mod:`.compare`, :mod:`.compare_run`, :mod:`.compare_format` -- results/compare.{md,json,csv}.

Importing this package imports neither torch nor matplotlib.
"""
