"""The NeMo containers we run (Bridge/Core per release), NVIDIA's executed presets of each, and the rules each release's
Bridge and Core enforce (MoE layout, CUDA graphs, FP8, Muon and Emerging-Optimizers fields): data and checks that
validation and the Bridge adapter both read."""
