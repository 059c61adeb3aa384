#pragma once
// The five ops of the contract (README "Op contract"), declared by their kernel directories. One definition of
// each is compiled per variant: the CPU variant links */..._cpu.cpp, the CUDA and ROCm variants the .cu
// launchers. Only torch-ext/ knows the op schemas (torch_binding.cpp).
#include "quant_fp8/quantize.h"
#include "rmsnorm_fp8/rmsnorm.h"
#include "skinny_gemm/skinny_gemm.h"
#include "swiglu_fp8/swiglu.h"
