#pragma once
// Host entry point of skinny_gemm (README "Op contract"): skinny_gemm.cu on CUDA and ROCm, skinny_gemm_cpu.cpp
// on the CPU. torch-ext/torch_binding.cpp registers it.
#include <optional>

#include <torch/all.h>

void skinny_gemm(torch::Tensor& out, const torch::Tensor& a, const torch::Tensor& b,
                 const std::optional<torch::Tensor>& scale_a, const std::optional<torch::Tensor>& scale_b,
                 const std::optional<torch::Tensor>& bias);
