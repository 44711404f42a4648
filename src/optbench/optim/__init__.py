"""Optimizers: Muon with Megatron Core's semantics, its TP modes and the layer-wise distributed optimizer."""
