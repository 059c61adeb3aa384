"""kernels.kernelize swaps transformers' RMSNorm for layers.RMSNorm in a tiny Llama (random weights, no download):
the op runs for every norm and the model computes what it computed before."""

import logging
from pathlib import Path

import pytest
import torch

# kernel-builder's test shell has transformers only through flake.nix's pythonCheckInputs.
pytest.importorskip("transformers")

LAYERS = 2
VOCAB = 100


def tiny_llama(device):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=LAYERS, num_attention_heads=4,
                         num_key_value_heads=4, vocab_size=VOCAB, pad_token_id=0)
    return LlamaForCausalLM(config).to(device=device, dtype=torch.bfloat16).eval()


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
def test_kernelized_llama(kernel, device):
    model = tiny_llama(device)
    ids = torch.randint(1, VOCAB, (2, 12), device=device)
    with torch.no_grad():
        expected = model(ids).logits
        model = kernelized(model, kernel, device)
        assert type(model.model.norm).forward is not model.model.norm.forward.__func__
        calls = count_rms_norm_calls(kernel, lambda: model(ids))
        logits = model(ids).logits
    # Two norms per decoder layer and the final one.
    assert calls == 2 * LAYERS + 1
    # Same numerics as LlamaRMSNorm; a rare rounding flip in a norm may move a bf16 logit by an ulp or two.
    torch.testing.assert_close(logits, expected, rtol=2e-2, atol=2e-2)

    with torch.no_grad():
        generated = model.generate(ids[:1, :4], max_new_tokens=5, do_sample=False)
    assert generated.shape == (1, 9)
