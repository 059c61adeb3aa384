#pragma once
// Host side of a kernel launch, shared by every launcher (no device code): one call that launches a kernel
// on a stream, with the two NVIDIA sm_90+ launch attributes where they apply:
//   * thread-block clusters (rmsnorm.cu, skinny_gemm_launch.cuh; device side common/cluster.cuh), and how
//     many clusters of a shape the device runs at once;
//   * programmatic dependent launch (PDL; device side common/grid_dependency.cuh): the kernel may start while
//     the kernel before it on the stream finishes, so its launch latency and prologue hide behind that tail.
//     A decode step is a chain of short kernels, where the ~1-2 us between two of them is a large part of
//     each. Captured into CUDA graphs as programmatic edges (CUDA 12.3+).
//     Under CUDA-graph capture a kernel that follows a foreign kernel (one not launched here: PyTorch's SDPA,
//     say) may start once that kernel's CTAs are all running, not only at its end (start_at_foreign_launch), and
//     a launcher may ask whether its kernel will so wait for all of a foreign kernel (starts_during_foreign_kernel).
// Tuning overrides (README, "Tuning overrides"): FP8DK_PDL=0 launches without PDL; FP8DK_PDL_FOREIGN=0 keeps a
// captured launch after a foreign kernel waiting for that kernel's end.
//
// Written for both vendors by hand (common/ headers reach hipcc as written: see device_info.h). On ROCm a
// launch is the plain triple-chevron one: AMD has neither attribute.
#include <c10/util/Exception.h>

#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#if defined(USE_ROCM)
#include <hip/hip_runtime.h>
#else
#include <cuda_runtime.h>
#endif

#include "common/launch_stats.h"
#include "common/plan.h"
#include "common/tuning.h"

namespace fp8dk {

#if defined(USE_ROCM)
using Stream = hipStream_t;
#else
using Stream = cudaStream_t;
#endif

// Grid, block, dynamic shared memory and cluster shape (1 x 1 x 1: no cluster) of a launch.
struct LaunchShape {
  dim3 grid, block;
  int smem_bytes = 0;
  dim3 cluster = dim3(1, 1, 1);
};

inline dim3 to_dim3(Dims d) { return dim3(d.x, d.y, d.z); }

#if !defined(USE_ROCM)
namespace launch_detail {

inline void check(cudaError_t e, const char* what) {
  TORCH_CHECK(e == cudaSuccess, "fp8-decode-kernels: ", what, " failed: ", cudaGetErrorString(e));
}

inline bool clustered(dim3 cluster) { return cluster.x * cluster.y * cluster.z > 1; }

// The launch configuration of `s` on `stream`; `attrs` (2 entries) must outlive it.
inline cudaLaunchConfig_t config(const LaunchShape& s, cudaStream_t stream, bool pdl, cudaLaunchAttribute* attrs) {
  cudaLaunchConfig_t c = {};
  c.gridDim = s.grid;
  c.blockDim = s.block;
  c.dynamicSmemBytes = s.smem_bytes;
  c.stream = stream;
  c.attrs = attrs;
  if (clustered(s.cluster)) {
    cudaLaunchAttribute& a = attrs[c.numAttrs++];
    a.id = cudaLaunchAttributeClusterDimension;
    a.val.clusterDim.x = s.cluster.x;
    a.val.clusterDim.y = s.cluster.y;
    a.val.clusterDim.z = s.cluster.z;
  }
  if (pdl) {
    cudaLaunchAttribute& a = attrs[c.numAttrs++];
    a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    a.val.programmaticStreamSerializationAllowed = 1;
  }
  return c;
}

// The PTX version of `kernel`'s code loaded for the current device (90 for sm_90a): whether the code has the
// sm_90 paths (clusters, griddepcontrol) or their fallbacks. Cached per kernel and device.
inline int ptx_version(const void* kernel) {
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, int> cache;
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  const std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find({kernel, device});
  if (it == cache.end()) {
    cudaFuncAttributes attrs;
    check(cudaFuncGetAttributes(&attrs, kernel), "cudaFuncGetAttributes");
    it = cache.emplace(std::make_pair(kernel, device), attrs.ptxVersion).first;
  }
  return it->second;
}

// FP8DK_PDL (top of the file): PDL unless it is 0.
inline bool pdl_requested() { return tuning::flag("FP8DK_PDL", true); }

// FP8DK_PDL_FOREIGN (top of the file): a captured launch may start at a foreign kernel's launch completion unless
// it is 0.
inline bool after_foreign_requested() { return tuning::flag("FP8DK_PDL_FOREIGN", true); }

// The graph nodes this file's launches created, per capture sequence (the last few sequences), so that a launch can
// tell a dependency on one of this package's kernels (which lets the next kernel start where it calls
// allow_next_grid) from one on a foreign kernel (which lets it start only at its end), and whether that node of
// ours itself started at a foreign kernel's launch completion.
class OwnNodes {
 public:
  static OwnNodes& get() {
    static OwnNodes nodes;
    return nodes;
  }
  void add(unsigned long long capture, cudaGraphNode_t node, bool started_at_foreign_launch) {
    const std::lock_guard<std::mutex> lock(mutex_);
    nodes_[capture][node] = started_at_foreign_launch;
    while (nodes_.size() > kCaptures) nodes_.erase(nodes_.begin());  // capture ids grow over a process's life
  }
  // -1: not ours; 0: ours; 1: ours, started at a foreign kernel's launch completion.
  int find(unsigned long long capture, cudaGraphNode_t node) {
    const std::lock_guard<std::mutex> lock(mutex_);
    auto it = nodes_.find(capture);
    if (it == nodes_.end()) return -1;
    auto at = it->second.find(node);
    return at == it->second.end() ? -1 : int(at->second);
  }

