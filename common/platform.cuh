#pragma once
// Vendor portability layer, part 1: what differs between CUDA and HIP at the language level.
// No torch includes. One source serves three compilers:
//   - nvcc (CUDA);
//   - hipcc/clang on the hipified source (kernel-builder's ROCm build, USE_ROCM defined);
//   - clang -x hip with the compile-check shim (FP8DK_HIP_SHIM, no ROCm install; tools/compile_check).
// Everything AMD-specific goes through clang builtins so the shim stays tiny.

#if defined(FP8DK_HIP_SHIM)
#include "hip_min.h"
#define FP8DK_AMD 1
#elif defined(USE_ROCM) || defined(__HIP_PLATFORM_AMD__)
#include <hip/hip_runtime.h>
#define FP8DK_AMD 1
#else
#include <cuda_runtime.h>
#include <stdint.h>
#define FP8DK_NVIDIA 1
#endif

#define FP8DK_DEVICE __device__ __forceinline__
#define FP8DK_HOST_DEVICE __host__ __device__ __forceinline__

namespace fp8dk {

// Threads that execute in lockstep. Our ROCm targets (gfx942, gfx950) are all wave64; the value is a
// compile-time constant on the host too, so launchers size blocks without a device query.
#if defined(FP8DK_AMD)
constexpr int kWarpSize = 64;
#if defined(__AMDGCN_WAVEFRONT_SIZE)
static_assert(__AMDGCN_WAVEFRONT_SIZE == kWarpSize, "fp8-decode-kernels targets wave64 AMD GPUs only");
#endif
#else
constexpr int kWarpSize = 32;
#endif

// The NVIDIA sm_90+ device pass: thread-block clusters and distributed shared memory, griddepcontrol (PDL),
// the copy engine (TMA) and packed bf16 arithmetic exist. Host passes, older NVIDIA targets and AMD see it
// undefined.
#if defined(FP8DK_NVIDIA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define FP8DK_SM90 1
#endif

// Whether this device pass has hardware FP8 conversion. Which FP8 flavour it converts natively is in
// numerics.cuh; host passes see 0.
#if defined(FP8DK_NVIDIA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define FP8DK_NV_FP8_CVT 1
#endif
#if defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__)
#define FP8DK_AMD_FP8_FNUZ 1
#elif defined(__gfx950__) || defined(__gfx1200__) || defined(__gfx1201__)
#define FP8DK_AMD_FP8_OCP 1
#endif

#if defined(FP8DK_AMD)
FP8DK_DEVICE uint32_t float_as_uint(float x) { return __builtin_bit_cast(uint32_t, x); }
FP8DK_DEVICE float uint_as_float(uint32_t x) { return __builtin_bit_cast(float, x); }
FP8DK_DEVICE float fmin_(float a, float b) { return __builtin_fminf(a, b); }
FP8DK_DEVICE float fmax_(float a, float b) { return __builtin_fmaxf(a, b); }
FP8DK_DEVICE float round_even(float x) { return __builtin_rintf(x); }
FP8DK_DEVICE float fma_rn(float a, float b, float c) { return __builtin_fmaf(a, b, c); }  // one rounding
#else
FP8DK_DEVICE uint32_t float_as_uint(float x) { return __float_as_uint(x); }
FP8DK_DEVICE float uint_as_float(uint32_t x) { return __uint_as_float(x); }
FP8DK_DEVICE float fmin_(float a, float b) { return fminf(a, b); }
FP8DK_DEVICE float fmax_(float a, float b) { return fmaxf(a, b); }
FP8DK_DEVICE float round_even(float x) { return rintf(x); }
FP8DK_DEVICE float fma_rn(float a, float b, float c) { return __fmaf_rn(a, b, c); }  // one rounding
#endif

FP8DK_DEVICE float shfl_xor(float v, int lane_mask) {
#if defined(FP8DK_AMD)
  return __shfl_xor(v, lane_mask);
#else
  return __shfl_xor_sync(0xffffffffu, v, lane_mask);
#endif
}

// Correctly rounded square root (the RMSNorm reference divides by an IEEE sqrt, not an approximation).
FP8DK_DEVICE float sqrt_rn(float x) {
#if defined(FP8DK_AMD)
  return __builtin_sqrtf(x);
#else
  return __fsqrt_rn(x);
#endif
}

// 2^x through the special-function unit (v_exp_f32 / ex2.approx, about 2 ulp).
FP8DK_DEVICE float exp2_approx(float x) {
#if defined(FP8DK_AMD)
  return __builtin_amdgcn_exp2f(x);
#else
  float y;
  asm("ex2.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#endif
}

// 1/x through the special-function unit (v_rcp_f32 / rcp.approx, about 1 ulp).
FP8DK_DEVICE float rcp_approx(float x) {
#if defined(FP8DK_AMD)
  return __builtin_amdgcn_rcpf(x);
#else
  float y;
  asm("rcp.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#endif
}

FP8DK_DEVICE void sync_block() { __syncthreads(); }

// Correctly rounded a / b and 1 / x: the reference divides (mean, then 1 / sqrt) on the CPU in IEEE fp32.
// HIP compiles fp32 division correctly rounded by default (-fhip-fp32-correctly-rounded-divide-sqrt);
// the NVIDIA intrinsics are correctly rounded whatever the flags (even --use_fast_math).
FP8DK_DEVICE float div_rn(float a, float b) {
#if defined(FP8DK_AMD)
  return a / b;
#else
  return __fdiv_rn(a, b);
#endif
}

FP8DK_DEVICE float rcp_rn(float x) {
#if defined(FP8DK_AMD)
  return 1.f / x;
#else
  return __frcp_rn(x);
#endif
}

FP8DK_DEVICE void trap() {
#if defined(FP8DK_AMD)
  __builtin_trap();
#else
  __trap();
#endif
}


FP8DK_DEVICE bool is_finite(float x) {
#if defined(FP8DK_AMD)
  return __builtin_isfinite(x);
#else
  return isfinite(x);
#endif
}

FP8DK_DEVICE float copysign_(float magnitude, float sign) {
#if defined(FP8DK_AMD)
  return __builtin_copysignf(magnitude, sign);
#else
  return copysignf(magnitude, sign);
#endif
}

FP8DK_DEVICE float abs_(float x) { return uint_as_float(float_as_uint(x) & 0x7fffffffu); }


}  // namespace fp8dk
