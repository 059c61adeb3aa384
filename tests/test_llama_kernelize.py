"""kernels.kernelize swaps transformers' RMSNorm for layers.RMSNorm in a tiny Llama (random weights, no download):
the op runs for every norm of a 16-bit model, and fp32, bf16 and fp16 models compute what they computed before.

kernelize needs a transformers whose hub-kernels integration accepts the installed kernels version (transformers
checks kernels against its KERNELS_MIN_VERSION / KERNELS_MAX_VERSION; outside them its RMSNorm layers are not
marked for replacement and kernelize swaps nothing). Where it does not, these tests skip with that reason."""

import logging
from importlib.metadata import version
from pathlib import Path

import pytest
import torch

from .helpers import _ordinal, assert_matches_reference

# kernel-builder's test shell has transformers only through flake.nix's pythonCheckInputs.
pytest.importorskip("transformers")

LAYERS = 2
VOCAB = 100
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
DTYPE_IDS = ("fp32", "bf16", "fp16")


def _kernelize_supported():
    from transformers.utils import import_utils

    ok = getattr(import_utils, "is_kernels_available", lambda: False)()
    bounds = (getattr(import_utils, "KERNELS_MIN_VERSION", "?"), getattr(import_utils, "KERNELS_MAX_VERSION", "?"))
    return ok, (f"transformers {version('transformers')} does not accept kernels {version('kernels')} "
                f"(it wants {bounds[0]} <= kernels < {bounds[1]}), so its layers are not kernelizable; "
                "README 'Using the kernels' gives the tested range")


SUPPORTED, UNSUPPORTED_REASON = _kernelize_supported()
needs_kernelize = pytest.mark.skipif(not SUPPORTED, reason=UNSUPPORTED_REASON)


def tiny_llama(device, dtype=torch.bfloat16):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=LAYERS, num_attention_heads=4,
                         num_key_value_heads=4, vocab_size=VOCAB, pad_token_id=0)
    model = LlamaForCausalLM(config).to(device=device, dtype=dtype).eval()
    with torch.no_grad():  # trained-like norm weights, not all ones, so that the weight multiply matters
        for module in model.modules():
            if type(module).__name__ == "LlamaRMSNorm":
                module.weight.copy_(1 + 0.1 * torch.randn_like(module.weight))
    return model


def kernelized(model, kernel, device):
    from kernels import LocalLayerRepository, Mode, kernelize, use_kernel_mapping

    # The variant directory of the kernel under test: on a GPU machine the repo root would resolve to the GPU
    # variant, which has no CPU implementation.
    repo = LocalLayerRepository(Path(kernel.__file__).parent, layer_name="RMSNorm")
    # kernels warns once per decorated layer that has no mapping (SiLU, rotary_pos_emb): expected here.
    logging.getLogger("kernels").setLevel(logging.ERROR)
    with use_kernel_mapping({"RMSNorm": {device: repo}}):
        return kernelize(model, mode=Mode.INFERENCE, device=device)


def count_rms_norm_calls(kernel, fn) -> int:
    op_name = kernel.ops.rms_norm.default.name()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return sum(1 for event in prof.events() if event.name == op_name)


@pytest.mark.kernels_ci
@needs_kernelize
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_kernelized_llama(kernel, device, dtype):
    model = tiny_llama(device, dtype)
    ids = torch.randint(1, VOCAB, (2, 12), device=device)
    with torch.no_grad():
        expected = model(ids).logits
        model = kernelized(model, kernel, device)
        assert type(model.model.norm).forward is not model.model.norm.forward.__func__, "kernelize swapped nothing"
        calls = count_rms_norm_calls(kernel, lambda: model(ids))
        logits = model(ids).logits
    if dtype == torch.float32:
        # The op takes 16-bit inputs; the layer computes LlamaRMSNorm's formula itself: the same logits.
        assert calls == 0
        torch.testing.assert_close(logits, expected, rtol=0, atol=0)
    else:
        # Two norms per decoder layer and the final one; a rare rounding flip in a norm (a different fp32
        # summation order) may move a 16-bit logit by an ulp or two.
        assert calls == 2 * LAYERS + 1
        torch.testing.assert_close(logits, expected, rtol=2e-2, atol=2e-2)

    with torch.no_grad():
        generated = model.generate(ids[:1, :4], max_new_tokens=5, do_sample=False)
    assert generated.shape == (1, 9)


def _llama_norm(hidden, dtype, weight_dtype, device):
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    norm = LlamaRMSNorm(hidden, eps=1e-6).to(device)
    with torch.no_grad():
        norm.weight.copy_(1 + 0.1 * torch.randn(hidden, device=device))
    return norm.to(weight_dtype)


def _layer_forward(kernel, norm, x):
    return kernel.layers.RMSNorm.forward(norm, x)


@pytest.mark.parametrize("weight_dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_layer_weight_dtype_other_than_the_activations(kernel, device, dtype, weight_dtype):
    """Any activation dtype with any weight dtype: LlamaRMSNorm's output dtype (type promotion) and values."""
    norm = _llama_norm(1000, dtype, weight_dtype, device)
    x = torch.randn(7, 1000, device=device).to(dtype)
    with torch.no_grad():
        ours, expected = _layer_forward(kernel, norm, x), norm(x)
    assert ours.dtype == expected.dtype
    if dtype == torch.float32:
        assert torch.equal(ours, expected)
    elif ours.dtype == dtype:
        assert_matches_reference(ours, expected, max_ulps=2)
    else:  # a 16-bit normed value times a wider weight: a rare 1-ulp flip of normed moves the product by 2^-8
        mismatch = ~torch.isclose(ours, expected, rtol=0, atol=0)
        assert mismatch.float().mean() <= 1e-3
        torch.testing.assert_close(ours, expected, rtol=2**-7, atol=0)


@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16), ids=("bf16", "fp16"))
def test_layer_rounding_order(kernel, device, dtype):
    """The layer reproduces LlamaRMSNorm's order (round the normalized value, then multiply by the weight) bit for
    bit, flips aside; the other order of transformers' RMSNorms (multiply in fp32, round once: OLMo 2/3, GPT-OSS,
    ...) is at most 1 ulp of the output away, on about a quarter of the elements (measured here)."""
    hidden = 4096
    norm = _llama_norm(hidden, dtype, dtype, device)
    x = torch.randn(64, hidden, device=device).to(dtype)
    with torch.no_grad():
        ours = _layer_forward(kernel, norm, x)
        xf = x.float()
        normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
        llama = norm.weight * normed.to(dtype)
        fp32_order = (norm.weight.float() * normed).to(dtype)
    assert_matches_reference(ours, llama, max_ulps=2)  # a flip of normed, times a weight near 1
    ulps = (_ordinal(ours.cpu()) - _ordinal(fp32_order.cpu())).abs()
    assert int(ulps.max()) <= 1
    assert 0.1 < float((ulps != 0).float().mean()) < 0.4
