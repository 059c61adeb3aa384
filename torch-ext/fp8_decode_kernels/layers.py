"""Layers for ``kernels.kernelize``: each replaces the forward of a transformers layer of the same name.

kernelize binds ``forward`` to the original module, so a layer reads that module's attributes and must not
define ``__init__``, methods or class attributes of its own (``can_torch_compile`` / ``has_backward`` excepted).
"""

import torch
import torch.nn as nn

from ._ops import ops

_OP_DTYPES = (torch.float16, torch.bfloat16)


class RMSNorm(nn.Module):
    """transformers' "RMSNorm" in LlamaRMSNorm's rounding order: the fp32 normalization ``x * rsqrt(mean(x^2) +
    eps)`` rounded to the input dtype, then ``weight * normed`` (torch's type promotion when the dtypes differ).
    Inference only: the op has no backward.

    - fp16/bf16 activations with a weight of their dtype: the fused op.
    - fp16/bf16 activations with a weight of another dtype (e.g. fp32 norm weights kept in a 16-bit model): the
      op normalizes (with a weight of ones, which is exact) and ``weight * normed`` is multiplied as
      transformers multiplies it, so the output dtype is the promoted one, as in LlamaRMSNorm.
    - any other activation dtype (fp32: transformers' default dtype, the usual case on CPU): LlamaRMSNorm's
      formula in PyTorch; the op takes 16-bit inputs only.

    Models whose norm multiplies by the weight in fp32 and rounds once (OLMo 2/3, GPT-OSS, ...) get Llama's order
    instead: in fp32 the two orders coincide; in fp16/bf16 they differ by 1 ulp of the output on about a quarter
    of the elements (README, "Layers").
    """

    weight: torch.Tensor
    variance_epsilon: float

    can_torch_compile = True
    has_backward = False

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        x, weight, eps = hidden_states, self.weight, self.variance_epsilon
        if x.dtype in _OP_DTYPES:
            out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
            if weight.dtype == x.dtype:
                ops.rms_norm(out, x, weight, eps, None)
                return out
            ops.rms_norm(out, x, torch.ones(x.shape[-1], dtype=x.dtype, device=x.device), eps, None)
            return weight * out
        xf = x.to(torch.float32)
        normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
        return weight * normed.to(x.dtype)
