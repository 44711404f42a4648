"""The a-priori constants of the step-time model: stated, sourced, never fitted to a Muon figure.

The only fitted number of the projection is the model-GEMM efficiency, calibrated on a published
AdamW figure (:mod:`optbench.projection.calibration`). Everything Muon adds is priced with the
constants below; docs/projection.md shows how the Muon prediction moves when each one moves.

Kernel counts per Muon parameter, read from Megatron Core 0.16.1 ``TensorParallelMuon`` and
Emerging-Optimizers ``OrthogonalizedOptimizer.step`` / ``newton_schulz`` (eager PyTorch, one
parameter at a time, no batching or CUDA graphs):

* per parameter: decoupled weight decay ``p.add_``, momentum ``lerp_``, Nesterov ``lerp``, the
  update ``p.add_``: 4;
* per Newton-Schulz call (a split QKV makes 3 calls): ``F.normalize`` (norm, clamp_min, div: 3), the
  cast to bf16 for ``fp32_matmul_prec='medium'`` and back (2), the scale ``* scale * extra`` (2): 7;
* per iteration: ``X @ X.mT`` (1 GEMM) and two ``torch.addmm`` with beta != 0, each a copy of the
  input into the output plus a GEMM (2 + 2): 5. The SYRK path (``tsyrk_ex`` twice, one addmm): 4.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from optbench.accounting.assignment import DEFAULT_COST_MODEL

NS_PEAK_FRACTION_OF_BF16 = {"auto": 1.0, "medium": 1.0, "high": 0.5, "highest": 1.0 / 15.0}
"""Newton-Schulz matmul peak by ``fp32_matmul_prec``, as a fraction of the dense bf16 peak: medium
casts to bf16 (Emerging-Optimizers), high runs TF32 (half the bf16 rate on Hopper and Blackwell
datasheets, e.g. H100 495 vs 989 TFLOP/s), highest runs fp32 on CUDA cores (H100 67 vs 989: ~1/15)."""


EAGER_OP_OVERHEAD_MEASURED_ON = "the x86 hosts of an H200 and an H100 machine"
"""Where ``Assumptions.eager_op_overhead_measured_s`` was measured (results/bench/ and results/bench/h100/)."""


@dataclass(frozen=True)
class Assumptions:
    """A-priori constants of the step-time model (see the module docstring and docs/projection.md)."""

    ns_gemm_efficiency: float = 0.70
    """Fraction of the Newton-Schulz peak that NS GEMMs on a large Gram matrix sustain. cuBLAS reaches 65-80 % of
    the dense (boost-clock) bf16 peak on large GEMMs on Hopper and Blackwell; 0.70 is the middle. Not fitted (one
    H200 measured 0.64-0.67 at a 7168 Gram size: results/bench/muon_matrices.md)."""
    ns_small_gram_rows: float = 1040.0
    """``g0`` of the small-Gram slowdown ``s(g) = 1 + (g0 / g) ** ns_small_gram_power`` (``g``: the Gram size, the
    smaller side of the matrix a rank orthogonalizes): a Newton-Schulz call takes ``s(g)`` times its FLOP time at
    ``ns_gemm_efficiency``, because ``X X^T`` and the Gram products have ``g x g`` outputs, too few tiles to fill the
    GPU when ``g`` is small. Fitted (log least squares) to upstream Muon's per-matrix times on one NVIDIA H200 for
    every GPU-bound matrix shape of the three cluster recipes (results/bench/muon_matrices.md, `make bench-gpu`),
    never to a published row (13 points): 1.08 at 7168, 1.17 at 4096, 1.41 at 2048, 2.02 at 1024, 3.51 at 512. Applied
    to every GPU as a fraction of its own peak (Blackwell's NS GEMMs were not measured) and to SYRK's kernels alike."""
    ns_small_gram_power: float = 1.3
    """``p`` of the small-Gram slowdown above (same fit)."""
    ns_small_grams: bool = True
    """Price the small-Gram slowdown; False prices every NS GEMM at ``ns_gemm_efficiency`` (the model before it)."""
    eager_op_overhead_s: float = 10e-6
    """Host time to issue one eager PyTorch op (Python, dispatcher, cudaLaunchKernel): published
    estimates range 5-25 us per op; 10 us is the middle. Kernels shorter than this are launch-bound. Measured
    13-32 us per op for upstream Muon on the x86 hosts of an H200 and an H100 machine
    (``eager_op_overhead_measured_s``);
    a GB300's host is a Grace CPU, which no session has measured, so the a-priori figure stays (docs/projection.md
    section 4 gives what the measured ones would change)."""
    eager_op_overhead_measured_s: tuple[float, float] = (13.1e-6, 32.1e-6)
    """The lowest and highest host time per eager op measured for upstream Muon on the recipes' launch-bound matrices,
    over two machines with x86 hosts: one H200 (13.1-23.5 us, results/bench/muon_matrices.md) and one H100
    (15.2-32.1 us, results/bench/h100/muon_matrices.md); a test holds these to them. Not used for the projection
    itself: a plan whose Muon overhead is mostly launches prints what it would be at either end."""
    launch_bound_share: float = 0.25
    """Share of Muon's projected overhead in kernel launches from which a plan prints the measured-range line."""
    muon_ops_per_param: int = 4
    """Eager ops per Muon parameter outside Newton-Schulz (weight decay, momentum, Nesterov, update)."""
    ns_ops_per_call: int = 7
    """Eager ops per Newton-Schulz call outside the iterations (normalize 3, bf16 casts 2, scale 2)."""
    ns_ops_per_iteration: int = 5
    """Eager ops per Newton-Schulz iteration (X X^T, and two addmm of copy + GEMM)."""
    ns_ops_per_iteration_syrk: int = 4
    """Eager ops per iteration with the SYRK kernels (two tsyrk_ex, one addmm of copy + GEMM)."""
    adam_bytes_per_element: float = DEFAULT_COST_MODEL.adam_bytes_per_element
    """HBM bytes per element of a fused AdamW update (optbench.accounting.assignment.CostModel)."""
    muon_bytes_per_element: float = DEFAULT_COST_MODEL.muon_bytes_per_element
    """HBM bytes per element of Muon's element-wise work around Newton-Schulz (CostModel)."""
    moment2_bytes_per_element: float = 48.0
    """AdaMuon (adamuon) on top of Muon: square, lerp_, sqrt, + eps, divide, each reading and writing fp32 (48 bytes;
    normuon's row/column means read less but the same count is used)."""
    moment2_ops: int = 5
    """AdaMuon's eager ops per matrix on top of Muon's (square, lerp_, sqrt, + eps, divide)."""
    qr_efficiency: float = 0.25
    """Fraction of the fp32 (CUDA-core) peak a Householder QR (cuSOLVER geqrf + orgqr; an optimizer's
    ``MatrixFlops.qr``) of a 1-8k square matrix
    sustains: its panel factorisation is memory-bound; a quarter is a middle figure for blocked QR. Not fitted."""
    fp8_cast_bytes_per_element: float = 4.0
    """HBM bytes per weight element to quantize bf16 weights to FP8 row- and column-wise copies once a
    step (read 2, write 1 + 1; scales neglected)."""
    dispatch_bytes_per_element: float = 2.0
    """Bytes per hidden element of a token sent by the MoE dispatcher (bf16 dispatch and combine)."""
    backward_share: float = 2.0 / 3.0
    """Share of a microbatch's GEMM FLOPs in its backward pass (data and weight gradient: 2 of 3)."""
    weight_roofline: bool = False
    """Bound each GEMM class by its weight traffic as well as its FLOPs (roofline: Williams, Waterman and Patterson,
    CACM 2009): forward and data gradient read the weights, the weight gradient reads and writes the main gradient
    it accumulates into (Megatron's ``gradient_accumulation_fusion``, on wherever APEX's fused kernel is installed,
    as in the NeMo container). What binds is expert GEMMs with few rows per expert (low EP, small MBS). No
    constant is fitted: the bytes follow from the precision, the bandwidth is interconnect.csv's HBM figure.
    Off by the term-selection rule (``python -m optbench term-selection``: a term stays when its nested median,
    averaged over leaving one setup and one model out, is below the term off): on 162 rows (2026-12-08, NVFP4 and
    FSDP in) nested and off are equal, 7.12 % and 22.04 %, so it does not stay. It was on by 0.005 points on 136 rows
    and off on 111, where it changed no error: a tie every time. The small-expert-GEMM slowdown below prices the same
    few-row GEMMs from measurements."""
    small_expert_gemm_rows: float = 120.0
    """``M0`` of the small-expert-GEMM slowdown ``s(M) = 1 + (M0 / M) ** small_expert_gemm_power`` (``M``: routed
    rows per expert per GPU per microbatch, ``mbs x seq / (cp x tp) x etp x topk x ep / experts``): a rank's expert
    GEMMs take ``s(M)`` times their FLOP time. Fitted (log least squares, 42 points) to the bf16 grouped-GEMM
    times per FLOP measured on one NVIDIA H200 at equal work per GPU for the expert shapes of Qwen3-30B-A3B,
    DeepSeek-V3 and Kimi K2 (results/bench/grouped_gemm.md, ``torch._grouped_mm``), each relative to its rows
    >= 2048; never to a published row. It is flat from about 1,000 rows up (1.05 at 1,024, 1.13 at 512) and steep
    below (1.35 at 256, 1.91 at 128). Applied to every GPU and precision: Blackwell's MXFP8 grouped GEMMs were not
    measured (their tiles are no smaller, so the slowdown is unlikely to be less); torch's Hopper FP8 kernel falls
    off sooner than this."""
    small_expert_gemm_power: float = 1.4
    """``p`` of the slowdown above (same fit)."""
    small_expert_gemm_rows_mxfp8: float = 1438.4
    """``M0`` of the same slowdown for MXFP8 grouped GEMMs (Blackwell), which nobody here has measured. Fitted by
    ``make projection`` with the carried calibration table (:mod:`optbench.projection.carried`: the grid value whose
    table of architecture, model and release efficiencies leaves the smallest residual over every published AdamW row it
    can solve them all at (1073.9 on the 52 rows of three models; 1438.4 since Qwen3 235B-A22B's 24 joined); never a
    Muon row), and held to results/projection/calibration.json by a test. The H200's FP8 grouped GEMMs (torch's
    kernel, results/bench/grouped_gemm.md) also fall off sooner than its BF16 ones (2.6x at 1,024 rows for
    Qwen3's shapes, 1.1-1.2x at 512-1,024 for DeepSeek-V3's); re-measure on a Blackwell GPU when one is lent."""
    dense_gemm_fixed_s: float = 17.9e-6
    """What one dense GEMM call costs beyond its FLOPs at the calibrated rate (launch, the tile wave's tail), paid per
    call: forward, data and weight gradient of every dense GEMM weight a pipeline rank holds (attention projections,
    dense and shared-expert MLPs, router, output head), every microbatch. It is why a GEMM made thin by TP or short
    by a small MBS runs further below the peak, and why more microbatches (a smaller MBS, or TP shrinking DP at a
    fixed batch) cost more per token. ``t0`` of the least-squares fit ``time = FLOPs / R + t0`` over the 552 dense
    bf16 GEMMs our bench measured on one NVIDIA H200 at the recipes' shapes, TP 1-8 and 1,024-32,768 tokens
    (results/bench/dense_gemm.md, 2026-11-28; median error 6 %; the 360 of ../shared/reference/h200 of 2026-11-27, one
    GEMM name in three fewer, fitted 21.1 us); never fitted to a published row. Taken for every GPU: a
    Blackwell's was not measured. 0 turns the term off (docs/projection.md section 1)."""
    activation_traffic: bool = True
    """Price the element-wise kernels' activation traffic at the HBM bandwidth
    (:mod:`optbench.projection.activation_traffic`,
    an inventory of Megatron Core's passes, not fitted); False leaves that time to the calibrated efficiency, as before
    it (docs/projection.md section 1 compares)."""
    small_expert_gemms: bool = True
    """Price the small-expert-GEMM slowdown; False prices expert GEMMs at the calibrated rate whatever their rows
    (the model before it; docs/projection.md section 8 compares)."""
    gemm_kernel_efficiency: float = 0.70
    """Fraction of the GEMM peak a model GEMM kernel itself sustains when compute-bound (as ``ns_gemm_efficiency``:
    65-80 % on large GEMMs). The calibrated efficiency is lower: it spreads the step's other per-token work (norms,
    activations, permutes, router) over the GEMM FLOPs. The weight-traffic bound compares bytes with the kernel's
    own FLOP time, not with that spread. Not fitted."""
    fp8_attention_speedup: float = 1.2 / 0.74
    """How much faster FlashAttention runs in FP8 than in BF16: FlashAttention-3 (Shah et al., 2024, abstract) reaches
    close to 1.2 PFLOP/s in FP8 and 740 TFLOP/s in BF16 on H100, 1.6x, not the 2x of the datasheet peaks. Under an
    FP8 recipe without ``precision.fp8_dot_product_attention`` the attention core's FLOPs take this many times their
    time at the calibrated FP8 rate. Not fitted."""
    ddp_bucket_min_elements: int = 40_000_000
    """Megatron DDP's default bucket: max(40M, 1M x DP size) elements (distributed_data_parallel.py)."""
    ddp_bucket_per_dp_rank: int = 1_000_000
    """Per-DP-rank part of Megatron DDP's default bucket size."""

    def as_dict(self) -> dict:
        return asdict(self)

    def switches(self) -> Assumptions:
        """These assumptions without the MXFP8 ``M0`` the carried table fits: what a fit depends on, and what tells
        one step model from another."""
        return replace(self, small_expert_gemm_rows_mxfp8=0.0)


DEFAULT_ASSUMPTIONS = Assumptions()
