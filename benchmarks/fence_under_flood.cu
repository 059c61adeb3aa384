// What a flood of DRAM requests does to the latencies a small kernel lives on: a GPU-scope fence, an L2 hit, a
// DRAM miss, and the PDL release of a kernel that waits for it. In the decode step the next GEMM's CTAs request
// their ring of weights at entry (21 MB for 405B qkv at batch 32) while the RMSNorm before it runs, and the GEMM's
// PDL wait returned 1.3-2.4 us after the RMSNorm's last CTA ended while those requests were 1-3 us old, 0.5 us once
// they were 4 us old (docs/experiments/README.md, item 60). This separates the parts on one GPU, with no model.
//
//   nvcc -O3 -std=c++20 -I. -gencode arch=compute_90a,code=sm_90a benchmarks/fence_under_flood.cu -o fence_under_flood
//   ./fence_under_flood > fence-under-flood.json          (from the repository root)
//
// A flood is `flood_mb` of cold bytes requested into L2 with cp.async.bulk.prefetch.L2 (16 KB a request, the
// GEMM's box) by 96 CTAs at once; its age is how long before a probe it was issued.
//   probe    one launch: the flood CTAs and 8 probe CTAs, one per SM. Each probe waits until the flood is `age_ns`
//            old, then times, in SM cycles: fence.acq_rel.gpu with nothing outstanding (the MEMBAR.ALL.GPU that a
//            release cluster barrier compiles to), 4 dependent L2 hits, 4 dependent DRAM misses, and its CTA's
//            16 KB of stores followed by every thread's fence.
//   release  two streams: the flood kernel on one; on the other a producer of 128 CTAs (each waits until the
//            flood is `age_ns` old, stores `store_kb`, optionally fences, ends) and a consumer launched with PDL
//            whose one CTA returns from griddepcontrol.wait. The release is the consumer's wait return less the
//            producer's last CTA end, on the global timer, as decode_trace.py reads it. All three wait behind a
//            hold kernel (kHoldNs) so that the consumer's launch is on the GPU before the producer ends, as in a
//            CUDA graph; launched from the host right behind a short producer, it measured the host's launch gap
//            (3-5 us at every flood age, session 28's first run).
//   barrier  one launch, one CTA per SM: each CTA requests its share of `flood_mb` (as the CTAs of a persistent
//            GEMM -> RMSNorm -> GEMM kernel would request the second GEMM's first stages), stores `store_kb` (its
//            tile of the first GEMM's output), then meets the others at a grid barrier: one release add on a
//            counter, then acquire loads until every CTA has arrived (docs/experiments/README.md, item 76). The
//            barrier's cost is each CTA's departure less the last CTA's arrival, on the global timer.
// Each configuration runs `kReps` times on fresh cold bytes (a 2 GiB region walked in order); medians and the
// 10th / 90th percentiles are printed as one JSON object per line. Not a test and not shipped: a measurement tool
// whose results go to benchmarks/results/.
#include <cuda_runtime.h>

#include "benchmarks/cuda_check.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

constexpr int kFloodCtas = 96;
constexpr int kProbeCtas = 8;
constexpr int kProducerCtas = 128;
constexpr int kThreads = 128;
constexpr unsigned kRequestBytes = 16 * 1024;
constexpr size_t kColdBytes = size_t(2) << 30;
constexpr int kHops = 4;
constexpr long long kHopStride = 64 * 1024;  // bytes between a DRAM chain's hops
constexpr int kReps = 31;
constexpr long long kSpinLimitNs = 2'000'000;  // a probe that never sees its flood gives up (and is not counted)
constexpr long long kHoldNs = 30'000;  // the release study's hold: longer than three launches from the host

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ void fence_gpu() { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }

__device__ __forceinline__ unsigned long long load_relaxed(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// A dependent chain: each address depends on the value loaded before it (every value is 0), through L2 only.
__device__ __forceinline__ int chase(const int* base, long long stride_ints) {
  int v = 0;
#pragma unroll
  for (int h = 0; h < kHops; ++h) v = __ldcg(base + h * stride_ints + v);
  return v;
}

// This CTA's share of the flood: requests of kRequestBytes into L2, spread over its 32 lanes.
__device__ void issue_flood(const char* flood, size_t bytes, int cta, int ctas) {
  const size_t share = bytes / ctas / kRequestBytes * kRequestBytes;
  const char* mine = flood + share * cta;
  for (size_t off = size_t(threadIdx.x) * kRequestBytes; off < share; off += size_t(32) * kRequestBytes)
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(mine + off), "r"(kRequestBytes) : "memory");
}

