"""The step model's price of each matrix the Muon benchmark timed, and how far the measurement is from it.

The price is the projection's own (:func:`optbench.projection.work.muon_matrix_cost` and
:func:`~optbench.projection.work.launch_excess_s`) at the measured GPU's datasheet bf16 peak and effective HBM
rate (data/gpus.csv, data/interconnect.csv): one parameter, one orthogonalization, 5 Newton-Schulz steps.
"""

from __future__ import annotations

from typing import Any

NS_STEPS = 5


def _price(shape: tuple[int, int], a, rate_ns: float, hbm: float) -> dict[str, float]:
    from optbench.accounting.ns_flops import ns_flops
    from optbench.projection.work import launch_excess_s, muon_matrix_cost

    rows, cols = shape
    flops = ns_flops(rows, cols, NS_STEPS)
    gemm, elementwise, ops = muon_matrix_cost(rows * cols, ((min(shape), flops),), NS_STEPS, a, rate_ns, hbm)
    launch = launch_excess_s(gemm, elementwise, ops, a)
    return {
        "ns_flops": flops,
        "ns_at_efficiency_s": flops / rate_ns,
        "ns_gemm_s": gemm,
        "elementwise_s": elementwise,
        "ops": ops,
        "launch_s": launch,
        "muon_s": gemm + elementwise + launch,
        "adamw_s": rows * cols * a.adam_bytes_per_element / hbm,
    }


HOST_BOUND = 0.9
"""A shape whose host time to issue its step is at least this share of its device time is launch-bound: its
time says nothing about its GEMMs."""


def gram_slowdown_points(data: dict[str, Any]) -> list[tuple[int, float]]:
    """(Gram size, measured Newton-Schulz time over its FLOP time at ``ns_gemm_efficiency``) for every GPU-bound
    shape: the Muon time less the model's element-wise time, what ``Assumptions.ns_small_gram_*`` is fitted to."""
    points = []
    for case in data["cases"]:
        if "muon" not in case or _host_bound(case):
            continue
        price = case["price"]
        points.append(
            (min(case["shape"]), (case["muon"]["seconds"] - price["elementwise_s"]) / price["ns_at_efficiency_s"])
        )
    return points


def _host_bound(case: dict[str, Any]) -> bool:
    return "muon" in case and case["muon"]["host_seconds"] >= HOST_BOUND * case["muon"]["seconds"]


GRAM_GRID = range(500, 2000, 5)
"""The ``g0`` values the fit tries (the grouped-GEMM fit's grid is in rows per expert, two decades lower)."""


def weighted_ratios(cases: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per model: its matrices' measured Muon (and AdamW) seconds summed over every matrix of the model, over the
    model's price of the same (each shape weighted by how many matrices of it the model has)."""
    sums: dict[str, list[float]] = {}
    for case in cases:
        if "muon" not in case:
            continue
        for user, count in case["users"].items():
            model = user.split(":", 1)[0]
            s = sums.setdefault(model, [0.0, 0.0, 0.0, 0.0])
            s[0] += count * case["muon"]["seconds"]
            s[1] += count * case["price"]["muon_s"]
            s[2] += count * case["adamw"]["seconds"]
            s[3] += count * case["price"]["adamw_s"]
    return {
        m: {"muon": s[0] / s[1], "adamw": s[2] / s[3], "muon_minus_adamw": (s[0] - s[2]) / (s[1] - s[3])}
        for m, s in sums.items()
    }


def model_prices(result: dict[str, Any]) -> dict[str, Any]:
    """Adds each case's price to ``result['cases']`` and returns what the report states about them: the constants
    priced with, the weighted ratios per model, and the host time per eager op the launch-bound shape measured."""
    from optbench.catalog.hardware import gpu_catalog
    from optbench.projection.assumptions import DEFAULT_ASSUMPTIONS as a
    from optbench.projection.interconnect import interconnect_for

    spec, link = gpu_catalog().get(result["gpu"]), interconnect_for(result["gpu"])
    if spec is None or link is None:
        return {"priced": False, "price_reason": f"{result['gpu']} is not in data/gpus.csv and data/interconnect.csv"}
    rate_ns, hbm = a.ns_gemm_efficiency * spec.peak("bf16") * 1e12, link.hbm_effective
    for case in [*result["cases"], result["launch"]]:
        case["price"] = _price(tuple(case["shape"]), a, rate_ns, hbm)
        if "muon" in case:
            case["ns_tflops"] = case["price"]["ns_flops"] / case["muon"]["seconds"] / 1e12
    launch = result["launch"]
    per_op = {}
    if "muon" in launch:
        ops = launch["price"]["ops"]
        per_op = {"device_s": launch["muon"]["seconds"] / ops, "host_s": launch["muon"]["host_seconds"] / ops}
        bound = [c["muon"]["seconds"] / c["price"]["ops"] for c in result["cases"] if _host_bound(c)]
        if bound:
            per_op["recipe_shapes_s"] = [min(bound), max(bound)]
    return {
        "priced": True,
        "peak_bf16_tflops": spec.peak("bf16"),
        "hbm_effective_tb_s": hbm / 1e12,
        "assumptions": {
            "ns_gemm_efficiency": a.ns_gemm_efficiency,
            "eager_op_overhead_s": a.eager_op_overhead_s,
            "ns_small_gram_rows": a.ns_small_gram_rows,
            "ns_small_gram_power": a.ns_small_gram_power,
            "muon_bytes_per_element": a.muon_bytes_per_element,
            "adam_bytes_per_element": a.adam_bytes_per_element,
        },
        "per_op": per_op,
        "weighted": weighted_ratios(result["cases"]),
    }
