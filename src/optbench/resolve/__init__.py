"""Resolve once: after composition and the config checks, one frozen :class:`~optbench.resolve.resolved.ResolvedRun`
holds everything derived from the run (layout, pipeline stages, parameter placement, per-rank
Newton-Schulz work per TP mode, memory, the job's run id), and every later stage reads it."""

from optbench.resolve.resolved import ResolvedRun, resolve

__all__ = ["ResolvedRun", "resolve"]
