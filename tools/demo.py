#!/usr/bin/env python3
"""Demo of the local build (python tools/build.py first; scripts/demo.sh does both):

1. loads the kernel the way users do, kernels.get_kernel(<repo id>, version=1) with LOCAL_KERNELS pointing at
   this checkout;
2. builds a tiny Llama from a config (random weights, nothing downloaded), swaps its RMSNorm layers for ours
   with kernels.kernelize, checks the logits against the unmodified model and greedily generates 20 tokens;
3. prints the median time of each op against its PyTorch eager reference (reference.py) on this device, for a
   few shapes: small ones on CPU, Llama-405B decode shapes (per GPU of TP8) on a GPU. A quick look, not a
   benchmark: see benchmarks/ for that.
"""

import logging
import os
import statistics
import sys
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

REPO = Path(__file__).resolve().parent.parent
# The op table times with the benchmarks' eager timer (benchmarks/sweep.py), not a copy of it.
sys.path.insert(0, str(REPO / "benchmarks"))
from sweep import synced_ms  # noqa: E402

REPO_ID = "fp8-decode-kernels/fp8-decode-kernels"


def load_kernel():
    import kernels

    os.environ["LOCAL_KERNELS"] = f"{REPO_ID}={REPO}"
    return kernels.get_kernel(REPO_ID, version=1)


class OpCounter(TorchDispatchMode):
    """Counts the calls of one op (a dispatch mode rather than the profiler, which prints to stderr)."""

    def __init__(self, op):
        super().__init__()
        self.op, self.calls = op, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls += func is self.op
        return func(*args, **(kwargs or {}))


def quiet_kernels_logging() -> None:
    """kernelize logs a note for every module instance of a decorated layer without a mapping (SiLU,
    rotary_pos_emb: the same note once per decoder layer): expected here, so only errors are shown. Set before
    kernels is imported, for all of its loggers."""
    logging.getLogger("kernels").setLevel(logging.ERROR)


def llama_demo(kernel, device: str) -> None:
    from kernels import LocalLayerRepository, Mode, kernelize, use_kernel_mapping
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=1000, pad_token_id=0)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(device=device, dtype=torch.bfloat16).eval()
    prompt = torch.randint(1, config.vocab_size, (1, 8), device=device)
    with torch.no_grad():
        expected = model(prompt).logits

    with use_kernel_mapping({"RMSNorm": {device: LocalLayerRepository(REPO, layer_name="RMSNorm")}}):
        model = kernelize(model, mode=Mode.INFERENCE, device=device)
    op = kernel.ops.rms_norm.default
    with torch.no_grad(), OpCounter(op) as counter:
        logits = model(prompt).logits
    op_name, calls = op.name(), counter.calls
    with torch.no_grad():
        tokens = model.generate(prompt, max_new_tokens=20, do_sample=False)

    print(f"tiny Llama ({config.num_hidden_layers} layers, hidden {config.hidden_size}, bf16) on {device}")
    print(f"  kernelized: {type(model.model.norm).__name__} forward -> {model.model.norm.forward.__qualname__}")
    print(f"  {op_name} calls per forward: {calls} (2 per layer + final norm)")
    print(f"  max |logits - unkernelized logits|: {(logits - expected).abs().max().item():.3g}")
    print(f"  prompt ids:    {prompt[0].tolist()}")
    print(f"  generated ids: {tokens[0, prompt.shape[1]:].tolist()}")
    print("  (random weights: the token ids are gibberish as text; this shows the kernelized model runs)\n")


def median_ms(fn, device: str, iters: int) -> float:
    return statistics.median(synced_ms(fn, iters, device, warmup=3))


def op_cases(kernel, device: str):
    """(op, shape description, kernel call, reference call) for this device's shapes."""
    ref = kernel.reference
    fp8 = kernel.native_fp8_dtype(torch.device(device))
    scale = torch.tensor([0.05], device=device)
    gpu = device != "cpu"
    rows_list = (1, 8, 32) if gpu else (1, 8)
    hidden = 16384 if gpu else 4096
    d = 6656 if gpu else 2048  # 405B intermediate 53248 / TP8
    cases = []
    for rows in rows_list:
        x = torch.randn(rows, hidden, dtype=torch.bfloat16, device=device)
        w = torch.randn(hidden, dtype=torch.bfloat16, device=device)
        cases.append(("rms_norm -> fp8", f"[{rows}, {hidden}]",
                      lambda x=x, w=w: kernel.rms_norm(x, w, 1e-6, scale, fp8),
                      lambda x=x, w=w: ref.rms_norm_ref(x, w, 1e-6, scale, fp8)))
        g = torch.randn(rows, 2 * d, dtype=torch.bfloat16, device=device)
        cases.append(("silu_and_mul -> fp8", f"[{rows}, 2*{d}]",
                      lambda g=g: kernel.silu_and_mul(g, scale, fp8),
                      lambda g=g: ref.silu_and_mul_ref(g, scale, fp8)))
    n, k = (2304, 16384) if gpu else (1024, 4096)  # 405B TP8 QKV projection
    for m in rows_list:
        a = torch.randn(m, k, device=device).to(fp8)
        b = torch.randn(n, k, device=device).to(fp8)
        if gpu:  # the float64 definition
            peer = lambda a=a, b=b: ref.skinny_gemm_ref(a, b, scale, scale, None, torch.bfloat16)  # noqa: E731
        else:  # what eager PyTorch runs for an FP8 linear layer on CPU
            peer = lambda a=a, b=b: torch._scaled_mm(a, b.t(), scale, scale, out_dtype=torch.bfloat16)  # noqa: E731
        cases.append(("skinny_gemm fp8", f"M={m} N={n} K={k}",
                      lambda a=a, b=b: kernel.skinny_gemm(a, b, scale, scale, out_dtype=torch.bfloat16), peer))
    return cases


def op_table(kernel, device: str) -> None:
    iters = 50
    peer = "reference.py in PyTorch eager" + ("" if device != "cpu" else "; GEMM: torch._scaled_mm")
    print(f"median time per call on {device} ({iters} runs; reference = {peer}):")
    print(f"  {'op':<20} {'shape':<24} {'kernel ms':>10} {'reference ms':>13} {'speedup':>8}")
    for name, shape, ours, theirs in op_cases(kernel, device):
        t_ours, t_ref = median_ms(ours, device, iters), median_ms(theirs, device, iters)
        print(f"  {name:<20} {shape:<24} {t_ours:>10.3f} {t_ref:>13.3f} {t_ref / t_ours:>7.1f}x")
    if device != "cpu":
        print("  (the skinny_gemm reference multiplies in float64: its speedup is not a fair comparison)")


def main() -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    quiet_kernels_logging()
    kernel = load_kernel()
    print(f"loaded {REPO_ID} as {kernel.__name__} from {Path(kernel.__file__).parent.relative_to(REPO)}\n")
    llama_demo(kernel, device)
    op_table(kernel, device)


if __name__ == "__main__":
    main()
