// How many thread-block clusters of 1..8 CTAs this GPU runs at once (cudaOccupancyMaxActiveClusters), for a
// kernel of the copy-engine GEMM's 288 threads at three sizes of dynamic shared memory: 100 KB (two CTAs per SM)
// and 200-227 KB (one, as every copy-engine plan). A GPC holds whole clusters, so an H100 runs 30 clusters of 4
// CTAs (120) and 15 of 8 (120), not 132 / c: what skinny_gemm's plan asks the runtime before it forms clusters
// (skinny_gemm_launch_plan.h, plan_copy_engine), and what tests/test_plans.py's made-up H100 takes.
//
//   nvcc -std=c++17 -gencode arch=compute_90a,code=sm_90a benchmarks/cluster_occupancy.cu -o cluster_occupancy
//   ./cluster_occupancy
#include <cstdio>
#include <cuda_runtime.h>

__global__ void probe(int* out) {
  extern __shared__ int smem[];
  if (out != nullptr) out[0] = smem[0];
}

int main() {
  constexpr int kThreads = 288;
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    std::fprintf(stderr, "no CUDA device\n");
    return 1;
  }
  std::printf("%s, %d SMs\n", prop.name, prop.multiProcessorCount);
  const int most_smem = static_cast<int>(prop.sharedMemPerBlockOptin);
  if (cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, most_smem) != cudaSuccess) return 1;
  for (int smem : {100 * 1024, 200 * 1024, most_smem}) {
    std::printf("smem %d KB:", smem / 1024);
    for (int ctas = 1; ctas <= 8; ++ctas) {
      cudaLaunchAttribute cluster;
      cluster.id = cudaLaunchAttributeClusterDimension;
      cluster.val.clusterDim.x = ctas;
      cluster.val.clusterDim.y = cluster.val.clusterDim.z = 1;
      cudaLaunchConfig_t config = {};
      config.gridDim = dim3(ctas);
      config.blockDim = dim3(kThreads);
      config.dynamicSmemBytes = smem;
      config.attrs = &cluster;
      config.numAttrs = 1;
      int clusters = 0;
      const cudaError_t e = cudaOccupancyMaxActiveClusters(&clusters, probe, &config);
      if (e != cudaSuccess) std::printf("  %d: %s", ctas, cudaGetErrorString(e));
      else std::printf("  %d:%d(%d CTAs)", ctas, clusters, clusters * ctas);
    }
    std::printf("\n");
  }
  return 0;
}
