"""Text corpora turned into Megatron indexed datasets (``make data``)."""
