// What a kernel that only streams bytes reaches on this GPU at the working-set sizes of our decode kernels,
// timed as benchmarks/sweep.py times ours (one CUDA graph over buffers rotated beyond L2, PDL launches,
// median per call), next to the 1 GiB cudaMemcpy the sweep's "% of copy bandwidth" divides by.
//
//   nvcc -O3 -std=c++20 -I. -gencode arch=compute_90a,code=sm_90a benchmarks/stream_ceiling.cu -o stream_ceiling
//   ./stream_ceiling > stream-ceiling.json          (from the repository root)
//
// Five families, each a ceiling for one of our kernels:
//   flat_rw      grid-stride, persistent CTAs, U vectors per input in flight: the best an elementwise kernel can
//                do moving the bytes of fused_add_rms_norm (read x, r; write r, q) or silu_and_mul (read gate,
//                up; write q);
//   row_rw       one CTA per row, the whole row loaded at once (the structure of our RMSNorm kernel);
//   flat_read    grid-stride reads of a weight matrix: the ceiling of any GEMM that streams it once;
//   tile_read    the GEMM's weight walk (16 rows per CTA, 8 warps splitting K in runs of 4 x 64 B per row),
//                reads only, through a register ring of RING sub-iterations (32 B per lane each), with or
//                without a CTA barrier per K-block: separates the access pattern from the arithmetic;
//   gemv_direct  the same walk plus the FP8 arithmetic of an M = 1 GEMM (unpack + mma.sync, activations read
//                per lane from L1 instead of staged in shared memory): no barrier at all in the loop.
// Not a test and not shipped: a measurement tool whose results sit in benchmarks/results/. Its loads, PDL calls,
// FP8 unpack and MMA are the kernels' own (common/, skinny_gemm/), so it measures with the same instructions.
#include <cuda_runtime.h>

#include "benchmarks/cuda_check.h"
#include "common/grid_dependency.cuh"
#include "common/vec.cuh"
#include "skinny_gemm/skinny_gemm_mma_nv.cuh"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

using fp8dk::Pack;
using V4 = Pack<16>;

FP8DK_DEVICE V4 load_stream(const void* p) { return fp8dk::load_nt<16>(p); }
FP8DK_DEVICE V4 load_cached(const void* p) { return fp8dk::load_ro<16>(p); }
FP8DK_DEVICE void store16(void* p, const V4& v) { fp8dk::store<16>(p, v); }
FP8DK_DEVICE void store8(void* p, unsigned a, unsigned b) {
  Pack<8> v;
  v.w[0] = a, v.w[1] = b;
  fp8dk::store<8>(p, v);
}
FP8DK_DEVICE void pdl_wait() { fp8dk::wait_for_prior_grid(); }
FP8DK_DEVICE void pdl_allow() { fp8dk::allow_next_grid(); }
FP8DK_DEVICE unsigned mix(const V4& v) { return v.w[0] ^ v.w[1] ^ v.w[2] ^ v.w[3]; }

// ------------------------------------------------------------------------------------------------ flat_rw
// in0, in1: n vectors of 16 B; out0 (optional): n vectors of 16 B; out1: n vectors of 8 B.
template <int U, bool kOut0>
__global__ void __launch_bounds__(256) flat_rw(const V4* in0, const V4* in1, V4* out0, uint2* out1, long long n) {
  pdl_wait();
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  bool allowed = false;
  for (long long i0 = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i0 < n; i0 += U * stride) {
    V4 a[U], b[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const long long i = i0 + u * stride;
      if (i < n) a[u] = load_stream(in0 + i), b[u] = load_stream(in1 + i);
    }
    if (!allowed) pdl_allow(), allowed = true;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const long long i = i0 + u * stride;
      if (i < n) {
        V4 s;
#pragma unroll
        for (int w = 0; w < 4; ++w) s.w[w] = a[u].w[w] ^ b[u].w[w];
        if (kOut0) store16(out0 + i, s);
        store8(out1 + i, s.w[0] ^ s.w[1], s.w[2] ^ s.w[3]);
      }
    }
  }
}

