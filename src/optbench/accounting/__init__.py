"""Throughput and memory accounting shared by plans and live metrics of every engine."""
