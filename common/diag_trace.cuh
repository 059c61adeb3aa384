#pragma once
// A cross-kernel timeline of the package's sm_90 kernels, in diagnostic builds only (NVCC_APPEND_FLAGS=
// -DFP8DK_DIAG_TRACE python tools/build.py; benchmarks/decode_trace.py reads it). Thread 0 of every CTA keeps
// the global timer (ns) at its entry, after its PDL wait, at two points of its own kernel's choosing and at
// its end, and writes them with its SM into a buffer of its module, which the host reads back through
// fp8dk_trace_dump_<module> (one per translation unit that launches kernels). The global timer is one clock
// for every SM, so the marks of consecutive kernels compare. A record costs one atomic at the CTA's entry and one
// 72-byte store at its end (the traced 405B step runs about 1% slower); printf's traffic had delayed the next
// kernels by hundreds of microseconds (docs/experiments/README.md, item 46). In every other build the macros are
// empty.
#include "common/platform.cuh"

#if defined(FP8DK_NVIDIA)
namespace fp8dk {
// The global timer (ns), one clock for every SM: what every diagnostic mark of the package reads.
__device__ __forceinline__ unsigned long long global_timer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
}  // namespace fp8dk
#endif

#if defined(FP8DK_DIAG_TRACE) && defined(FP8DK_NVIDIA)
namespace fp8dk {
namespace trace {

enum Kind : unsigned { kRmsNorm = 1, kSwiglu = 2, kQuantize = 3, kSkinnyGemm = 4 };

// t: entry, PDL wait returned, the kernel's own two marks (0 where it has none), end.
struct Record {
  unsigned long long t[5];
  unsigned kind, n, k, m, block, smid, grid, unused;
};

constexpr unsigned kCapacity = 1u << 19;  // CTAs: a 405B TP8 step at 32 tokens runs about 130 000
static __device__ Record records[kCapacity];
static __device__ unsigned recorded;

__device__ __forceinline__ unsigned long long now() { return global_timer_ns(); }

__device__ __forceinline__ bool first_thread() { return (threadIdx.x | threadIdx.y | threadIdx.z) == 0; }

// The record's slot, taken at the CTA's entry and kept once the PDL wait returned (FP8DK_TRACE_WAITED), so that
// the atomic's round trip overlaps the kernel's start and holds no register through its main loop. (Taken at the
// end, it held every CTA's exit, and so the next kernel's PDL wait, about 1 us: 0.37 ms a 405B step at 32 tokens.)
__device__ __forceinline__ unsigned claim() { return first_thread() ? atomicAdd(&recorded, 1u) : kCapacity; }

__device__ __forceinline__ void write(unsigned i, unsigned long long (&t)[5], unsigned kind, unsigned n,
                                      unsigned k, unsigned m) {
  if (!first_thread() || i >= kCapacity) return;
  t[4] = now();
  unsigned smid;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
  Record& r = records[i];  // field by field: a Record built in registers first spilled tight kernels
  for (int j = 0; j < 5; ++j) r.t[j] = t[j];
  r.kind = kind, r.n = n, r.k = k, r.m = m, r.smid = smid, r.unused = 0;
  r.block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  r.grid = gridDim.x * gridDim.y * gridDim.z;
}

}  // namespace trace
}  // namespace fp8dk

#define FP8DK_TRACE_BEGIN()                              \
  __shared__ unsigned long long fp8dk_trace_t[5];        \
  __shared__ unsigned fp8dk_trace_slot;                  \
  const unsigned fp8dk_trace_claimed = ::fp8dk::trace::claim(); \
  if (::fp8dk::trace::first_thread()) {                  \
    fp8dk_trace_t[0] = ::fp8dk::trace::now();            \
    fp8dk_trace_t[1] = fp8dk_trace_t[2] = fp8dk_trace_t[3] = 0; \
  }
// After the kernel's PDL wait: marks 1 and keeps the slot claimed at entry.
#define FP8DK_TRACE_WAITED()                                                    \
  do {                                                                          \
    if (::fp8dk::trace::first_thread()) {                                       \
      fp8dk_trace_t[1] = ::fp8dk::trace::now();                                 \
      fp8dk_trace_slot = fp8dk_trace_claimed;                                   \
    }                                                                           \
  } while (0)
#define FP8DK_TRACE_MARK(i)                                                             \
  do {                                                                                  \
    if (::fp8dk::trace::first_thread()) fp8dk_trace_t[i] = ::fp8dk::trace::now();       \
  } while (0)
// The first time only (a kernel's first full stage, say).
#define FP8DK_TRACE_MARK_FIRST(i)                                                                        \
  do {                                                                                                   \
    if (::fp8dk::trace::first_thread() && fp8dk_trace_t[i] == 0) fp8dk_trace_t[i] = ::fp8dk::trace::now(); \
  } while (0)
#define FP8DK_TRACE_END(kind, n, k, m) \
  ::fp8dk::trace::write(fp8dk_trace_slot, fp8dk_trace_t, ::fp8dk::trace::kind, unsigned(n), unsigned(k), unsigned(m))
// With -DFP8DK_DIAG_TRACE_DRAIN as well, in a kernel whose every thread reaches its end: the end mark waits until
// the CTA's stores are visible to the whole GPU (each thread's fence, then the CTA's barrier). The next kernel's
// PDL wait returns once the grid has completed and its stores are visible, so this tells the drain of a kernel's
// stores from the rest of that release (docs/experiments/README.md, item 60).
#if defined(FP8DK_DIAG_TRACE_DRAIN)
#define FP8DK_TRACE_DRAIN() \
  do {                      \
    __threadfence();        \
    __syncthreads();        \
  } while (0)
#else
#define FP8DK_TRACE_DRAIN() ((void)0)
#endif

// Host side, once per translation unit: copies up to `capacity` records into `host` and empties the buffer;
// returns how many the kernels wrote since the last call (more than `capacity`, or than kCapacity, were lost).
#define FP8DK_TRACE_EXPORT(module)                                                                       \
  extern "C" __attribute__((visibility("default"))) unsigned fp8dk_trace_dump_##module(void* host,       \
                                                                                       unsigned capacity) { \
    unsigned written = 0;                                                                                \
    cudaDeviceSynchronize();                                                                             \
    cudaMemcpyFromSymbol(&written, ::fp8dk::trace::recorded, sizeof(written));                           \
    unsigned n = written < capacity ? written : capacity;                                                \
    n = n < ::fp8dk::trace::kCapacity ? n : ::fp8dk::trace::kCapacity;                                   \
    if (n) cudaMemcpyFromSymbol(host, ::fp8dk::trace::records, n * sizeof(::fp8dk::trace::Record));      \
    const unsigned zero = 0;                                                                             \
    cudaMemcpyToSymbol(::fp8dk::trace::recorded, &zero, sizeof(zero));                                   \
    return written;                                                                                      \
  }
#else
#define FP8DK_TRACE_BEGIN()
#define FP8DK_TRACE_WAITED() ((void)0)
#define FP8DK_TRACE_MARK(i) ((void)0)
#define FP8DK_TRACE_MARK_FIRST(i) ((void)0)
#define FP8DK_TRACE_END(kind, n, k, m) ((void)0)
#define FP8DK_TRACE_DRAIN() ((void)0)
#define FP8DK_TRACE_EXPORT(module)
#endif