// ------------------------------------------------------------------------------------------------ row_rw
// One CTA per row of `row_vecs` 16-byte vectors per input; every thread loads all its vectors of both inputs
// before storing (the row lives in registers, as in our RMSNorm), VPT vectors per thread.
template <int VPT, bool kOut0>
__global__ void __launch_bounds__(VPT >= 8 ? 256 : 1024) row_rw(const V4* in0, const V4* in1, V4* out0, uint2* out1, int row_vecs) {
  pdl_wait();
  const long long base = static_cast<long long>(blockIdx.x) * row_vecs;
  V4 a[VPT], b[VPT];
#pragma unroll
  for (int v = 0; v < VPT; ++v) {
    const int i = threadIdx.x + v * blockDim.x;
    if (i < row_vecs) a[v] = load_stream(in0 + base + i), b[v] = load_stream(in1 + base + i);
  }
  pdl_allow();
  unsigned acc = 0;
#pragma unroll
  for (int v = 0; v < VPT; ++v)
    if (threadIdx.x + v * blockDim.x < row_vecs) acc ^= mix(a[v]) ^ mix(b[v]);
  acc = __reduce_xor_sync(~0u, acc);  // a row reduction, as RMSNorm has one
  __shared__ unsigned red[32];
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = acc;
  __syncthreads();
  acc = red[threadIdx.x % (blockDim.x / 32)];
#pragma unroll
  for (int v = 0; v < VPT; ++v) {
    const int i = threadIdx.x + v * blockDim.x;
    if (i < row_vecs) {
      V4 s;
#pragma unroll
      for (int w = 0; w < 4; ++w) s.w[w] = a[v].w[w] ^ b[v].w[w] ^ (w == 3 ? acc : 0u);
      if (kOut0) store16(out0 + base + i, s);
      store8(out1 + base + i, s.w[0] ^ s.w[1], s.w[2] ^ s.w[3]);
    }
  }
}

// ------------------------------------------------------------------------------------------------ tile_read
// b: [n, k] bytes, CTA = 16 rows x (k / split) bytes, 8 warps; block j of 2 KB per row: warp w reads bytes
// [j * 2048 + w * 256, + 256) of its rows in 4 sub-iterations of 64 B (4 lanes x 16 B), lane (g, t) rows g and
// g + 8: the walk of skinny_gemm_kernel at M <= 16. The loads go through a ring of RING sub-iterations (2 chunks
// each), so RING - 1 sub-iterations of a lane stay in flight while one is consumed; kBarrier adds a CTA
// barrier after every 4 sub-iterations (one K-block), as the shipped kernel has.
__device__ __forceinline__ long long walk_offset(int s) { return (s >> 2) * 2048LL + (s & 3) * 64; }

// ld: row stride in bytes (k, or more for padded rows). rotate: CTA c starts its K walk at block c % blocks and
// wraps around, so that the CTAs in flight at one time read different K offsets (with a power-of-two row stride
// they otherwise all read addresses equal modulo 2 KB-16 KB).
template <int RING, bool kBarrier>
__global__ void __launch_bounds__(256, 2)
    tile_read(const unsigned char* b, int k, long long ld, int split, int rotate, unsigned* sink) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const long long slice = static_cast<long long>(k) / split;
  const unsigned char* r0 = b + (blockIdx.x * 16LL + lane / 4) * ld + (lane % 4) * 16 + warp * 256 + blockIdx.y * slice;
  const unsigned char* r1 = r0 + 8LL * ld;
  const int blocks = static_cast<int>(slice / 2048);
  const int total = blocks * 4;  // sub-iterations of this warp
  const int rot = rotate ? static_cast<int>(blockIdx.x % blocks) : 0;
  auto offset = [&](int s) {  // walk_offset with the block index rotated
    const int blk = (s >> 2) + rot;
    return walk_offset(((blk >= blocks ? blk - blocks : blk) << 2) | (s & 3));
  };
  pdl_wait();
  V4 ring[RING][2];
