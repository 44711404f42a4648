"""Live progress on the terminal: a tqdm bar with loss and throughput, or plain lines when not a terminal.

On a terminal the bar redraws in place on stderr. In CI logs and pipes, where a redrawing bar
becomes noise, it prints one line per ``log_interval`` steps instead (and the last step always).
"""

from __future__ import annotations

import sys
from typing import Any, TextIO


def flops_text(tflops: float) -> str:
    """Model throughput per GPU (process), in TFLOP/s, or GFLOP/s below 1 TFLOP/s (CPUs)."""
    return f"{tflops:.1f} TFLOP/s" if tflops >= 1 else f"{tflops * 1e3:.2f} GFLOP/s"


def _line(record: dict[str, Any], total: int) -> str:
    return (
        f"step {record['step']}/{total}  loss {record['loss']:.4f}  lr {record['lr']:.2e}  "
        f"{record['tokens_per_s']:,.0f} tok/s  {flops_text(record['tflops_per_gpu'])}/proc  "
        f"{record['step_time_s']:.2f} s/step" + _validation(record)
    )


def _validation(record: dict[str, Any]) -> str:
    return f"  val_loss {record['val_loss']:.4f}" if record.get("val_loss") is not None else ""


class Progress:
    """Shows each step record as it arrives (only on the process that writes metrics)."""

    def __init__(
        self, total: int, initial: int = 0, *, enabled: bool = True, log_interval: int = 1, stream: TextIO | None = None
    ) -> None:
        self.total, self.enabled, self.log_interval = total, enabled, max(1, log_interval)
        self.stream = stream or sys.stderr
        self._bar = None
        if enabled and self.stream.isatty():
            from tqdm import tqdm

            self._bar = tqdm(total=total, initial=initial, unit="step", file=self.stream, dynamic_ncols=True)

    def update(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.set_postfix_str(
                f"loss {record['loss']:.4f} | {record['tokens_per_s']:,.0f} tok/s | "
                f"{flops_text(record['tflops_per_gpu'])}/proc" + _validation(record).replace("  ", " | ", 1),
                refresh=False,
            )
            self._bar.update(1)
        if self._bar is not None and record.get("val_loss") is not None:
            self._bar.write(_line(record, self.total), file=sys.stdout)
        elif self._bar is None and (record["step"] % self.log_interval == 0 or record["step"] == self.total):
            print(_line(record, self.total), file=self.stream, flush=True)

    def write(self, text: str) -> None:
        """Print a message without breaking the bar."""
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.write(text, file=sys.stdout)
        else:
            print(text, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
