"""The static-FP8 Llama decoder that benchmarks/decode_step.py times, built from a kernel's ``convert`` modules.

One layer runs, per decode step (the blog's design)::

    fused_add_rms_norm -> FP8 -> QKV GEMM -> attention over a KV cache -> quantize_fp8 -> O GEMM [-> all-reduce]
    fused_add_rms_norm -> FP8 -> gate_up GEMM -> silu_and_mul -> FP8 -> down GEMM [-> all-reduce]

with static per-tensor scales. Model code for the benchmark, not part of the package: it only composes what the
caller passes in (the ``Fp8Linear`` and ``Fp8LlamaMLP`` modules and a ``DecodeOps`` of the loaded kernel's
``convert``, or a peer's ops), so it imports nothing of the kernel.
"""

from typing import Callable, NamedTuple, Optional, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F


class KVCache(NamedTuple):
    """One layer's keys and values, [batch, kv_heads, capacity, head_dim] each, in the activation dtype."""

    key: torch.Tensor
    value: torch.Tensor


class Rope(NamedTuple):
    """Rotary embedding factors, [..., head_dim] each (transformers' Llama convention, rotate_half)."""

    cos: torch.Tensor
    sin: torch.Tensor


def rope_tables(capacity: int, head_dim: int, theta: float, dtype: torch.dtype, device: torch.device) -> Rope:
    """cos/sin for positions 0..capacity-1, [capacity, head_dim], computed in float32 as transformers does;
    a decode step takes row ``pos`` (a view, so nothing is computed inside a captured step)."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim)
    freqs = torch.outer(torch.arange(capacity, device=device, dtype=torch.float32), inv_freq)
    angles = torch.cat([freqs, freqs], dim=-1)
    return Rope(angles.cos().to(dtype), angles.sin().to(dtype))


def apply_rope(x: torch.Tensor, rope: Rope) -> torch.Tensor:
    """``x * cos + rotate_half(x) * sin`` in x's dtype, rotate_half(x) = (-x2, x1)."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * rope.cos + torch.cat([-x2, x1], dim=-1) * rope.sin


class SdpaDecodeAttention(nn.Module):
    """Decode attention for a batch of sequences at the same position, through torch SDPA.

    forward(qkv [B, (heads + 2*kv_heads) * head_dim] (q, k, v heads in that order), cache, pos, rope) applies
    RoPE (if given) to q and k, writes k and v into the cache at ``pos`` and attends to positions 0..pos.
    Returns [B, heads * head_dim] in qkv's dtype. ``pos`` is a Python int, so a captured CUDA graph replays
    one fixed position.
    """

    def __init__(self, num_heads: int, num_kv_heads: int, head_dim: int):
        super().__init__()
        if num_heads % num_kv_heads != 0:
            raise ValueError(f"SdpaDecodeAttention: num_heads ({num_heads}) must be a multiple of num_kv_heads "
                             f"({num_kv_heads})")
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim

    def forward(self, qkv: torch.Tensor, cache: KVCache, pos: int, rope: Optional[Rope] = None) -> torch.Tensor:
        batch, d = qkv.shape[0], self.head_dim
        q, k, v = qkv.split([self.num_heads * d, self.num_kv_heads * d, self.num_kv_heads * d], dim=-1)
        q = q.view(batch, self.num_heads, d)
        k = k.view(batch, self.num_kv_heads, d)
        if rope is not None:
            q, k = apply_rope(q, rope), apply_rope(k, rope)
        cache.key[:, :, pos] = k
        cache.value[:, :, pos] = v.view(batch, self.num_kv_heads, d)
        # One query token per sequence: the query heads sharing a KV head stand in for SDPA's query positions,
        # so grouped-query attention needs neither repeated keys nor enable_gqa, and no mask (all see 0..pos).
        group = self.num_heads // self.num_kv_heads
        out = F.scaled_dot_product_attention(q.reshape(batch, self.num_kv_heads, group, d),
                                             cache.key[:, :, :pos + 1], cache.value[:, :, :pos + 1])
        return out.reshape(batch, self.num_heads * d)


