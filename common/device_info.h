#pragma once
// Device properties the launchers size their grids from, read at run time (never hard-coded: an H100 has
// 132 SMs, an MI300X 304 CUs, an MI355X 256). Host code only. Attribute queries are cheap lookups, unlike
// cudaGetDeviceProperties; device_props() still keeps what it read, per device.
//
// Written for both vendors by hand: kernel-builder hipifies only the .cu files and headers beside them, so a
// header included from common/ reaches hipcc as written. It also avoids ATen/cuda/CUDAContext.h, whose
// cuBLAS/cuSPARSE includes a CPU-only machine lacks (the launchers are compile-checked there).
#include <c10/util/Exception.h>

#include <map>
#include <mutex>

#include "common/plan.h"
#include "common/platform.cuh"

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
constexpr DeviceAttribute kSharedMemoryPerMultiprocessor = hipDeviceAttributeMaxSharedMemoryPerMultiprocessor;

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
constexpr DeviceAttribute kSharedMemoryPerMultiprocessor = cudaDevAttrMaxSharedMemoryPerMultiprocessor;

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

// What the plan functions (common/plan.h) know of the current device. Read once per device: a launch pays a
// device lookup, not the attribute queries.
inline DeviceProps device_props() {
  int device = 0;
#if defined(FP8DK_AMD)
  TORCH_CHECK(hipGetDevice(&device) == hipSuccess, "fp8-decode-kernels: hipGetDevice failed");
#else
  TORCH_CHECK(cudaGetDevice(&device) == cudaSuccess, "fp8-decode-kernels: cudaGetDevice failed");
#endif
  static std::mutex mutex;
  static std::map<int, DeviceProps> cache;
  const std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(device);
  if (it == cache.end()) {
    DeviceProps d;
#if defined(FP8DK_AMD)
    d.vendor = Vendor::kAmd;
#else
    d.vendor = Vendor::kNvidia;
#endif
    d.sms = multiprocessor_count();
    d.warp_size = kWarpSize;
    d.max_smem_per_block = max_shared_memory_per_block();
    d.smem_per_sm = device_attribute(kSharedMemoryPerMultiprocessor);
#if !defined(FP8DK_AMD)
    d.smem_reserved_per_block = device_attribute(cudaDevAttrReservedSharedMemoryPerBlock);
#endif
    it = cache.emplace(device, d).first;
  }
  return it->second;
}

}  // namespace fp8dk
