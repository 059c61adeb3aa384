"""A static-FP8 Llama decoder built from this package's ops, for decode steps and for converting models.

One layer runs, per decode step (the blog's design)::

    fused_add_rms_norm -> FP8 -> QKV GEMM -> attention over a KV cache -> quantize_fp8 -> O GEMM [-> all-reduce]
    fused_add_rms_norm -> FP8 -> gate_up GEMM -> silu_and_mul -> FP8 -> down GEMM [-> all-reduce]

with static per-tensor scales: every FP8 activation is quantized with a scale fixed ahead of time (from
calibration), so no step computes an amax. The modules are built by constructors and converters here, not
swapped in by ``kernels.kernelize`` (that is what ``layers`` is for). Each takes a :class:`DecodeOps`, the ops
it runs: :data:`KERNEL_OPS` (this package's kernels) by default; a benchmark passes a peer's ops to time the
same model built from other kernels.

The package's ``__init__`` must import this module after it defines the functions imported below.
"""

from typing import Callable, Iterable, List, NamedTuple, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import fused_add_rms_norm, native_fp8_dtype, quantize_fp8, reference, silu_and_mul, skinny_gemm

ScaleLike = Union[float, torch.Tensor]


def quantize_fp8_static(x: torch.Tensor, scale: torch.Tensor,
                        out_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """Static per-tensor FP8 quantization with the ops' semantics: ``saturate(x / scale)`` rounded to nearest
    even, NaN kept (``reference.quantize_fp8``). ``out_dtype`` defaults to the device's FP8 flavour.

    Plain torch ops, for any dtype and layout: what quantizes the weights, once, at conversion. Activations
    go through the ``quantize_fp8`` kernel (:data:`KERNEL_OPS`), which gives the same bytes."""
    return reference.quantize_fp8(x, scale, out_dtype or native_fp8_dtype(x.device))


class DecodeOps(NamedTuple):
    """The ops a decoder runs, with the signatures of this package's functions:
    ``add_rms_norm(x, residual, weight, eps, scale, out_dtype)`` (updates residual in place),
    ``silu_and_mul(x, scale, out_dtype)``, ``gemm(a, b, scale_a, scale_b, bias, out_dtype)``,
    ``quantize(x, scale, out_dtype)``."""

    add_rms_norm: Callable[..., torch.Tensor]
    silu_and_mul: Callable[..., torch.Tensor]
    gemm: Callable[..., torch.Tensor]
    quantize: Callable[..., torch.Tensor]


# The attention output is the one FP8 activation no fused op produces: the quantize_fp8 kernel quantizes it.
KERNEL_OPS = DecodeOps(fused_add_rms_norm, silu_and_mul, skinny_gemm, quantize_fp8)


def _as_scale(scale: ScaleLike, device: torch.device) -> torch.Tensor:
    """The ops' scale form: a one-element float32 tensor on the data's device."""
    return torch.as_tensor(scale, dtype=torch.float32, device=device).reshape(1)


def scale_from_amax(amax: torch.Tensor, fp8_dtype: torch.dtype) -> torch.Tensor:
    """The per-tensor scale that maps ``amax`` onto the FP8 flavour's largest value (so nothing the
    calibration saw saturates). A zero amax gets the smallest normal float32, not a division by zero."""
    amax = amax.detach().float().reshape(1)
    return amax.clamp_min(torch.finfo(torch.float32).tiny) / reference.fp8_max(fp8_dtype)


def quantize_weight(weight: torch.Tensor, fp8_dtype: Optional[torch.dtype] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """Per-tensor FP8 weight quantization: returns ``(weight_fp8, scale)`` with ``scale = amax / fp8_max``."""
    fp8_dtype = fp8_dtype or native_fp8_dtype(weight.device)
    scale = scale_from_amax(weight.abs().amax(), fp8_dtype)
    return quantize_fp8_static(weight, scale, fp8_dtype), scale


class Fp8Linear(nn.Module):
    """``y = x @ (weight * weight_scale)^T (+ bias)`` with an FP8 weight and a static per-tensor input scale.

    weight: [N, K] FP8, nn.Linear's layout. forward takes FP8 activations already quantized with
    ``input_scale`` (e.g. from a fused norm) or 16-bit ones, which it quantizes with ``input_scale`` first;
    x: [..., K]; returns [..., N] in ``out_dtype``. Scales are floats or one-element tensors.

    Cast a model to its dtype before converting it: ``Module.to(dtype)`` would also cast the FP8 weight and
    the float32 scales, which count as floating point.
    """

    def __init__(self, weight: torch.Tensor, weight_scale: ScaleLike, input_scale: ScaleLike,
                 bias: Optional[torch.Tensor] = None, out_dtype: torch.dtype = torch.bfloat16,
                 ops: DecodeOps = KERNEL_OPS):
        super().__init__()
        if weight.dim() != 2 or weight.dtype not in reference.FP8_DTYPES:
            raise ValueError(f"Fp8Linear: weight must be a 2-D FP8 tensor [N, K], got {weight.dtype} "
                             f"{tuple(weight.shape)}")
        self.register_buffer("weight", weight)
        self.register_buffer("weight_scale", _as_scale(weight_scale, weight.device))
        self.register_buffer("input_scale", _as_scale(input_scale, weight.device))
        self.register_buffer("bias", bias)
        self.out_dtype = out_dtype
        self.ops = ops

    @classmethod
    def from_float(cls, weight: torch.Tensor, input_scale: ScaleLike, bias: Optional[torch.Tensor] = None,
                   fp8_dtype: Optional[torch.dtype] = None, ops: DecodeOps = KERNEL_OPS) -> "Fp8Linear":
        """From a 16-bit weight [N, K] (e.g. an nn.Linear's), quantized per tensor; the output keeps its dtype."""
        weight = weight.detach()
        fp8_weight, weight_scale = quantize_weight(weight, fp8_dtype)
        return cls(fp8_weight, weight_scale, input_scale, None if bias is None else bias.detach(), weight.dtype, ops)

    def quantize_input(self, x: torch.Tensor) -> torch.Tensor:
        """x as this layer's FP8 activations: quantized with ``input_scale`` unless it is FP8 already."""
        if x.dtype == self.weight.dtype:
            return x
        if x.dtype in reference.FP8_DTYPES:
            raise ValueError(f"Fp8Linear: FP8 input must have the weight's flavour {self.weight.dtype}, got {x.dtype}")
        return self.ops.quantize(x, self.input_scale, self.weight.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.quantize_input(x)
        out = self.ops.gemm(a.reshape(-1, a.shape[-1]), self.weight, self.input_scale, self.weight_scale,
                            self.bias, self.out_dtype)
        return out.reshape(*x.shape[:-1], out.shape[-1])

    def extra_repr(self) -> str:
        n, k = self.weight.shape
        return f"in_features={k}, out_features={n}, weight={self.weight.dtype}, out={self.out_dtype}"


class Fp8LlamaMLP(nn.Module):
    """Llama's SwiGLU MLP, ``down(silu(gate(x)) * up(x))``, in static FP8.

    gate_up: an Fp8Linear with the gate and up weights stacked ([2*I, H], gate first, one scale for both);
    down: [H, I]. silu_and_mul writes the down GEMM's FP8 input with ``down.input_scale`` directly.
    x: [..., H], FP8 (quantized with ``gate_up.input_scale``) or 16-bit. Returns [..., H] in down's out dtype.
    """

    def __init__(self, gate_up: Fp8Linear, down: Fp8Linear, ops: DecodeOps = KERNEL_OPS):
        super().__init__()
        if gate_up.weight.shape[0] != 2 * down.weight.shape[1]:
            raise ValueError(f"Fp8LlamaMLP: gate_up must have 2 * down's in features ({2 * down.weight.shape[1]}) "
                             f"rows, got {gate_up.weight.shape[0]}")
        self.gate_up = gate_up
        self.down = down
        self.ops = ops

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        act = self.ops.silu_and_mul(self.gate_up(x), self.down.input_scale, self.down.weight.dtype)
        return self.down(act)


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
    row-parallel O and down GEMMs.
    """

    def __init__(self, input_norm_weight: torch.Tensor, post_attention_norm_weight: torch.Tensor, eps: float,
                 qkv: Fp8Linear, o: Fp8Linear, mlp: Fp8LlamaMLP, attention: Callable[..., torch.Tensor],
                 all_reduce: Optional[Callable[[torch.Tensor], None]] = None, ops: DecodeOps = KERNEL_OPS):
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
    states [B, H] in x's dtype (what the LM head would take). ``rope``: full :func:`rope_tables`, or None.
    """

    def __init__(self, layers: Sequence[Fp8DecoderLayer], norm_weight: torch.Tensor, eps: float,
                 rope: Optional[Rope] = None, ops: DecodeOps = KERNEL_OPS):
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


# ---------------------------------------------------------------- converting transformers' Llama MLPs


def _is_llama_mlp(module) -> bool:
    return all(isinstance(getattr(module, name, None), nn.Linear) for name in ("gate_proj", "up_proj", "down_proj"))


def _check_silu(mlp: nn.Module) -> None:
    """The FP8 MLP computes SiLU: refuse an MLP whose act_fn is something else (e.g. GELU variants)."""
    probe = torch.linspace(-6, 6, 13, device=mlp.gate_proj.weight.device)
    act = getattr(mlp, "act_fn", None)
    if act is None or not torch.allclose(act(probe), F.silu(probe)):
        raise ValueError(f"Fp8LlamaMLP computes SiLU, but {type(mlp).__name__}.act_fn is {act!r}")


class _AmaxObserver:
    """Running amax of an MLP's input and of its down projection's input (silu(gate) * up), via hooks."""

    def __init__(self, mlp: nn.Module):
        self.input = torch.zeros((), device=mlp.gate_proj.weight.device)
        self.act = torch.zeros_like(self.input)
        self._hooks = [mlp.register_forward_pre_hook(self._observe("input")),
                       mlp.down_proj.register_forward_pre_hook(self._observe("act"))]

    def _observe(self, name: str):
        def hook(module, args):
            setattr(self, name, torch.maximum(getattr(self, name), args[0].detach().abs().amax().float()))
        return hook

    def remove(self) -> None:
        for hook in self._hooks:
            hook.remove()


def _run_calibration(run: Callable[[], object], mlps: Sequence[nn.Module]) -> List[_AmaxObserver]:
    observers = [_AmaxObserver(mlp) for mlp in mlps]
    try:
        with torch.no_grad():
            run()
    finally:
        for observer in observers:
            observer.remove()
    return observers


def _build_fp8_mlp(mlp: nn.Module, input_scale: ScaleLike, act_scale: ScaleLike, fp8_dtype: torch.dtype,
                   ops: DecodeOps) -> Fp8LlamaMLP:
    gate, up, down = mlp.gate_proj, mlp.up_proj, mlp.down_proj
    gate_up_bias = None if gate.bias is None else torch.cat([gate.bias, up.bias])
    gate_up = Fp8Linear.from_float(torch.cat([gate.weight, up.weight]), input_scale, gate_up_bias, fp8_dtype, ops)
    return Fp8LlamaMLP(gate_up, Fp8Linear.from_float(down.weight, act_scale, down.bias, fp8_dtype, ops), ops)


def from_llama_mlp(mlp: nn.Module, calibration_input: Optional[torch.Tensor] = None, *,
                   input_scale: Optional[ScaleLike] = None, act_scale: Optional[ScaleLike] = None,
                   fp8_dtype: Optional[torch.dtype] = None, ops: DecodeOps = KERNEL_OPS) -> Fp8LlamaMLP:
    """An :class:`Fp8LlamaMLP` from a transformers LlamaMLP-like module (gate_proj, up_proj, down_proj
    Linears, SiLU act_fn).

    Weights are quantized per tensor (gate and up share one scale). The static activation scales are
    ``input_scale`` (the MLP input) and ``act_scale`` (silu(gate) * up, the down GEMM's input); one not
    given is calibrated as ``amax / fp8_max`` from running the original MLP on ``calibration_input``
    ([..., H], the MLP's input dtype). fp8_dtype: default, the weights' device's flavour.
    """
    _check_silu(mlp)
    fp8_dtype = fp8_dtype or native_fp8_dtype(mlp.gate_proj.weight.device)
    if input_scale is None or act_scale is None:
        if calibration_input is None:
            raise ValueError("from_llama_mlp: give input_scale and act_scale, or a calibration_input to derive "
                             "the missing ones from")
        (observer,) = _run_calibration(lambda: mlp(calibration_input), [mlp])
        input_scale = scale_from_amax(observer.input, fp8_dtype) if input_scale is None else input_scale
        act_scale = scale_from_amax(observer.act, fp8_dtype) if act_scale is None else act_scale
    return _build_fp8_mlp(mlp, input_scale, act_scale, fp8_dtype, ops)


def _calibration_batches(model: nn.Module, calibration_inputs) -> List[torch.Tensor]:
    if calibration_inputs is None:
        # Random tokens only make sense for random-weight models; real checkpoints want real text.
        generator = torch.Generator().manual_seed(0)
        calibration_inputs = torch.randint(model.config.vocab_size, (1, 64), generator=generator)
    if isinstance(calibration_inputs, torch.Tensor):
        calibration_inputs = [calibration_inputs]
    device = next(model.parameters()).device
    return [ids.to(device) for ids in calibration_inputs]


def convert_llama_mlps_to_fp8(model: nn.Module,
                              calibration_inputs: Union[torch.Tensor, Iterable[torch.Tensor], None] = None,
                              fp8_dtype: Optional[torch.dtype] = None, ops: DecodeOps = KERNEL_OPS) -> nn.Module:
    """Replaces the ``mlp`` of every decoder layer of a Llama-family transformers model (any module whose
    ``mlp`` has gate_proj/up_proj/down_proj Linears) by an :class:`Fp8LlamaMLP`, in place; returns the model.

    Static activation scales are calibrated as amax / fp8_max over forward passes of the original model on
    ``calibration_inputs``: a LongTensor of input ids [batch, seq] or an iterable of them; default, 64 random
    tokens (fine for random-weight models only). Cast the model to its dtype and device first.
    fp8_dtype: default, the device's flavour (e4m3fnuz on MI300, e4m3fn elsewhere).
    """
    owners = [m for m in model.modules() if _is_llama_mlp(getattr(m, "mlp", None))]
    if not owners:
        raise ValueError(f"convert_llama_mlps_to_fp8: no module of {type(model).__name__} has a Llama MLP "
                         "(gate_proj, up_proj, down_proj) as its `mlp`")
    mlps = [owner.mlp for owner in owners]
    for mlp in mlps:
        _check_silu(mlp)
    batches = _calibration_batches(model, calibration_inputs)
    observers = _run_calibration(lambda: [model(ids) for ids in batches], mlps)
    fp8_dtype = fp8_dtype or native_fp8_dtype(mlps[0].gate_proj.weight.device)
    for owner, mlp, observer in zip(owners, mlps, observers):
        owner.mlp = _build_fp8_mlp(mlp, scale_from_amax(observer.input, fp8_dtype),
                                   scale_from_amax(observer.act, fp8_dtype), fp8_dtype, ops)
    return model