 private:
  static constexpr size_t kCaptures = 8;
  std::mutex mutex_;
  std::map<unsigned long long, std::map<cudaGraphNode_t, bool>> nodes_;
};

// A stream's capture state: whether it is capturing, the capture sequence, and the one node the next launch will
// follow (nullptr where it would follow several or none) with that edge's data (nullptr: a plain edge).
struct CaptureState {
  bool active = false;
  unsigned long long id = 0;
  cudaGraphNode_t node = nullptr;
  const cudaGraphEdgeData* edge = nullptr;
};

inline CaptureState capture_state(cudaStream_t stream) {
  CaptureState c;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaGraphNode_t* deps = nullptr;
  size_t count = 0;
#if CUDART_VERSION >= 13000
  const cudaError_t e = cudaStreamGetCaptureInfo(stream, &status, &c.id, nullptr, &deps, &c.edge, &count);
#else
  const cudaError_t e = cudaStreamGetCaptureInfo_v3(stream, &status, &c.id, nullptr, &deps, &c.edge, &count);
#endif
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // e.g. the legacy stream while another stream captures: launch as usual
    return CaptureState{};
  }
  c.active = status == cudaStreamCaptureStatusActive;
  if (c.active && count == 1) c.node = deps[0];
  return c;
}

// What the next launch on a capturing stream (`c`) would follow: no single kernel node, a foreign kernel node by a
// plain edge, or a node of ours (one that itself started at a foreign kernel's launch completion, or not).
enum class Predecessor { kOther, kForeignKernel, kOurs, kOursStartedAtForeign };

inline Predecessor predecessor(const CaptureState& c) {
  if (c.node == nullptr) return Predecessor::kOther;
  cudaGraphNodeType type;
  check(cudaGraphNodeGetType(c.node, &type), "cudaGraphNodeGetType");
  if (type != cudaGraphNodeTypeKernel) return Predecessor::kOther;
  const int ours = OwnNodes::get().find(c.id, c.node);
  if (ours >= 0) return ours == 1 ? Predecessor::kOursStartedAtForeign : Predecessor::kOurs;
  const bool plain_edge = c.edge == nullptr || c.edge->type == cudaGraphDependencyTypeDefault;
  return plain_edge ? Predecessor::kForeignKernel : Predecessor::kOther;
}

// Under stream capture (`c`, the stream's state), where the next launch would follow one foreign kernel node with
// a plain edge (a PyTorch kernel such as SDPA, which never calls allow_next_grid and so lets a PDL launch start only
// at its end), makes that edge programmatic from the foreign kernel's launch-completion port: the next kernel may
// start once every CTA of the foreign one is running (so it cannot take an SM the foreign kernel still needs) and
// its wait_for_prior_grid still returns only once that kernel has completed. A GEMM then requests its first
// weights while the foreign kernel runs. Returns whether it did; the launch then carries no PDL attribute (the edge
// is set).
inline bool start_at_foreign_launch(cudaStream_t stream, const CaptureState& c) {
  if (predecessor(c) != Predecessor::kForeignKernel) return false;
  cudaGraphNode_t node = c.node;
  cudaGraphEdgeData programmatic = {};
  programmatic.from_port = cudaGraphKernelNodePortLaunchCompletion;
  programmatic.type = cudaGraphDependencyTypeProgrammatic;
#if CUDART_VERSION >= 13000
  check(cudaStreamUpdateCaptureDependencies(stream, &node, &programmatic, 1, cudaStreamSetCaptureDependencies),
        "cudaStreamUpdateCaptureDependencies");
#else
  check(cudaStreamUpdateCaptureDependencies_v2(stream, &node, &programmatic, 1, cudaStreamSetCaptureDependencies),
        "cudaStreamUpdateCaptureDependencies_v2");
#endif
  ++foreign_launch_starts();
  return true;
}

// After a launch on a capturing stream: its node (the one the stream now ends in) is one of this package's.
inline void remember_own_launch(cudaStream_t stream, bool started_at_foreign_launch) {
  const CaptureState c = capture_state(stream);
  if (c.node != nullptr) OwnNodes::get().add(c.id, c.node, started_at_foreign_launch);
}

}  // namespace launch_detail

