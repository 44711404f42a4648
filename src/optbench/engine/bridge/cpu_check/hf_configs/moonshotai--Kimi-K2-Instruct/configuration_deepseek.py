"""Stand-in for the remote configuration module of moonshotai/Kimi-K2-Instruct (written for optbench's offline tests).

The hub repository ships its own ``configuration_deepseek.py`` (loaded with ``trust_remote_code``); offline, this
file takes its place: the DeepSeek-V3 configuration class of ``transformers`` under Kimi K2's ``model_type``. It
holds no code of the hub repository. On a cluster, mount a real Hugging Face cache with the hub snapshot.
"""

from transformers import DeepseekV3Config as _DeepseekV3Config


class DeepseekV3Config(_DeepseekV3Config):
    model_type = "kimi_k2"
