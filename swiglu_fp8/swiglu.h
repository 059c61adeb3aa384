#pragma once
// Host entry point of silu_and_mul (README "Op contract"): swiglu.cu on CUDA and ROCm, swiglu_cpu.cpp on the
// CPU. torch-ext/torch_binding.cpp registers it.
#include <optional>

#include <torch/all.h>

void silu_and_mul(torch::Tensor& out, const torch::Tensor& input, const std::optional<torch::Tensor>& scale);
