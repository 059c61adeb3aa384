#pragma once
// Host entry point of quantize_fp8 (README "Op contract"): quantize.cu on CUDA and ROCm, quantize_cpu.cpp on
// the CPU. torch-ext/torch_binding.cpp registers it.
#include <torch/all.h>

void quantize_fp8(torch::Tensor& out, const torch::Tensor& input, const torch::Tensor& scale);