#pragma unroll
  for (int d = 0; d < RING; ++d)
    if (d < total) ring[d][0] = load_stream(r0 + offset(d)), ring[d][1] = load_stream(r1 + offset(d));
  pdl_allow();
  unsigned acc = 0;
  for (int s0 = 0; s0 < total; s0 += RING) {
#pragma unroll
    for (int d = 0; d < RING; ++d) {
      const int s = s0 + d;
      if (s < total) acc += mix(ring[d][0]) ^ mix(ring[d][1]);
      if (kBarrier && (s & 3) == 3) __syncthreads();
      if (s + RING < total)
        ring[d][0] = load_stream(r0 + offset(s + RING)), ring[d][1] = load_stream(r1 + offset(s + RING));
    }
  }
  if (acc == 0x9e3779b9u) sink[blockIdx.x] = acc;  // keeps the loads; the bytes never give this value
}

// ------------------------------------------------------------------------------------------------ gemv_direct
// partial[split * 8 warps][n] fp32 = a[1, k] (e4m3) . b[n, k] (e4m3) over the warp's K range: the walk of
// tile_read (ring of RING sub-iterations, no barrier) with the arithmetic of an M = 1 GEMM. Each lane unpacks
// its weight chunks and the 16 activation bytes of the same K positions (read through L1: every CTA reads the
// same activation row) to f16 and runs mma.sync m16n8k16 with the tokens as the N operand (token 0; the other
// columns read the same row).
template <int RING>
__global__ void __launch_bounds__(256, 2)
    gemv_direct(const unsigned char* a, const unsigned char* b, int n, int k, int split, float* partial) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const long long slice = static_cast<long long>(k) / split;
  const long long lane_off = (lane % 4) * 16 + warp * 256 + blockIdx.y * slice;
  const unsigned char* r0 = b + (blockIdx.x * 16LL + lane / 4) * k + lane_off;
  const unsigned char* r1 = r0 + 8LL * k;
  const unsigned char* act = a + lane_off;
  const int total = static_cast<int>(slice / 2048) * 4;
  pdl_wait();
  V4 ring[RING][3];
  auto load = [&](V4 (&slot)[3], int s) {
    const long long off = walk_offset(s);
    slot[0] = load_stream(r0 + off), slot[1] = load_stream(r1 + off), slot[2] = load_cached(act + off);
  };
#pragma unroll
  for (int d = 0; d < RING; ++d)
    if (d < total) load(ring[d], d);
  pdl_allow();
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  for (int s0 = 0; s0 < total; s0 += RING) {
#pragma unroll
    for (int d = 0; d < RING; ++d) {
      const int s = s0 + d;
      if (s < total) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          uint32_t af[4], b0, b1;
          fp8dk::skinny::unpack_fp8x4<fp8dk::E4m3fn>(ring[d][0].w[q], af[0], af[2]);
          fp8dk::skinny::unpack_fp8x4<fp8dk::E4m3fn>(ring[d][1].w[q], af[1], af[3]);
          fp8dk::skinny::unpack_fp8x4<fp8dk::E4m3fn>(ring[d][2].w[q], b0, b1);
          fp8dk::skinny::mma_m16n8k16(fp8dk::Fp16{}, acc, af, b0, b1);
        }
      }
      if (s + RING < total) load(ring[d], s + RING);
    }
  }
  if (lane % 4 == 0) {
    float* p = partial + (blockIdx.y * 8LL + warp) * n + blockIdx.x * 16 + lane / 4;
    p[0] = acc[0], p[8] = acc[2];
  }
}

// ------------------------------------------------------------------------------------------------ harness
static cudaStream_t g_stream;
static bool g_pdl = true;

template <class K, class... Args>
static void launch(K kernel, dim3 grid, dim3 block, Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid, cfg.blockDim = block, cfg.stream = g_stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = g_pdl ? 1 : 0;
  cfg.attrs = attr, cfg.numAttrs = 1;
  CHECK(cudaLaunchKernelEx(&cfg, kernel, args...));
}

