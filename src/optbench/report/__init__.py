"""Reports: published figures beside measured runs (``make table``) and the projection's generated pages.

Modules, in the order data flows (docs/results.md explains the rules):

* :mod:`optbench.catalog.published` and :mod:`optbench.measured` (below this package) -- the published rows, and
  results/runs/<run_id>/ or a raw Megatron Bridge log read back as a measured run;
* :mod:`.table`, :mod:`.table_format`, :mod:`.beside_plan`, :mod:`.planned`, :mod:`.plots`, :mod:`.throughput`
  -- results/throughput.{md,csv} and its plots;
* :mod:`.validation_report` (``make projection``), :mod:`.projection_tables`, :mod:`.search_ranks`,
  :mod:`.ns_report` -- the projection's generated pages, from the runs the planner composes.

Importing this package imports neither torch nor matplotlib.
"""
