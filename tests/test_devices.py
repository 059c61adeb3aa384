"""Device checks: every tensor argument of every op must be on the device of the others; a call that mixes devices
raises an error naming the argument and the device found, meta included (a call with any meta argument goes to
the fake implementation, which must not silently leave `out` unwritten). All-meta calls propagate shapes."""

import pytest
import torch

from .conftest import HAS_GPU

OPS = ("rms_norm", "fused_add_rms_norm", "silu_and_mul", "skinny_gemm", "quantize_fp8")


def op_args(op: str, device) -> dict:
    """Valid arguments of the raw op, in schema order."""
    bf, fp8 = torch.bfloat16, torch.float8_e4m3fn
    x = torch.randn(4, 64, dtype=bf, device=device)
    scale = torch.tensor([0.5], device=device)
    weight = torch.ones(64, dtype=bf, device=device)
    if op == "rms_norm":
        return dict(out=torch.empty(4, 64, dtype=fp8, device=device), input=x, weight=weight, eps=1e-6, scale=scale)
    if op == "fused_add_rms_norm":
        return dict(out=torch.empty(4, 64, dtype=fp8, device=device), input=x, residual=torch.randn_like(x),
                    weight=weight, eps=1e-6, scale=scale)
    if op == "silu_and_mul":
        return dict(out=torch.empty(4, 32, dtype=fp8, device=device), input=x, scale=scale)
    if op == "skinny_gemm":
        return dict(out=torch.empty(4, 8, dtype=bf, device=device), a=x.to(fp8), b=torch.randn(8, 64, device=device).to(fp8),
                    scale_a=scale, scale_b=scale.clone(), bias=torch.zeros(8, dtype=bf, device=device))
    return dict(out=torch.empty(4, 64, dtype=fp8, device=device), input=x, scale=scale)


CASES = [(op, name) for op in OPS for name, v in op_args(op, "cpu").items() if isinstance(v, torch.Tensor)]
IDS = [f"{op}-{name}" for op, name in CASES]


def _call(kernel, op, args):
    getattr(kernel.ops, op)(*args.values())


@pytest.mark.kernels_ci
@pytest.mark.parametrize("op,name", CASES, ids=IDS)
def test_meta_argument_among_cpu_tensors(kernel_cpu, op, name):
    args = op_args(op, "cpu")
    args[name] = args[name].to("meta")
    with pytest.raises(RuntimeError, match=rf"{op}: .*{name}.*meta"):
        _call(kernel_cpu, op, args)


@pytest.mark.parametrize("op,name", CASES, ids=IDS)
def test_cpu_argument_among_meta_tensors(kernel_cpu, op, name):
    args = {k: v.to("meta") if isinstance(v, torch.Tensor) else v for k, v in op_args(op, "cpu").items()}
    args[name] = op_args(op, "cpu")[name]
    with pytest.raises(RuntimeError, match=rf"{op}: .*{name}.*(cpu|meta)"):
        _call(kernel_cpu, op, args)


@pytest.mark.parametrize("op", OPS)
def test_all_meta_propagates(kernel_cpu, op):
    args = {k: v.to("meta") if isinstance(v, torch.Tensor) else v for k, v in op_args(op, "cpu").items()}
    _call(kernel_cpu, op, args)  # nothing to compute; must not raise


def test_python_api_meta_scale_raises(kernel_cpu):
    """The issue's example: a meta scale beside CPU inputs returned garbage."""
    x, w = torch.randn(2, 16, dtype=torch.bfloat16), torch.ones(16, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="scale must be on the same device as input .cpu., got meta"):
        kernel_cpu.rms_norm(x, w, 1e-6, scale=torch.tensor([0.1], device="meta"))
    with pytest.raises(RuntimeError, match="weight must be on the same device as input .cpu., got meta"):
        kernel_cpu.rms_norm(x, w.to("meta"))
    out = kernel_cpu.rms_norm(x.to("meta"), w.to("meta"), 1e-6, torch.tensor([0.1], device="meta"))
    assert out.device.type == "meta" and out.shape == x.shape and out.dtype == torch.float8_e4m3fn


# GPU: the CUDA/ROCm launchers (through common/checks.h). Skipped without a GPU.
gpu = pytest.mark.skipif(not HAS_GPU, reason="no GPU: torch.cuda.is_available() is False")


@gpu
@pytest.mark.parametrize("op,name", CASES, ids=IDS)
def test_gpu_cpu_argument_among_cuda_tensors(op, name):
    from .conftest import load_kernel

    kernel = load_kernel(None)
    args = op_args(op, "cuda")
    args[name] = args[name].cpu()
    with pytest.raises(RuntimeError, match=rf"{op}: .*{name}.*cpu"):
        _call(kernel, op, args)


@gpu
@pytest.mark.parametrize("op,name", CASES, ids=IDS)
def test_gpu_meta_argument_among_cuda_tensors(op, name):
    from .conftest import load_kernel

    kernel = load_kernel(None)
    args = op_args(op, "cuda")
    args[name] = args[name].to("meta")
    with pytest.raises(RuntimeError, match=rf"{op}: .*{name}.*meta"):
        _call(kernel, op, args)


@pytest.mark.skipif(not HAS_GPU or torch.cuda.device_count() < 2, reason="needs two GPUs")
@pytest.mark.parametrize("op,name", CASES, ids=IDS)
def test_gpu_argument_on_another_gpu(op, name):
    from .conftest import load_kernel

    kernel = load_kernel(None)
    args = op_args(op, "cuda:0")
    args[name] = args[name].to("cuda:1")
    with pytest.raises(RuntimeError, match=rf"{op}: .*{name}.*cuda:"):
        _call(kernel, op, args)