// Median milliseconds of `enqueue` on the stream, timed with events over 20 repetitions after 3 warm ones.
template <class F>
static double median_ms(F enqueue) {
  std::vector<float> ms;
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  for (int rep = 0; rep < 23; ++rep) {
    CHECK(cudaEventRecord(e0, g_stream));
    enqueue();
    CHECK(cudaEventRecord(e1, g_stream));
    CHECK(cudaEventSynchronize(e1));
    float t;
    CHECK(cudaEventElapsedTime(&t, e0, e1));
    if (rep >= 3) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  CHECK(cudaEventDestroy(e0));
  CHECK(cudaEventDestroy(e1));
  return ms[ms.size() / 2];
}

// Median microseconds per call of a graph that calls launch(set) over `sets` rotated sets, repeated to >= 2 ms.
template <class F>
static double time_per_call(F launch_set, int sets, double est_us) {
  const int rounds = std::max(1, static_cast<int>(2000.0 / (sets * std::max(est_us, 1.0))));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  for (int s = 0; s < sets; ++s) launch_set(s);  // warm-up outside the graph
  CHECK(cudaStreamSynchronize(g_stream));
  CHECK(cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeGlobal));
  for (int r = 0; r < rounds; ++r)
    for (int s = 0; s < sets; ++s) launch_set(s);
  CHECK(cudaStreamEndCapture(g_stream, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const double ms = median_ms([&] { CHECK(cudaGraphLaunch(exec, g_stream)); });
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  return ms * 1e3 / (rounds * sets);
}

static double memcpy_gbps(size_t bytes) {
  void *src, *dst;
  CHECK(cudaMalloc(&src, bytes));
  CHECK(cudaMalloc(&dst, bytes));
  CHECK(cudaMemset(src, 1, bytes));
  const double ms = median_ms([&] { CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, g_stream)); });
  CHECK(cudaFree(src));
  CHECK(cudaFree(dst));
  return 2.0 * bytes / (ms * 1e-3) / 1e9;
}

static const size_t kRotation = 192ull << 20;
static double g_copy_gbps;
static bool g_first = true;

static void report(const char* family, const char* shape, const char* config, double bytes, double us) {
  const double gbps = bytes / us / 1e3;
  std::printf("%s  {\"family\": \"%s\", \"shape\": \"%s\", \"config\": \"%s\", \"pdl\": %s, \"mb\": %.2f, \"us\": %.3f, "
              "\"gbps\": %.0f, \"pct_copy_bw\": %.1f}",
              g_first ? "" : ",\n", family, shape, config, g_pdl ? "true" : "false", bytes / 1e6, us, gbps,
              100 * gbps / g_copy_gbps);
  std::fflush(stdout);
  g_first = false;
}

// Elementwise patterns: rows x width 16-bit elements in two inputs; out0 (16-bit, same size) optional; out1 FP8.
// Inputs rotate over sets beyond L2. Outputs rotate too, or are one buffer every call writes, which is what the
// sweep's timing of our ops does (each call's output comes back from the graph's memory pool at the same
// address) and what a model does with its recycled activation buffers: the writes then partly stay in L2.
template <bool kOut0>
static void elementwise(const char* shape, int rows, int width, int sms) {
  const long long vecs = static_cast<long long>(rows) * width * 2 / 16;
  const double bytes = vecs * (16.0 * 2 + (kOut0 ? 16 : 0) + 8);
  const int sets = std::max<int>(1, static_cast<int>((kRotation + bytes - 1) / bytes));
  std::vector<V4*> in0(sets), in1(sets), out0(sets);
  std::vector<uint2*> out1(sets);
  for (int s = 0; s < sets; ++s) {
    CHECK(cudaMalloc(&in0[s], vecs * 16));
    CHECK(cudaMalloc(&in1[s], vecs * 16));
    CHECK(cudaMalloc(&out0[s], kOut0 ? vecs * 16 : 16));
    CHECK(cudaMalloc(&out1[s], vecs * 8));
    CHECK(cudaMemset(in0[s], 3, vecs * 16));
    CHECK(cudaMemset(in1[s], 5, vecs * 16));
  }
  const double est = bytes / (g_copy_gbps * 1e3);
  const int row_vecs = width * 2 / 16;
  // Outputs: rotated with the inputs; one buffer reused by every call; or (RMSNorm) the residual written in place
  // over its input, which is what fused_add_rms_norm does, and the FP8 output reused.
  const char* modes[] = {"", " out reused", " residual in place"};
  for (int mode = 0; mode < (kOut0 ? 3 : 2); ++mode) {
    auto o0 = [&](int s) { return mode == 2 ? in1[s] : out0[mode == 1 ? 0 : s]; };
    auto o1 = [&](int s) { return out1[mode == 0 ? s : 0]; };
    for (int ctas : {2, 4}) {
      char cfg[64];
      std::snprintf(cfg, sizeof cfg, "flat ctas/sm=%d U=4%s", ctas, modes[mode]);
      auto go = [&](int s) {
        launch(flat_rw<4, kOut0>, dim3(sms * ctas), dim3(256), (const V4*)in0[s], (const V4*)in1[s], o0(s), o1(s), vecs);
      };
      report("flat_rw", shape, cfg, bytes, time_per_call(go, sets, est));
    }
    for (int threads : {256, 512, 1024}) {
      const int vpt = (row_vecs + threads - 1) / threads;
      if (vpt > 8) continue;
      char cfg[64];
      std::snprintf(cfg, sizeof cfg, "row threads=%d%s", threads, modes[mode]);
      auto go = [&](int s) {
        auto k = vpt <= 1 ? row_rw<1, kOut0> : vpt <= 2 ? row_rw<2, kOut0> : vpt <= 4 ? row_rw<4, kOut0> : row_rw<8, kOut0>;
        launch(k, dim3(rows), dim3(threads), (const V4*)in0[s], (const V4*)in1[s], o0(s), o1(s), row_vecs);
      };
      report("row_rw", shape, cfg, bytes, time_per_call(go, sets, est));
    }
  }
  for (int s = 0; s < sets; ++s) {
    CHECK(cudaFree(in0[s]));
    CHECK(cudaFree(in1[s]));
    CHECK(cudaFree(out0[s]));
    CHECK(cudaFree(out1[s]));
  }
}