// Clusters of `cluster` CTAs (`threads` threads, `smem_bytes` of dynamic shared memory each) of `kernel` that
// the current device runs at once: 0 where the kernel's code was built for less than compute_90 (its cluster
// code is then the one-CTA fallback of common/cluster.cuh) or no such cluster fits. Cached per kernel, shape
// and device: a launch pays a map lookup, not these queries.
inline int max_active_clusters(const void* kernel, dim3 cluster, int threads, int smem_bytes) {
  if (launch_detail::ptx_version(kernel) < 90) return 0;
  static std::mutex mutex;
  static std::map<std::tuple<const void*, unsigned, unsigned, int, int, int>, int> cache;
  int device = 0;
  launch_detail::check(cudaGetDevice(&device), "cudaGetDevice");
  const auto key = std::make_tuple(kernel, cluster.x, cluster.y, threads, smem_bytes, device);
  const std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it == cache.end()) {
    LaunchShape s;
    s.grid = cluster;
    s.block = dim3(threads);
    s.smem_bytes = smem_bytes;
    s.cluster = cluster;
    cudaLaunchAttribute attrs[2];
    const cudaLaunchConfig_t c = launch_detail::config(s, nullptr, false, attrs);
    int clusters = 0;
    launch_detail::check(cudaOccupancyMaxActiveClusters(&clusters, kernel, &c), "cudaOccupancyMaxActiveClusters");
    it = cache.emplace(key, clusters).first;
  }
  return it->second;
}
#endif

// CTAs of `kernel` (`threads` threads, `smem_bytes` of dynamic shared memory each) that one SM/CU runs at once:
// what a persistent grid is sized from. Cached per kernel, shape and device, like max_active_clusters.
template <class... Params>
int max_active_blocks_per_sm(void (*kernel)(Params...), int threads, int smem_bytes) {
  static std::mutex mutex;
  static std::map<std::tuple<const void*, int, int, int>, int> cache;
  int device = 0, blocks = 0;
#if defined(USE_ROCM)
  TORCH_CHECK(hipGetDevice(&device) == hipSuccess, "fp8-decode-kernels: hipGetDevice failed");
#else
  launch_detail::check(cudaGetDevice(&device), "cudaGetDevice");
#endif
  const auto key = std::make_tuple(reinterpret_cast<const void*>(kernel), threads, smem_bytes, device);
  const std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it == cache.end()) {
#if defined(USE_ROCM)
    TORCH_CHECK(hipOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, smem_bytes) == hipSuccess,
                "fp8-decode-kernels: hipOccupancyMaxActiveBlocksPerMultiprocessor failed");
#else
    launch_detail::check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, smem_bytes),
                         "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
#endif
    it = cache.emplace(key, blocks).first;
  }
  return it->second;
}

// Dynamic shared memory a kernel may use without opting in.
constexpr int kDefaultDynamicSmem = 48 * 1024;

