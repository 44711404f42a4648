"""Megatron Bridge's published pre-training throughput, every release, into results/published/published.csv.

Reads ``docs/performance-summary.md`` and ``docs/performance-summary-archive.md`` at the mirror's HEAD of
NVIDIA-NeMo/Megatron-Bridge: one "## <release> NeMo Container" section per release, pre-training tables
per model (from 26.02) or per system (25.11, with a Model column). Keeps every pre-training row, from 25.11
on, of each transformer model of the catalog (optbench/data/models.csv: Kimi K2, DeepSeek-V3, Qwen3
30B-A3B and 235B-A22B, GPT-OSS 120B, Llama 3 8B and 70B, Llama 3.1 405B) on GB300, GB200, B300, B200 and
H100, NVFP4 rows included; every number is copied as published, a footnote's text goes into the row's note.
The blog's rows (source nvidia_blog_table1) are kept as they are.

Left out, each for its reason:

* hybrid Mamba models (Nemotron 3 Nano, Super, Ultra, 3.5 Lightning) and DeepSeek-V4 Flash: no catalog entry
  (their layers are not the transformer our FLOPs rule and step model describe);
* 25.09's tables: they state no precision (the notes say only that a figure in parentheses used another
  quantization granularity), and several cells give two layouts for one row ("FSDP 64 (0)", "TP 1 (2)"), so a
  figure's configuration is not given; 25.09 is also older than every container we run or compose.

    python tools/bridge_perf_rows.py
"""

from __future__ import annotations

import csv
import io
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bridge_sources import BRIDGE_REPO, git  # noqa: E402
from optbench.catalog.hardware import gpu_catalog  # noqa: E402
from optbench.common.io import atomic_write_text  # noqa: E402
from optbench.catalog.models import model_registry  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = ROOT / "results" / "published"
FILES = ("docs/performance-summary.md", "docs/performance-summary-archive.md")
FIRST_RELEASE = (25, 11)
MODELS = {entry.nvidia_table_key: model for model, entry in model_registry().items()}
"""NVIDIA's table name (normalised as model_key does) -> our model id (the model registry, optbench/data/models.csv)."""
SYSTEMS = {spec.nvidia_system: gpu for gpu, spec in gpu_catalog().items()}
"""NVIDIA's system name -> our GPU id (the GPU registry, optbench/data/gpus.csv)."""
PRECISIONS = {"MXFP8": "mxfp8", "FP8-MX": "mxfp8", "FP8-CS": "fp8_cs", "FP8": "fp8", "BF16": "bf16", "NVFP4": "nvfp4"}
"""NVIDIA's precision name -> the row's precision id (published.csv names FP8 current scaling 'fp8' as 26.02 on do)."""
COLUMNS = {
    "System": "system",
    "Model": "model",
    "#-GPUs": "num_gpus",
    "Precision": "precision",
    "GBS": "gbs",
    "MBS": "mbs",
    "Sequence Length": "seq_length",
    "FSDP": "fsdp",
    "TP": "tp",
    "PP": "pp",
    "CP": "cp",
    "VP": "vpp",
    "EP": "ep",
    "Tokens / sec / GPU": "tokens",
    "Model TFLOP / sec / GPU": "tflops",
}


def model_key(text: str) -> tuple[str | None, str]:
    """('deepseek_v3', 'w/o MTP') from 'DeepSeekV3 (w/o MTP)'."""
    match = re.match(r"\s*([^(]+?)\s*(?:\((.*)\))?\s*$", text)
    name = (match.group(1) if match else text).lower().replace(" ", "")
    return MODELS.get(name), (match.group(2) or "") if match else ""


def number(text: str) -> str:
    """The first number of a cell ('37556 (36108)' -> '37556'); '' for n/a."""
    match = re.match(r"\s*([\d.]+)", text)
    return match.group(1) if match else ""


FOOTNOTE = re.compile(r"\[\^([\w-]+)\]")


def footnotes(text: str) -> dict[str, str]:
    """A page's footnotes: '[^gpt-oss-note]: Performance regression ...' -> {'gpt-oss-note': 'Performance ...'}."""
    return {m.group(1): m.group(2).strip() for m in re.finditer(r"^\[\^([\w-]+)\]:\s*(.+)$", text, re.MULTILINE)}