// Thread 0 of each CTA of a launch whose CTAs are all resident: counts itself in `arrived`; the last to arrive sets
// `go`, a global-timer time 2 us ahead, and every CTA waits for it (both zero before the launch). Returns `go`.
__device__ unsigned long long start_together(unsigned* arrived, unsigned long long* go) {
  if (atomicAdd(arrived, 1u) == gridDim.x - 1) atomicExch(go, global_ns() + 2000);
  unsigned long long start;
  while ((start = load_relaxed(go)) == 0) {
  }
  while (global_ns() < start) {
  }
  return start;
}

// This CTA's `store_bytes` of stores (kThreads threads, 16 bytes a store), at its own place in `stores`.
__device__ void store_share(float4* stores, int store_bytes) {
  const int per_thread = store_bytes / kThreads / 16;
  float4* mine = stores + (size_t(blockIdx.x) * kThreads + threadIdx.x) * per_thread;
  for (int i = 0; i < per_thread; ++i) mine[i] = make_float4(1.f, 2.f, 3.f, 4.f);
}

struct ProbeResult {
  long long fence, l2, dram, stores;  // SM cycles (l2, dram: per hop)
  long long age_ns;                   // the flood's age when the fence is issued, measured
};

// The flood CTAs (blockIdx.x < kFloodCtas) and the probes, one CTA per SM (the launch asks for enough shared memory),
// all resident before anything starts (start_together), so the flood's age is one clock's.
__global__ void __launch_bounds__(kThreads) probe_kernel(const char* flood, size_t flood_bytes, long long age_ns,
                                                         const int* l2_chain, const int* dram_chain, float4* stores,
                                                         unsigned* arrived, unsigned long long* go,
                                                         ProbeResult* out) {
  __shared__ unsigned long long t0;
  // The chains' last values go to shared memory before the clock is read again: in-order issue then reads it
  // only once the last load has returned (a clock read alone would not wait for it).
  __shared__ volatile int sink;
  const bool flooder = blockIdx.x < kFloodCtas;
  const int probe = blockIdx.x - kFloodCtas;
  if (!flooder && threadIdx.x == 0) sink = chase(l2_chain, 32);  // the L2 chain, into L2 before the flood
  if (threadIdx.x == 0) t0 = start_together(arrived, go);
  __syncthreads();
  if (flooder) {
    if (threadIdx.x < 32 && flood_bytes) issue_flood(flood, flood_bytes, blockIdx.x, kFloodCtas);
    return;
  }
  if (threadIdx.x == 0) {
    while (global_ns() < t0 + age_ns) {
    }
  }
  __syncthreads();
  ProbeResult r{};
  if (threadIdx.x == 0) {
    r.age_ns = static_cast<long long>(global_ns() - t0);
    long long c = clock64();
    fence_gpu();
    r.fence = clock64() - c;
    c = clock64();
    sink = chase(l2_chain, 32);
    r.l2 = (clock64() - c) / kHops;
    c = clock64();
    sink = chase(dram_chain + probe * (kHopStride / sizeof(int)) * kHops, kHopStride / sizeof(int));
    r.dram = (clock64() - c) / kHops;
  }
  __syncthreads();
  const long long c = clock64();
  float4* mine = stores + (size_t(probe) * kThreads + threadIdx.x) * 8;
#pragma unroll
  for (int i = 0; i < 8; ++i) mine[i] = make_float4(1.f, 2.f, 3.f, 4.f);  // 16 KB a CTA
  fence_gpu();
  __syncthreads();
  if (threadIdx.x == 0) {
    r.stores = clock64() - c;
    out[probe] = r;
  }
}

struct BarrierTimes {
  unsigned long long arrive, leave;
};

// The barrier study's grid (one CTA per SM, all resident and started together; `count` is zero before each
// launch).
__global__ void __launch_bounds__(kThreads) barrier_kernel(const char* flood, size_t flood_bytes, float4* stores,
                                                           int store_bytes, unsigned* count, unsigned* arrived,
                                                           unsigned long long* go, BarrierTimes* out) {
  if (threadIdx.x == 0) start_together(arrived, go);
  __syncthreads();
  if (threadIdx.x < 32 && flood_bytes) issue_flood(flood, flood_bytes, blockIdx.x, gridDim.x);
  store_share(stores, store_bytes);
  // The release add is cumulative: the block barrier orders the other threads' stores before it.
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned long long arrive = global_ns();
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(count) : "memory");
    unsigned seen = 0;
    do {
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(count) : "memory");
    } while (seen < gridDim.x);
    out[blockIdx.x] = {arrive, global_ns()};
  }
  __syncthreads();
}

