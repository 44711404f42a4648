"""Composition: a recipe, the config groups, the release's preset and the typed overrides -> one typed run."""