// Reads only, flat (the ceiling of any kernel that streams the weights of a GEMM once).
template <int U>
__global__ void __launch_bounds__(256) flat_read(const V4* in, long long n, unsigned* sink) {
  pdl_wait();
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  unsigned acc = 0;
  bool allowed = false;
  for (long long i0 = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i0 < n; i0 += U * stride) {
    V4 a[U];
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (i0 + u * stride < n) a[u] = load_stream(in + i0 + u * stride);
    if (!allowed) pdl_allow(), allowed = true;
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (i0 + u * stride < n) acc += mix(a[u]);
  }
  if (acc == 0x9e3779b9u) sink[blockIdx.x] = acc;
}

// Bytes the walk reads: whole 2 KB blocks of every slice (the remainder of K is not read).
static double walk_bytes(int n, int k, int split) { return static_cast<double>(n) * split * (k / split / 2048) * 2048; }

template <int RING, bool kBarrier>
static void tile_case(const char* shape, std::vector<unsigned char*>& w, int n, int k, int split, unsigned* sink,
                      long long ld, int rotate) {
  const double bytes = walk_bytes(n, k, split);
  char cfg[96];
  std::snprintf(cfg, sizeof cfg, "split=%d ring=%d%s%s%s", split, RING, kBarrier ? " barrier" : "",
                rotate ? " rotated" : "", ld != k ? " padded rows" : "");
  auto go = [&](int s) {
    launch(tile_read<RING, kBarrier>, dim3(n / 16, split), dim3(256), (const unsigned char*)w[s], k, ld, split, rotate, sink);
  };
  report("tile_read", shape, cfg, bytes, time_per_call(go, static_cast<int>(w.size()), bytes / (g_copy_gbps * 1e3)));
}

template <int RING>
static void gemv_case(const char* shape, std::vector<unsigned char*>& w, const unsigned char* a, int n, int k, int split,
                      float* partial) {
  const double bytes = walk_bytes(n, k, split);
  char cfg[64];
  std::snprintf(cfg, sizeof cfg, "split=%d ring=%d", split, RING);
  auto go = [&](int s) { launch(gemv_direct<RING>, dim3(n / 16, split), dim3(256), a, (const unsigned char*)w[s], n, k, split, partial); };
  report("gemv_direct", shape, cfg, bytes, time_per_call(go, static_cast<int>(w.size()), bytes / (g_copy_gbps * 1e3)));
}