__global__ void flood_kernel(const char* flood, size_t flood_bytes, unsigned long long* flood_t) {
  if (blockIdx.x == 0 && threadIdx.x == 0) atomicExch(flood_t, global_ns());
  if (threadIdx.x < 32) issue_flood(flood, flood_bytes, blockIdx.x, gridDim.x);
}

// The kernel waited for: lets its dependent launch at entry (as our elementwise kernels do), waits until the
// flood is `age_ns` old (age_ns < 0: no flood), stores `store_bytes` a CTA, fences if asked, and marks its end.
__global__ void __launch_bounds__(kThreads) producer_kernel(const unsigned long long* flood_t, long long age_ns,
                                                            float4* stores, int store_bytes, int drain,
                                                            unsigned long long* ends) {
  asm volatile("griddepcontrol.launch_dependents;");
  if (threadIdx.x == 0 && age_ns >= 0) {
    const unsigned long long start = global_ns();
    unsigned long long t;
    while ((t = load_relaxed(flood_t)) == 0 && global_ns() - start < kSpinLimitNs) {
    }
    while (t && global_ns() < t + age_ns) {
    }
  }
  __syncthreads();
  store_share(stores, store_bytes);
  if (drain) fence_gpu();
  __syncthreads();
  if (threadIdx.x == 0) ends[blockIdx.x] = global_ns();
}

// Holds its stream until every launch of the release study's repetition has been queued behind it.
__global__ void hold_kernel(long long ns) {
  const unsigned long long start = global_ns();
  while (global_ns() < start + ns) {
  }
}

__global__ void consumer_kernel(unsigned long long* waited) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (threadIdx.x == 0) *waited = global_ns();
}

struct Stats {
  double p10, median, p90;
};

Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v.empty() ? 0.0 : v[static_cast<size_t>(q * (v.size() - 1) + 0.5)]; };
  return {at(0.1), at(0.5), at(0.9)};
}

void print_stats(const char* name, const Stats& s, double scale) {
  std::printf(", \"%s\": [%.3f, %.3f, %.3f]", name, s.p10 * scale, s.median * scale, s.p90 * scale);
}

// Cold bytes: successive floods walk the 2 GiB region, so none of their bytes is in L2 (50 MB) from before.
struct ColdCursor {
  const char* base;
  size_t next = 0;
  const char* take(size_t bytes) {
    if (next + bytes > kColdBytes) next = 0;
    const char* p = base + next;
    next += (bytes + 4095) / 4096 * 4096;
    return p;
  }
};

}  // namespace

