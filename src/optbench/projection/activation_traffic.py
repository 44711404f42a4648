"""What a decoder layer's element-wise kernels move through HBM per token: bytes that no GEMM peak speeds up.

Between its GEMMs a Megatron Core layer (Transformer Engine modules, the all-to-all token dispatcher) runs
element-wise kernels that read and write whole activations: normalizations, residual adds, quantization to FP8,
the routed tokens' permutations, the gated activation. They are memory-bound: their time is their bytes over the
HBM bandwidth, whatever the tensor cores can do. A model whose GEMMs are thin beside its activations (a small
hidden size, narrow experts) spends a larger share of its step there, which is why one GEMM efficiency cannot fit
Qwen3 30B-A3B (hidden 2,048, experts 768 wide) and DeepSeek-V3 (7,168 and 2,048) at once.

The inventory below is counted from the code path of the NeMo containers' presets (Megatron Core's
``TransformerLayer`` with TE ``LayerNormLinear``, ``MoEAlltoAllTokenDispatcher`` and ``TEGroupedMLP``:
``dispatch_preprocess`` permutes, ``dispatch_postprocess`` sorts the received chunks by local expert,
``combine_preprocess`` sorts them back, ``combine_postprocess`` unpermutes with the routing weights), never fitted
to a published row. Per token of one layer, forward, in bytes, with ``h`` the hidden size, ``a`` the attention
output width (heads x value head size), ``k`` the router's top-k, ``f`` a routed expert's FFN width, ``s`` the
shared experts' width and ``F`` a dense layer's FFN width; BF16 activations (2 bytes), FP8 copies (1 byte):

* every layer: input norm fused with its FP8 cast (read 2h, write h), the attention output's FP8 cast (read 2a,
  write a), two residual adds (read 4h, write 2h each), the pre-MLP norm (read 2h, write 2h): ``19 h + 3 a``;
* a MoE layer's routed experts: permute (read and write 2kh), sort by local expert (2kh each way), the first
  grouped GEMM's FP8 cast (read 2kh, write kh), the gated activation (read 4kf, write 2kf) and its FP8 cast
  (read 2kf, write kf), sort back (2kh each way), unpermute with the routing weights (read 2kh, write 2h):
  ``17 k h + 9 k f + 2 h``;
* a shared expert (MoE layer) or a dense MLP: the input's FP8 cast (``3 h``) and the gated activation with its
  cast (``9 s`` or ``9 F``).

The backward reads each kernel's saved input and the output's gradient and writes the input's gradient: twice
the forward's bytes, as the backward's FLOPs are twice the forward's. The total is three times the forward.

What it leaves out, said plainly: attention-side kernels on the query and key widths (RoPE, Qwen3's QK norms,
MLA's latent norms), the router's softmax and top-k over the experts, dropout (off in these presets), recompute
(which repeats some forward kernels) and fusions that remove a pass (HybridEP/DeepEP dispatchers permute inside
their communication kernels). A GPU's tokens are ``mbs x seq / (tp x cp)``: sequence parallelism splits the
hidden-sized passes over TP, which Megatron requires for MoE layers at TP > 1; a dense model at TP > 1 without it
repeats them on every TP rank and is under-counted. It is a count of passes at the HBM bandwidth, not a
measurement of kernels.
"""

from __future__ import annotations

from optbench.accounting.params import is_moe_layer
from optbench.config.schema import ModelConfig

BF16_BYTES = 2
FORWARD_AND_BACKWARD = 3
"""Total element-wise bytes over the forward's: the backward reads the saved input and the output's gradient and
writes the input's gradient, twice the forward's traffic."""


def attention_output_width(model: ModelConfig) -> int:
    """Heads x value head size: the width of the attention output the output projection reads."""
    heads = model.num_attention_heads
    if model.multi_latent_attention:
        return heads * (model.v_head_dim or 0)
    return heads * (model.kv_channels or model.hidden_size // heads)


def forward_bytes_per_token(model: ModelConfig, layer: int) -> float:
    """Bytes the element-wise kernels of decoder layer ``layer`` move per token in the forward (the module's
    inventory)."""
    h, a = model.hidden_size, attention_output_width(model)
    every_layer = 19 * h + 3 * a
    if not is_moe_layer(model, layer):
        return every_layer + 3 * h + 9 * model.ffn_hidden_size
    k, f = model.moe_router_topk, model.moe_ffn_hidden_size or model.ffn_hidden_size
    routed = 17 * k * h + 9 * k * f + 2 * h
    shared = model.moe_shared_expert_intermediate_size
    return every_layer + routed + (3 * h + 9 * shared if shared else 0)


def bytes_per_token(model: ModelConfig, layer: int) -> float:
    """Forward and backward element-wise bytes of decoder layer ``layer`` per token."""
    return FORWARD_AND_BACKWARD * forward_bytes_per_token(model, layer)
