"""Layers for ``kernels.kernelize``: each replaces the forward of a transformers layer of the same name.

kernelize binds ``forward`` to the original module, so a layer reads that module's attributes and must not
define ``__init__``, methods or class attributes of its own (``can_torch_compile`` / ``has_backward`` excepted).
"""

import torch
import torch.nn as nn

from ._ops import ops


class RMSNorm(nn.Module):
    """transformers' "RMSNorm" (e.g. LlamaRMSNorm), same numerics: the fp32 normalization rounded to the input
    dtype, then times ``weight``. Inference only: the op has no backward."""

    weight: torch.Tensor
    variance_epsilon: float

    can_torch_compile = True
    has_backward = False

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        out = torch.empty(hidden_states.shape, dtype=hidden_states.dtype, device=hidden_states.device)
        ops.rms_norm(out, hidden_states, self.weight, self.variance_epsilon, None)
        return out
