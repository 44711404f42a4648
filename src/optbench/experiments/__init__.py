"""Experiments that train on this machine (make compare, make study): they sit above the launcher and the report."""