int main() {
  int dev = 0;
  CHECK(cudaSetDevice(dev));
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, dev));
  int clock_khz = 0;
  CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev));
  const double ns_per_cycle = 1e6 / clock_khz;  // at the rated clock: cycles are the measurement, ns a guide

  char* cold = nullptr;
  int *l2_chain = nullptr, *dram_chain = nullptr;
  float4* stores = nullptr;
  unsigned* arrived = nullptr;
  unsigned long long *flood_t = nullptr, *ends = nullptr, *waited = nullptr;
  ProbeResult* probes = nullptr;
  const size_t dram_chain_bytes = size_t(kProbeCtas) * kHops * kHopStride * 64;  // 64 rounds before reuse
  CHECK(cudaMalloc(&cold, kColdBytes));
  CHECK(cudaMalloc(&l2_chain, 32 * kHops * sizeof(int)));
  CHECK(cudaMalloc(&dram_chain, dram_chain_bytes));
  CHECK(cudaMalloc(&stores, size_t(kProducerCtas) * 64 * 1024));
  CHECK(cudaMalloc(&arrived, sizeof(unsigned)));
  CHECK(cudaMalloc(&flood_t, sizeof(unsigned long long)));
  CHECK(cudaMalloc(&ends, kProducerCtas * sizeof(unsigned long long)));
  CHECK(cudaMalloc(&waited, sizeof(unsigned long long)));
  CHECK(cudaMalloc(&probes, kProbeCtas * sizeof(ProbeResult)));
  CHECK(cudaMemset(cold, 0, kColdBytes));
  CHECK(cudaMemset(l2_chain, 0, 32 * kHops * sizeof(int)));
  CHECK(cudaMemset(dram_chain, 0, dram_chain_bytes));

  // One CTA per SM for the probe launch: more than half an SM's shared memory each.
  const int probe_smem = static_cast<int>(prop.sharedMemPerMultiprocessor / 2 + 1024);
  CHECK(cudaFuncSetAttribute(probe_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, probe_smem));
  if (kFloodCtas + kProbeCtas > prop.multiProcessorCount) {
    std::fprintf(stderr, "needs %d SMs\n", kFloodCtas + kProbeCtas);
    return 1;
  }

  std::printf("{\"device\": \"%s\", \"sms\": %d, \"clock_mhz\": %.0f, \"reps\": %d, \"request_kb\": %u}\n", prop.name,
              prop.multiProcessorCount, clock_khz / 1e3, kReps, kRequestBytes / 1024);
  ColdCursor cursor{cold};
  const long long ages[] = {0, 500, 1000, 2000, 3000, 4000, 6000, 10000};

  // ---- probe
  int dram_round = 0;
  for (int flood_mb : {0, 8, 21, 32}) {
    for (long long age : ages) {
      if (flood_mb == 0 && age > 0) continue;
      std::vector<double> fence, l2, dram, store, measured_age;
      for (int rep = 0; rep < kReps; ++rep) {
        const size_t bytes = size_t(flood_mb) << 20;
        const char* flood = cursor.take(bytes);
        const int* chain = dram_chain + size_t(dram_round++ % 64) * kProbeCtas * kHops * (kHopStride / sizeof(int));
        CHECK(cudaMemset(arrived, 0, sizeof(unsigned)));
        CHECK(cudaMemset(flood_t, 0, sizeof(unsigned long long)));  // `go` of the probe launch
        probe_kernel<<<kFloodCtas + kProbeCtas, kThreads, probe_smem>>>(flood, bytes, age, l2_chain, chain, stores,
                                                                         arrived, flood_t, probes);
        CHECK(cudaGetLastError());
        std::vector<ProbeResult> r(kProbeCtas);
        CHECK(cudaMemcpy(r.data(), probes, kProbeCtas * sizeof(ProbeResult), cudaMemcpyDeviceToHost));
        if (rep == 0) continue;  // warm-up
        for (const ProbeResult& p : r) {
          fence.push_back(p.fence), l2.push_back(p.l2), dram.push_back(p.dram), store.push_back(p.stores);
          measured_age.push_back(p.age_ns);
        }
      }
      std::printf("{\"study\": \"probe\", \"flood_mb\": %d, \"age_ns\": %lld", flood_mb, age);
      print_stats("measured_age_ns", stats(measured_age), 1.0);
      print_stats("fence_ns", stats(fence), ns_per_cycle);
      print_stats("l2_hit_ns", stats(l2), ns_per_cycle);
      print_stats("dram_ns", stats(dram), ns_per_cycle);
      print_stats("stores_16kb_fence_ns", stats(store), ns_per_cycle);
      std::printf("}\n");
      std::fflush(stdout);
    }
  }

  // ---- barrier
  const int grid = prop.multiProcessorCount;
  CHECK(cudaFuncSetAttribute(barrier_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, probe_smem));
  unsigned* count = nullptr;
  BarrierTimes* times = nullptr;
  CHECK(cudaMalloc(&count, sizeof(unsigned)));
  CHECK(cudaMalloc(&times, grid * sizeof(BarrierTimes)));
  for (int flood_mb : {0, 20}) {
    for (int store_kb : {0, 16}) {
      std::vector<double> last_leave, median_leave, arrive_spread;
      for (int rep = 0; rep < kReps; ++rep) {
        const size_t bytes = size_t(flood_mb) << 20;
        const char* flood = cursor.take(bytes);
        CHECK(cudaMemset(count, 0, sizeof(unsigned)));
        CHECK(cudaMemset(arrived, 0, sizeof(unsigned)));
        CHECK(cudaMemset(flood_t, 0, sizeof(unsigned long long)));  // `go`
        barrier_kernel<<<grid, kThreads, probe_smem>>>(flood, bytes, stores, store_kb * 1024, count, arrived, flood_t,
                                                       times);
        CHECK(cudaGetLastError());
        std::vector<BarrierTimes> t(grid);
        CHECK(cudaMemcpy(t.data(), times, grid * sizeof(BarrierTimes), cudaMemcpyDeviceToHost));
        if (rep == 0) continue;  // warm-up
        unsigned long long first = ~0ull, last = 0;
        std::vector<double> leave;
        for (const BarrierTimes& b : t) first = std::min(first, b.arrive), last = std::max(last, b.arrive);
        for (const BarrierTimes& b : t) leave.push_back(static_cast<double>(static_cast<long long>(b.leave - last)));
        std::sort(leave.begin(), leave.end());
        last_leave.push_back(leave.back());
        median_leave.push_back(leave[leave.size() / 2]);
        arrive_spread.push_back(static_cast<double>(last - first));
      }
      std::printf("{\"study\": \"barrier\", \"ctas\": %d, \"flood_mb\": %d, \"store_kb\": %d", grid, flood_mb,
                  store_kb);
      print_stats("median_leave_after_last_arrival_ns", stats(median_leave), 1.0);
      print_stats("last_leave_after_last_arrival_ns", stats(last_leave), 1.0);
      print_stats("arrival_spread_ns", stats(arrive_spread), 1.0);
      std::printf("}\n");
      std::fflush(stdout);
    }
  }

  // ---- release
  cudaStream_t main_stream, flood_stream;
  CHECK(cudaStreamCreateWithFlags(&main_stream, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&flood_stream, cudaStreamNonBlocking));
  cudaEvent_t held;  // the hold's end: the flood starts with the producer
  CHECK(cudaEventCreateWithFlags(&held, cudaEventDisableTiming));
  cudaLaunchAttribute pdl{};
  pdl.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  pdl.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t consumer{};
  consumer.gridDim = dim3(1), consumer.blockDim = dim3(32), consumer.stream = main_stream;
  consumer.attrs = &pdl, consumer.numAttrs = 1;
  for (int flood_mb : {0, 21}) {
    for (long long age : ages) {
      if (flood_mb == 0 && age > 0) continue;
      for (int store_kb : {0, 8}) {
        for (int drain : {0, 1}) {
          std::vector<double> release, measured_age;
          for (int rep = 0; rep < kReps; ++rep) {
            const size_t bytes = size_t(flood_mb) << 20;
            const char* flood = cursor.take(bytes);
            CHECK(cudaMemsetAsync(flood_t, 0, sizeof(unsigned long long), main_stream));
            CHECK(cudaStreamSynchronize(main_stream));
            hold_kernel<<<1, 32, 0, main_stream>>>(kHoldNs);
            CHECK(cudaEventRecord(held, main_stream));
            if (flood_mb) {
              CHECK(cudaStreamWaitEvent(flood_stream, held, 0));
              flood_kernel<<<kFloodCtas, 32, 0, flood_stream>>>(flood, bytes, flood_t);
            }
            producer_kernel<<<kProducerCtas, kThreads, 0, main_stream>>>(flood_t, flood_mb ? age : -1, stores,
                                                                          store_kb * 1024, drain, ends);
            CHECK(cudaLaunchKernelEx(&consumer, consumer_kernel, waited));
            CHECK(cudaDeviceSynchronize());
            std::vector<unsigned long long> e(kProducerCtas);
            unsigned long long w = 0, t = 0;
            CHECK(cudaMemcpy(e.data(), ends, e.size() * sizeof(e[0]), cudaMemcpyDeviceToHost));
            CHECK(cudaMemcpy(&w, waited, sizeof(w), cudaMemcpyDeviceToHost));
            CHECK(cudaMemcpy(&t, flood_t, sizeof(t), cudaMemcpyDeviceToHost));
            const unsigned long long last = *std::max_element(e.begin(), e.end());
            if (rep == 0 || (flood_mb && t == 0)) continue;  // warm-up, or a flood the producer never saw
            release.push_back(static_cast<double>(static_cast<long long>(w - last)));
            if (flood_mb) measured_age.push_back(static_cast<double>(static_cast<long long>(last - t)));
          }
          std::printf("{\"study\": \"release\", \"flood_mb\": %d, \"age_ns\": %lld, \"store_kb\": %d, \"drain\": %d, "
                      "\"samples\": %zu",
                      flood_mb, age, store_kb, drain, release.size());
          print_stats("release_ns", stats(release), 1.0);
          if (flood_mb) print_stats("flood_age_at_end_ns", stats(measured_age), 1.0);
          std::printf("}\n");
          std::fflush(stdout);
        }
      }
    }
  }
  return 0;
}
