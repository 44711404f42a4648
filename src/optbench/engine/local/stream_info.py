"""What a token stream is (mock, synthetic, indexed), shown in the log and summary.json: one type every stream
returns."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StreamInfo:
    """What a stream is, for the log and summary.json."""

    kind: str
    vocab_size: int
    loss_floor: float | None
    """Lowest achievable mean loss per token in nats (None: not known)."""
    description: str