def rows_of(text: str, path: str) -> list[dict[str, str]]:
    out = []
    release = model = system = None
    header: list[str] | None = None
    pretraining = False
    notes: list[str] = []
    for line in text.splitlines():
        if m := re.match(r"## ([\d.]+) NeMo Container", line):
            release, header, pretraining = m.group(1), None, False
        elif line.startswith("### "):
            pretraining = "Pre-Training" in line
        elif m := re.match(r"#### Model: (.+)", line):
            model, system, header = m.group(1).strip(), None, None
        elif m := re.match(r"#### System: (.+)", line):
            system, model, header = m.group(1).strip(), None, None
        elif line.startswith("|") and release and pretraining:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if cells[0] in ("System", "Model"):
                header = [COLUMNS.get(c, c) for c in cells]
                continue
            if header is None or set(cells[0]) <= {"-", ":"}:
                continue
            row = dict(zip(header, cells))
            out.append(
                {
                    "release": release,
                    "model_text": row.get("model", model or ""),
                    "system": row.get("system", system or ""),
                    **row,
                    "where": path,
                }
            )
        elif line.startswith("- ") and release:
            notes.append(line)
    return out


def published_rows() -> list[dict[str, str]]:
    commit = git(BRIDGE_REPO, "rev-parse", "HEAD").strip()
    rows = []
    for path in FILES:
        page = git(BRIDGE_REPO, "show", f"HEAD:{path}")
        notes_of = footnotes(page)
        for raw in rows_of(page, path):
            if tuple(int(x) for x in raw["release"].split(".")[:2]) < FIRST_RELEASE:
                continue
            model, variant = model_key(raw["model_text"])
            gpu = SYSTEMS.get(raw["system"])
            precision = PRECISIONS.get(raw["precision"].split("(")[0].strip())
            if not (model and gpu and precision) or not number(raw["tflops"]):
                continue
            notes = [f"{path} at {commit[:9]}"]
            if variant:
                notes.append(variant)
            notes += [
                f"footnote: {notes_of[name]}"
                for name in dict.fromkeys(FOOTNOTE.findall("|".join(raw.values())))
                if name in notes_of
            ]
            if model == "kimi_k2":
                notes.append("table footnote: Muon optimizer was used")
            else:
                notes.append("optimizer not stated in the table; NVIDIA's preset is distributed Adam")
            if "(" in raw["precision"] or "(" in raw["tflops"]:
                notes.append(f"published as '{raw['precision']}' / '{raw['tflops']}': the first figure is kept")
            rows.append(
                {
                    "source": "bridge_perf_summary",
                    "release": raw["release"],
                    "model": model,
                    "gpu": gpu,
                    "num_gpus": number(raw["num_gpus"]),
                    "precision": precision,
                    "gbs": number(raw["gbs"]),
                    "mbs": number(raw["mbs"]),
                    "seq_length": number(raw["seq_length"]),
                    "tp": number(raw["tp"]),
                    "pp": number(raw["pp"]),
                    "vpp": number(raw["vpp"]),
                    "cp": number(raw["cp"]),
                    "ep": number(raw["ep"]),
                    "etp": "",
                    "fsdp": number(raw.get("fsdp", "")),
                    "optimizer": "muon" if model == "kimi_k2" else "adamw",
                    "tokens_per_s_per_gpu": number(raw["tokens"]),
                    "tflops_per_gpu": number(raw["tflops"]),
                    "note": "; ".join(notes),
                    "flops_counted": "model",
                    "model_tflops_per_gpu": number(raw["tflops"]),
                    "ns_tflops_per_gpu": "",
                }
            )
    return rows


def main() -> int:
    path = PUBLISHED / "published.csv"
    with path.open() as f:
        reader = csv.DictReader(f)
        fields = list(reader.fieldnames or [])
        fields += [column for column in ("fsdp",) if column not in fields]
        kept = [row for row in reader if row["source"] != "bridge_perf_summary"]
    rows = published_rows()
    rows.sort(key=lambda r: (r["model"], tuple(int(x) for x in r["release"].split(".")), r["gpu"], r["precision"]))
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows(kept + rows)
    atomic_write_text(path, text.getvalue())
    print(f"{len(rows)} Bridge rows ({len({r['release'] for r in rows})} releases) + {len(kept)} other rows -> {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
