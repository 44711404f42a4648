"""Run configuration: typed schema, Hydra composition and derived layout."""
