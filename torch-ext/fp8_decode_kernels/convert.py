"""Static-FP8 linear layers and MLPs built from this package's ops, and the converters that put them into a
transformers Llama-family model.

With static per-tensor scales every FP8 activation is quantized with a scale fixed ahead of time (from
calibration), so no step computes an amax. An MLP runs::

    [quantize_fp8 ->] gate_up GEMM -> silu_and_mul -> FP8 -> down GEMM

The modules are built by constructors and converters here, not swapped in by ``kernels.kernelize`` (that is
what ``layers`` is for). Each takes a :class:`DecodeOps`, the ops it runs: :data:`KERNEL_OPS` (this package's
kernels) by default; benchmarks/decode_step.py passes a peer's ops to time the same model built from torch's.
"""

from typing import Callable, Iterable, List, NamedTuple, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import reference
from .activation import silu_and_mul
from .fp8 import FP8_DTYPES, fp8_max, native_fp8_dtype
from .gemm import skinny_gemm
from .norm import fused_add_rms_norm
from .quantization import quantize_fp8

ScaleLike = Union[float, torch.Tensor]


def quantize_fp8_static(x: torch.Tensor, scale: torch.Tensor,
                        out_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """Static per-tensor FP8 quantization with the ops' semantics: ``saturate(x / scale)`` rounded to nearest
    even, NaN kept (``reference.quantize_fp8``). ``out_dtype`` defaults to the device's FP8 flavour.

    Plain torch ops, for any dtype and layout: what quantizes the weights, once, at conversion. Activations
    go through the ``quantize_fp8`` kernel (:data:`KERNEL_OPS`), which gives the same bytes."""
    return reference.quantize_fp8(x, scale, out_dtype or native_fp8_dtype(x.device))


class DecodeOps(NamedTuple):
    """The ops the FP8 modules run (and benchmarks/decoder.py's decoder layers, which add the norm), with the
    signatures of this package's functions:
    ``add_rms_norm(x, residual, weight, eps, scale, out_dtype)`` (updates residual in place),
    ``silu_and_mul(x, scale, out_dtype)``, ``gemm(a, b, scale_a, scale_b, bias, out_dtype)``,
    ``quantize(x, scale, out_dtype)``."""

    add_rms_norm: Callable[..., torch.Tensor]
    silu_and_mul: Callable[..., torch.Tensor]
    gemm: Callable[..., torch.Tensor]
    quantize: Callable[..., torch.Tensor]


# A 16-bit input of an Fp8Linear (in a decoder, the attention output: the one FP8 activation no fused op
# produces) is quantized by the quantize_fp8 kernel.
KERNEL_OPS = DecodeOps(fused_add_rms_norm, silu_and_mul, skinny_gemm, quantize_fp8)


def _as_scale(scale: ScaleLike, device: torch.device) -> torch.Tensor:
    """The ops' scale form: a one-element float32 tensor on the data's device."""
    return torch.as_tensor(scale, dtype=torch.float32, device=device).reshape(1)


def scale_from_amax(amax: torch.Tensor, fp8_dtype: torch.dtype) -> torch.Tensor:
    """The per-tensor scale that maps ``amax`` onto the FP8 flavour's largest value (so nothing the
    calibration saw saturates). A zero amax gets the smallest normal float32, not a division by zero."""
    amax = amax.detach().float().reshape(1)
    return amax.clamp_min(torch.finfo(torch.float32).tiny) / fp8_max(fp8_dtype)


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
        if weight.dim() != 2 or weight.dtype not in FP8_DTYPES:
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
        if x.dtype in FP8_DTYPES:
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