static void gemm_walk(const char* shape, int n, int k) {
  const size_t bytes = static_cast<size_t>(n) * k;
  const long long padded_ld = k + 256;
  const int sets = std::max<int>(1, static_cast<int>((kRotation + bytes - 1) / bytes));
  std::vector<unsigned char*> w(sets);
  for (auto& p : w) {
    CHECK(cudaMalloc(&p, n * padded_ld));
    CHECK(cudaMemset(p, 0x38, n * padded_ld));  // e4m3 1.0
  }
  unsigned* sink;
  unsigned char* a;
  float* partial;
  CHECK(cudaMalloc(&sink, 1 << 20));
  CHECK(cudaMalloc(&a, k));
  CHECK(cudaMemset(a, 0x38, k));
  CHECK(cudaMalloc(&partial, 16ull * 8 * n * sizeof(float)));
  for (int ctas : {2, 4}) {
    char cfg[64];
    std::snprintf(cfg, sizeof cfg, "flat ctas/sm=%d U=8", ctas);
    const int sms = [] { int d, v; cudaGetDevice(&d); cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, d); return v; }();
    auto go = [&](int s) { launch(flat_read<8>, dim3(sms * ctas), dim3(256), (const V4*)w[s], static_cast<long long>(bytes / 16), sink); };
    report("flat_read", shape, cfg, static_cast<double>(bytes), time_per_call(go, sets, bytes / (g_copy_gbps * 1e3)));
  }
  int last_split = 1;
  for (int split : {1, 2, 4}) {
    if (k / split < 2 * 2048) continue;
    last_split = split;
    if (split == 2) continue;
    for (int rotate : {0, 1}) {
      for (long long ld : {static_cast<long long>(k), padded_ld}) {
        if (ld != k && rotate) continue;
        tile_case<8, true>(shape, w, n, k, split, sink, ld, rotate);
        tile_case<4, false>(shape, w, n, k, split, sink, ld, rotate);
        tile_case<8, false>(shape, w, n, k, split, sink, ld, rotate);
      }
    }
    gemv_case<8>(shape, w, a, n, k, split, partial);
  }
  // The result of gemv_direct is checked once: every weight and activation is 1.0, so each warp's partial is
  // the number of K elements it covered (256 per 2 KB block).
  std::vector<float> host(static_cast<size_t>(n));
  CHECK(cudaMemcpy(host.data(), partial, n * sizeof(float), cudaMemcpyDeviceToHost));
  const float expect = static_cast<float>(k / last_split / 2048 * 256);
  int bad = 0;
  for (int i = 0; i < n; ++i) bad += host[i] != expect;
  std::fprintf(stderr, "%s gemv_direct check: %d of %d partials differ from %.0f\n", shape, bad, n, expect);
  for (auto p : w) CHECK(cudaFree(p));
  CHECK(cudaFree(sink));
  CHECK(cudaFree(a));
  CHECK(cudaFree(partial));
}

int main() {
  CHECK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  g_copy_gbps = memcpy_gbps(1ull << 30);
  std::printf("{\"device\": \"%s\", \"sm_count\": %d, \"copy_gbps\": %.0f, \"rows\": [\n", prop.name,
              prop.multiProcessorCount, g_copy_gbps);
  const int sms = prop.multiProcessorCount;
  for (bool pdl : {true, false}) {
    g_pdl = pdl;
    elementwise<true>("rmsnorm 512x16384", 512, 16384, sms);
    elementwise<true>("rmsnorm 512x8192", 512, 8192, sms);
    elementwise<true>("rmsnorm 2048x16384", 2048, 16384, sms);
    elementwise<false>("swiglu 512x8192", 512, 8192, sms);
    elementwise<false>("swiglu 512x6656", 512, 6656, sms);
    elementwise<false>("swiglu 512x16384", 512, 16384, sms);
    if (!pdl) break;  // the GEMM walks with PDL only
    gemm_walk("qkv 2304x16384", 2304, 16384);
    gemm_walk("gate_up 13312x16384", 13312, 16384);
    gemm_walk("down 16384x6656", 16384, 6656);
  }
  std::printf("\n]}\n");
  return 0;
}
