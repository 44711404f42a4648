"""optbench: config-driven pretraining recipes that compare emerging optimizers (Muon) with AdamW
on Megatron Bridge, with a local engine that runs the same flow on a laptop."""

__version__ = "0.1.0"