class Fp8DecoderLayer(nn.Module):
    """A Llama decoder layer's decode step in static FP8 (see the module docstring for the op sequence).

    forward(x, residual, cache, pos, rope) adds x, the previous layer's output (the embeddings, with a zero
    residual, for the first layer), to ``residual`` in place and returns this layer's MLP output. The FP8
    outputs of the norms use the input scales of the GEMMs they feed. ``attention`` maps
    (qkv, cache, pos, rope) to the attention output (:class:`SdpaDecodeAttention` or the caller's own);
    ``all_reduce``, for tensor parallelism, sums a 16-bit tensor over the ranks in place after the
    row-parallel O and down GEMMs (None: one rank). qkv and o are the kernel's ``convert.Fp8Linear``, mlp its
    ``convert.Fp8LlamaMLP``, ops a ``convert.DecodeOps`` (the kernel's ``KERNEL_OPS`` or a peer's).
    """

    def __init__(self, input_norm_weight: torch.Tensor, post_attention_norm_weight: torch.Tensor, eps: float,
                 qkv: nn.Module, o: nn.Module, mlp: nn.Module, attention: Callable[..., torch.Tensor],
                 all_reduce: Optional[Callable[[torch.Tensor], None]], ops: NamedTuple):
        super().__init__()
        self.register_buffer("input_norm_weight", input_norm_weight)
        self.register_buffer("post_attention_norm_weight", post_attention_norm_weight)
        self.eps = eps
        self.qkv, self.o, self.mlp, self.attention = qkv, o, mlp, attention
        self.all_reduce = all_reduce
        self.ops = ops

    def _reduce(self, x: torch.Tensor) -> torch.Tensor:
        if self.all_reduce is not None:
            self.all_reduce(x)
        return x

    def forward(self, x: torch.Tensor, residual: torch.Tensor, cache: KVCache, pos: int,
                rope: Optional[Rope] = None) -> torch.Tensor:
        h = self.ops.add_rms_norm(x, residual, self.input_norm_weight, self.eps, self.qkv.input_scale,
                                  self.qkv.weight.dtype)
        attn = self.attention(self.qkv(h), cache, pos, rope)
        o = self._reduce(self.o(attn))
        h = self.ops.add_rms_norm(o, residual, self.post_attention_norm_weight, self.eps,
                                  self.mlp.gate_up.input_scale, self.mlp.gate_up.weight.dtype)
        return self._reduce(self.mlp(h))


class Fp8Decoder(nn.Module):
    """A stack of :class:`Fp8DecoderLayer` and the final RMSNorm: one decode step of the model's body.

    forward(x [B, H] embeddings, caches (one :class:`KVCache` per layer), pos) returns the final normed hidden
    states [B, H] in x's dtype (what the LM head would take). ``rope``: full :func:`rope_tables`, or None;
    ``ops``: as in :class:`Fp8DecoderLayer`.
    """

    def __init__(self, layers: Sequence[Fp8DecoderLayer], norm_weight: torch.Tensor, eps: float,
                 rope: Optional[Rope], ops: NamedTuple):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.register_buffer("norm_weight", norm_weight)
        self.register_buffer("rope_cos", None if rope is None else rope.cos)
        self.register_buffer("rope_sin", None if rope is None else rope.sin)
        self.eps = eps
        self.ops = ops

    def forward(self, x: torch.Tensor, caches: Sequence[KVCache], pos: int) -> torch.Tensor:
        residual = torch.zeros_like(x)
        rope = None if self.rope_cos is None else Rope(self.rope_cos[pos], self.rope_sin[pos])
        for layer, cache in zip(self.layers, caches):
            x = layer(x, residual, cache, pos, rope)
        return self.ops.add_rms_norm(x, residual, self.norm_weight, self.eps, None, None)
