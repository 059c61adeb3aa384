// hip_min.h -- the smallest stand-in for <hip/hip_runtime.h> that the portability layer needs for a
// device-only compile with clang (no ROCm installed):
//
//   clang-19 -x hip --offload-arch=gfx942 -nogpulib -nogpuinc --cuda-device-only -O3 -S \
//            -DFP8DK_HIP_SHIM -I tools/compile_check -I . tu.hip
//
// common/platform.cuh includes this file instead of the HIP runtime header when FP8DK_HIP_SHIM is defined.
// Only what real HIP provides *as a language-level runtime* lives here (attributes, index variables,
// barrier, shuffle, fixed-width integer types). Everything else (fp8 conversion, DPP, bit casts, non-temporal
// loads, ...) is written with clang builtins inside the portability layer itself, so it compiles the same
// with this shim and with the real HIP headers. Keep it that way: add a symbol here only when real HIP
// declares it too, with the same name and meaning.
#pragma once

#if !defined(__HIP__)
#error "hip_min.h is for clang -x hip device compiles only"
#endif

// What <hip/hip_runtime.h> (hip_common.h) defines on AMD; torch's ROCm build also passes these.
#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1
#endif

// ---------------------------------------------------------------- function and variable attributes
// clang's __clang_hip_runtime_wrapper.h defines these too; it is not included with -nogpuinc.
#ifndef __CLANG_HIP_RUNTIME_WRAPPER_INCLUDED__
#define __host__ __attribute__((host))
#define __device__ __attribute__((device))
#define __global__ __attribute__((global))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#endif
#ifndef __forceinline__
#define __forceinline__ __inline__ __attribute__((always_inline))
#endif
#ifndef __noinline__
#define __noinline__ __attribute__((noinline))
#endif
#ifndef __align__
#define __align__(n) __attribute__((aligned(n)))
#endif

// __launch_bounds__(max_threads) or (max_threads, min_waves_per_eu): HIP's meaning of the second argument
// (a minimum number of waves per execution unit, not CUDA's blocks per SM).
#define __FP8DK_LB_PICK(_1, _2, NAME, ...) NAME
#define __FP8DK_LB1(n) __attribute__((amdgpu_flat_work_group_size(1, n)))
#define __FP8DK_LB2(n, m) __attribute__((amdgpu_flat_work_group_size(1, n), amdgpu_waves_per_eu(m)))
#define __launch_bounds__(...) __FP8DK_LB_PICK(__VA_ARGS__, __FP8DK_LB2, __FP8DK_LB1, unused)(__VA_ARGS__)

// ---------------------------------------------------------------- fixed-width integers
// Spelled with the compiler's own type macros, so they match <cstdint> exactly if that is also included.
typedef __INT8_TYPE__ int8_t;
typedef __UINT8_TYPE__ uint8_t;
typedef __INT16_TYPE__ int16_t;
typedef __UINT16_TYPE__ uint16_t;
typedef __INT32_TYPE__ int32_t;
typedef __UINT32_TYPE__ uint32_t;
typedef __INT64_TYPE__ int64_t;
typedef __UINT64_TYPE__ uint64_t;
typedef __INTPTR_TYPE__ intptr_t;
typedef __UINTPTR_TYPE__ uintptr_t;
typedef __SIZE_TYPE__ size_t;

// ---------------------------------------------------------------- threadIdx / blockIdx / blockDim / gridDim
// As in HIP: a struct whose x/y/z are __declspec(property) getters (clang enables the extension in HIP mode).
#define __FP8DK_INDEX_VAR(NAME, X, Y, Z)                                  \
  struct NAME##_t {                                                        \
    __declspec(property(get = __get_x)) unsigned int x;                    \
    __declspec(property(get = __get_y)) unsigned int y;                    \
    __declspec(property(get = __get_z)) unsigned int z;                    \
    static __device__ __forceinline__ unsigned int __get_x() { return X; } \
    static __device__ __forceinline__ unsigned int __get_y() { return Y; } \
    static __device__ __forceinline__ unsigned int __get_z() { return Z; } \
  };                                                                       \
  extern const __device__ __attribute__((weak)) NAME##_t NAME;

__FP8DK_INDEX_VAR(threadIdx, __builtin_amdgcn_workitem_id_x(), __builtin_amdgcn_workitem_id_y(),
                  __builtin_amdgcn_workitem_id_z())
__FP8DK_INDEX_VAR(blockIdx, __builtin_amdgcn_workgroup_id_x(), __builtin_amdgcn_workgroup_id_y(),
                  __builtin_amdgcn_workgroup_id_z())
__FP8DK_INDEX_VAR(blockDim, __builtin_amdgcn_workgroup_size_x(), __builtin_amdgcn_workgroup_size_y(),
                  __builtin_amdgcn_workgroup_size_z())
__FP8DK_INDEX_VAR(gridDim, __builtin_amdgcn_grid_size_x() / __builtin_amdgcn_workgroup_size_x(),
                  __builtin_amdgcn_grid_size_y() / __builtin_amdgcn_workgroup_size_y(),
                  __builtin_amdgcn_grid_size_z() / __builtin_amdgcn_workgroup_size_z())
#undef __FP8DK_INDEX_VAR

// ---------------------------------------------------------------- wavefront
#define warpSize 64  // CDNA (gfx9xx) runs wave64 only

static __device__ __forceinline__ void __syncthreads() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}

static __device__ __forceinline__ unsigned int __lane_id() {
  return __builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u));
}

// __shfl_xor with HIP's semantics: lanes outside the caller's `width`-sized segment read their own value.
// Lowers to ds_bpermute_b32 (one LDS-crossbar permute per call).
static __device__ __forceinline__ int __shfl_xor(int var, int lane_mask, int width = warpSize) {
  const int self = static_cast<int>(__lane_id());
  int index = self ^ lane_mask;
  index = index >= ((self + width) & ~(width - 1)) ? self : index;
  return __builtin_amdgcn_ds_bpermute(index << 2, var);
}
static __device__ __forceinline__ unsigned int __shfl_xor(unsigned int var, int lane_mask, int width = warpSize) {
  return static_cast<unsigned int>(__shfl_xor(static_cast<int>(var), lane_mask, width));
}
static __device__ __forceinline__ float __shfl_xor(float var, int lane_mask, int width = warpSize) {
  return __builtin_bit_cast(float, __shfl_xor(__builtin_bit_cast(int, var), lane_mask, width));
}
