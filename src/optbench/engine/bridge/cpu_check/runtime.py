"""Bridge's ``runtime_config_update`` run as the job's ranks run it, on this CPU.

Every check of a built ConfigContainer (``make plan CHECK=bridge``, the conformance report, the preset tool) ends
here, so that what the update reads of the launch is set in one place: Bridge and Core take the world size from
``WORLD_SIZE`` (the data-parallel size and every layout rule follow from it), not from the config.
"""

from __future__ import annotations

import os
from typing import Any


def update_at(config: Any, world_size: int) -> None:
    """``runtime_config_update(config)`` as rank 0 of ``world_size`` ranks runs it (it raises what Bridge refuses)."""
    from megatron.bridge.training.config import runtime_config_update

    os.environ["WORLD_SIZE"] = str(world_size)
    os.environ.setdefault("RANK", "0")  # the one process checking is rank 0 (Core warns when it cannot tell)
    runtime_config_update(config)
