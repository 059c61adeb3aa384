"""A transformers Llama running our kernels: RMSNorm swapped in by kernels.kernelize, then the MLPs converted to
static FP8 (convert.convert_llama_mlps_to_fp8), each generating tokens, with tokens/s against plain transformers.

    python tools/build.py                        # once: the local build loaded below
    python examples/llama_kernelize.py           # GPU: Llama-3.1-8B's layer shapes, 4 layers, bf16
    python examples/llama_kernelize.py --device cpu --layers 2 --new-tokens 8    # tiny model on CPU

The model is built from a LlamaConfig with random weights (nothing is downloaded), so the generated tokens are
meaningless: the point is that the swapped modules run and agree with the originals. The layer comes from the
local build through LocalLayerRepository; once the kernel is on the Hub, the same mapping takes
`LayerRepository("fp8-decode-kernels/fp8-decode-kernels", layer_name="RMSNorm", version=1)`.
"""

import argparse
import logging
import time
from pathlib import Path

import torch
from kernels import LocalLayerRepository, Mode, get_local_kernel, kernelize, use_kernel_mapping
from transformers import LlamaConfig, LlamaForCausalLM

REPO = Path(__file__).resolve().parent.parent
# Llama-3.1-8B's layer shapes (fewer layers, smaller vocabulary by default) on a GPU; a toy model on CPU.
SIZES = {
    "cuda": dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
                 vocab_size=32000, rope_theta=500000.0),
    "cpu": dict(hidden_size=256, intermediate_size=512, num_attention_heads=4, num_key_value_heads=2,
                vocab_size=1000, rope_theta=500000.0),
}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def build_model(args) -> LlamaForCausalLM:
    torch.manual_seed(args.seed)
    config = LlamaConfig(num_hidden_layers=args.layers, max_position_embeddings=args.prompt_len + args.new_tokens,
                         **SIZES[args.device])
    return LlamaForCausalLM(config).to(device=args.device, dtype=torch.bfloat16).eval()


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def generate(model, prompt: torch.Tensor, new_tokens: int) -> tuple:
    """Greedy generation of exactly `new_tokens` tokens (an EOS cannot end it early), timed on the second of two
    identical runs (the first pays for lazy initialisation); returns (tokens, tokens per second over the batch)."""
    def run():
        return model.generate(prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)

    with torch.no_grad():
        run()
        sync(prompt.device.type)
        start = time.perf_counter()
        tokens = run()
        sync(prompt.device.type)
    return tokens, prompt.shape[0] * new_tokens / (time.perf_counter() - start)


def kernelize_rms_norm(model, kernel) -> int:
    """Swaps the forward of every LlamaRMSNorm for our layer's; returns how many modules run it now."""
    layer = LocalLayerRepository(REPO, layer_name="RMSNorm")
    # Any device key the model may be on: kernelize looks up "rocm" for a "cuda" model on a ROCm torch.
    with use_kernel_mapping({"RMSNorm": {"cuda": layer, "rocm": layer, "cpu": layer}}):
        kernelize(model, mode=Mode.INFERENCE)
    return sum(1 for m in model.modules()
               if getattr(getattr(m, "forward", None), "__module__", "") == f"{kernel.__name__}.layers")


def main() -> None:
    args = parse_args()
    # kernelize warns about every decorated layer without a mapping (SiLU, rotary_pos_emb): expected here.
    logging.getLogger("kernels.layer.layer").setLevel(logging.ERROR)
    kernel = get_local_kernel(REPO, backend="cpu" if args.device == "cpu" else None)

    model = build_model(args)
    prompt = torch.randint(model.config.vocab_size, (args.batch, args.prompt_len), device=args.device)
    with torch.no_grad():
        logits = model(prompt).logits
    rows = [("transformers", *generate(model, prompt, args.new_tokens))]

    swapped = kernelize_rms_norm(model, kernel)
    if swapped != 2 * args.layers + 1:
        from transformers.utils import import_utils

        why = ""
        if not getattr(import_utils, "is_kernels_available", lambda: False)():
            why = (f": this transformers accepts kernels {getattr(import_utils, 'KERNELS_MIN_VERSION', '?')} <= "
                   f"version < {getattr(import_utils, 'KERNELS_MAX_VERSION', '?')} only, so its layers are not "
                   "kernelizable (README 'Using the kernels': transformers >= 5.18 for kernels 0.17)")
        raise SystemExit(f"kernelize swapped {swapped} RMSNorm modules, expected {2 * args.layers + 1}{why}")
    with torch.no_grad():
        norm_diff = (model(prompt).logits - logits).abs().max().item()
    rows.append(("+ kernelized RMSNorm", *generate(model, prompt, args.new_tokens)))

    kernel.convert.convert_llama_mlps_to_fp8(model, calibration_inputs=prompt)
    with torch.no_grad():
        fp8_error = ((model(prompt).logits - logits).float().norm() / logits.float().norm()).item()
    rows.append(("+ static FP8 MLPs", *generate(model, prompt, args.new_tokens)))

    c = model.config
    print(f"Llama, {c.num_hidden_layers} layers, hidden {c.hidden_size}, intermediate {c.intermediate_size}, "
          f"{c.num_attention_heads}/{c.num_key_value_heads} heads, bf16, {args.device}; batch {args.batch}, "
          f"prompt {args.prompt_len}, {args.new_tokens} new tokens")
    print(f"kernelized {swapped} RMSNorm modules: max |logit difference| {norm_diff:.3g}; "
          f"FP8 MLPs: relative logit error {fp8_error:.3g}")
    baseline = rows[0][1][:, args.prompt_len:]
    print("\n| model | tokens/s | tokens equal to transformers' |\n|---|---:|---:|")
    for name, tokens, rate in rows:
        same = (tokens[:, args.prompt_len:] == baseline).float().mean().item()
        print(f"| {name} | {rate:.1f} | {same:.0%} |")


if __name__ == "__main__":
    main()