// Lets `kernel` take `bytes` of dynamic shared memory a launch: past kDefaultDynamicSmem, NVIDIA's launches and
// occupancy queries need this opt-in first (up to DeviceProps::max_smem_per_block); on AMD it is the LDS limit as
// set. Within the default it does nothing; the limit only rises (launches of one kernel with other sizes keep
// theirs), and a launch within it pays a map lookup.
template <class... Params>
void allow_dynamic_smem(void (*kernel)(Params...), int bytes) {
  if (bytes <= kDefaultDynamicSmem) return;
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, int> allowed;  // (kernel, device) -> the limit set
  const void* f = reinterpret_cast<const void*>(kernel);
  int device = 0;
#if defined(USE_ROCM)
  TORCH_CHECK(hipGetDevice(&device) == hipSuccess, "fp8-decode-kernels: hipGetDevice failed");
#else
  launch_detail::check(cudaGetDevice(&device), "cudaGetDevice");
#endif
  const std::lock_guard<std::mutex> lock(mutex);
  int& limit = allowed[std::make_pair(f, device)];
  if (bytes <= limit) return;
#if defined(USE_ROCM)
  TORCH_CHECK(hipFuncSetAttribute(f, hipFuncAttributeMaxDynamicSharedMemorySize, bytes) == hipSuccess,
              "fp8-decode-kernels: hipFuncSetAttribute failed");
#else
  launch_detail::check(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
                       "cudaFuncSetAttribute");
#endif
  limit = bytes;
}

// Whether, under capture, the next launch on `stream` will start while a foreign kernel still runs: it follows a
// foreign kernel node (start_at_foreign_launch will apply), or a node of ours that started that way (the
// elementwise kernels let the next kernel start at their entry). A GEMM's CTAs then wait at the PDL wait for the
// whole foreign kernel, and may request more of their weights before it (skinny_gemm_tma_plan.cuh). Meant for a
// kernel launched with PDL (the copy-engine GEMM, sm_90): for one without, the answer means nothing.
inline bool starts_during_foreign_kernel(Stream stream) {
#if defined(USE_ROCM)
  (void)stream;
  return false;
#else
  if (!launch_detail::pdl_requested() || !launch_detail::after_foreign_requested()) return false;
  using launch_detail::Predecessor;
  const Predecessor p = launch_detail::predecessor(launch_detail::capture_state(stream));
  const bool during = p == Predecessor::kForeignKernel || p == Predecessor::kOursStartedAtForeign;
  if (during) ++foreign_kernel_waits();
  return during;
#endif
}

// Launches kernel(args...) with shape `s` on `stream`: in clusters when s.cluster has more than one CTA (the
// caller checked max_active_clusters; NVIDIA only), and with PDL where the kernel's code waits for the prior
// grid (built for sm_90+) and FP8DK_PDL allows it.
template <class... Params, class... Args>
void launch_kernel(void (*kernel)(Params...), const LaunchShape& s, Stream stream, Args&&... args) {
#if defined(USE_ROCM)
  TORCH_CHECK(s.cluster.x * s.cluster.y * s.cluster.z == 1, "fp8-decode-kernels: no thread-block clusters on ROCm");
  kernel<<<s.grid, s.block, s.smem_bytes, stream>>>(std::forward<Args>(args)...);
#else
  const bool pdl = launch_detail::pdl_requested() &&
                   launch_detail::ptx_version(reinterpret_cast<const void*>(kernel)) >= 90;
  // Under capture only (one query a launch otherwise): the edge from a foreign kernel, and this launch's node noted.
  const launch_detail::CaptureState capture = pdl && launch_detail::after_foreign_requested()
                                                  ? launch_detail::capture_state(stream)
                                                  : launch_detail::CaptureState{};
  const bool at_foreign_launch = capture.active && launch_detail::start_at_foreign_launch(stream, capture);
  cudaLaunchAttribute attrs[2];
  const cudaLaunchConfig_t c = launch_detail::config(s, stream, pdl && !at_foreign_launch, attrs);
  launch_detail::check(cudaLaunchKernelEx(&c, kernel, std::forward<Args>(args)...), "cudaLaunchKernelEx");
  if (capture.active) launch_detail::remember_own_launch(stream, at_foreign_launch);
#endif
}

}  // namespace fp8dk
