"""Performance projection: step time, TFLOP/s and MFU of a recipe on a cluster, Muon vs its AdamW twin.

Entry points: :func:`optbench.projection.project.project` (plan.json's ``projection`` section),
:mod:`optbench.projection.ranking` (``make sweep`` ranking) and ``python -m optbench projection-tables``
(docs/projection.md's tables and chart). See docs/projection.md for the model and its sources.
"""
