#pragma once
// Host side of thread-block clusters (NVIDIA, CUDA 12+): the launch configuration of a clustered grid and how
// many clusters of a shape the device runs at once. Shared by the launchers that split work over a cluster
// (rmsnorm.cu, skinny_gemm_launch.cuh); the device side is common/cluster.cuh. Host code only, NVIDIA only.
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <tuple>

namespace fp8dk {

// A launch of `grid` CTAs of `threads` threads in clusters of `cluster` CTAs; `attr` must outlive the config.
inline cudaLaunchConfig_t cluster_launch_config(dim3 grid, dim3 cluster, int threads, int smem_bytes,
                                                cudaStream_t stream, cudaLaunchAttribute* attr) {
  attr->id = cudaLaunchAttributeClusterDimension;
  attr->val.clusterDim.x = cluster.x;
  attr->val.clusterDim.y = cluster.y;
  attr->val.clusterDim.z = cluster.z;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  config.attrs = attr;
  config.numAttrs = 1;
  return config;
}

// Clusters of `cluster` CTAs (`threads` threads, `smem_bytes` of dynamic shared memory each) of `kernel` that
// the current device runs at once: 0 where the kernel's code was built for less than compute_90 (its cluster
// code is then the one-CTA fallback of common/cluster.cuh) or no such cluster fits. Cached per kernel, shape
// and device: a launch pays a map lookup, not these queries.
inline int max_active_clusters(const void* kernel, dim3 cluster, int threads, int smem_bytes) {
  static std::mutex mutex;
  static std::map<std::tuple<const void*, unsigned, unsigned, int, int, int>, int> cache;
  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  const auto key = std::make_tuple(kernel, cluster.x, cluster.y, threads, smem_bytes, device);
  const std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it == cache.end()) {
    cudaFuncAttributes attrs;
    C10_CUDA_CHECK(cudaFuncGetAttributes(&attrs, kernel));
    int clusters = 0;
    if (attrs.ptxVersion >= 90) {
      cudaLaunchAttribute attr;
      const cudaLaunchConfig_t config = cluster_launch_config(cluster, cluster, threads, smem_bytes, nullptr, &attr);
      C10_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &config));
    }
    it = cache.emplace(key, clusters).first;
  }
  return it->second;
}

}  // namespace fp8dk
