"""Experiments that train on this machine (make compare, make study, make gpu-smoke): beside the launcher and the report
(independent of both), above the planner they prepare runs with."""
