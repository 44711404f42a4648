"""Each NeMo container's real Megatron Bridge and Core, run on a CPU: the environments, the stand-ins that let them
import without CUDA, an offline Hugging Face cache, and the check of a plan against them.

* :mod:`.environments` (runs by path, before anything is installed): one Bridge + Core per container, in
  ``.venv-bridge``, ``.venv-bridge5`` and ``.bridge-releases/<bridge>/`` (``make bridge-env``);
* :mod:`.stand_ins`: import-only Transformer Engine and friends, faked CUDA device properties;
* :mod:`.hf_cache`: the model configs Bridge's recipe functions read, laid out as an offline hub cache;
* :mod:`.readback`: reading an override back from the ConfigContainer Bridge built;
* :mod:`.runtime`: Bridge's ``runtime_config_update`` at a world size (every check ends with it);
* :mod:`.plan_check` (runs by path in a Bridge environment): each plan.json's Bridge setup built with that real
  Bridge, every override read back, Bridge's ``runtime_config_update`` at the plan's world size
  (``make plan/pretrain/sweep CHECK=bridge``; the tests' conformance report does the same for every recipe).

Nothing here is imported by the job in the NeMo container, which has the real packages.
"""


def polyfill_typing() -> None:
    """typing.override is Python 3.12's; Emerging-Optimizers 0.3 (Core 0.19) imports it. The Bridge environments here
    run Python 3.11: it is filled from typing_extensions before anything imports Megatron."""
    import typing

    if not hasattr(typing, "override"):
        import typing_extensions

        typing.override = typing_extensions.override
