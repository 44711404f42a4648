"""Training engines: ``local`` (Hugging Face proxies with our optimizers, CPU or GPUs of one machine)
and ``megatron_bridge`` (Megatron Bridge inside the NeMo container on a cluster)."""
