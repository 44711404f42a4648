"""The NeMo containers we run (Bridge/Core per release) and NVIDIA's executed presets of each: data, read by everything above."""
