#pragma once
// Device properties the launchers size their grids from, read at run time (never hard-coded: an H100 has
// 132 SMs, an MI300X 304 CUs, an MI355X 256). Host code only. Attribute queries are cheap lookups, unlike
// cudaGetDeviceProperties, so they run per launch.
//
// Written for both vendors by hand: kernel-builder hipifies only the .cu files and headers beside them, so a
// header included from common/ reaches hipcc as written. It also avoids ATen/cuda/CUDAContext.h, whose
// cuBLAS/cuSPARSE includes a CPU-only machine lacks (the launchers are compile-checked there).
#include <c10/util/Exception.h>

#if defined(USE_ROCM)
#include <hip/hip_runtime.h>
#else
#include <cuda_runtime.h>
#endif

namespace fp8dk {

#if defined(USE_ROCM)
using DeviceAttribute = hipDeviceAttribute_t;
constexpr DeviceAttribute kMultiprocessorCount = hipDeviceAttributeMultiprocessorCount;
// AMD has no opt-in beyond the per-block limit (64 KB LDS on MI300X, 160 KB on MI355X).
constexpr DeviceAttribute kMaxSharedMemoryPerBlock = hipDeviceAttributeMaxSharedMemoryPerBlock;

inline int device_attribute(DeviceAttribute attr) {
  int device = 0, value = 0;
  TORCH_CHECK(hipGetDevice(&device) == hipSuccess && hipDeviceGetAttribute(&value, attr, device) == hipSuccess,
              "fp8-decode-kernels: could not read a device attribute");
  return value;
}
#else
using DeviceAttribute = cudaDeviceAttr;
constexpr DeviceAttribute kMultiprocessorCount = cudaDevAttrMultiProcessorCount;
constexpr DeviceAttribute kMaxSharedMemoryPerBlock = cudaDevAttrMaxSharedMemoryPerBlockOptin;

inline int device_attribute(DeviceAttribute attr) {
  int device = 0, value = 0;
  TORCH_CHECK(cudaGetDevice(&device) == cudaSuccess && cudaDeviceGetAttribute(&value, attr, device) == cudaSuccess,
              "fp8-decode-kernels: could not read a device attribute");
  return value;
}
#endif

inline int multiprocessor_count() { return device_attribute(kMultiprocessorCount); }

// Shared memory one block may use once it opts in (cudaFuncSetAttribute on NVIDIA).
inline int max_shared_memory_per_block() { return device_attribute(kMaxSharedMemoryPerBlock); }

}  // namespace fp8dk
