#pragma once
// Skinny GEMM, part 5: the deterministic reduction and the epilogue, shared by both vendors.
//
// Inside a CTA the WK warp columns left their partial sums in shared memory; they are added in column order.
// When one CTA computed the whole K of the tile that is the tile: out = acc * alpha + bias (finish()).
// Otherwise the `count` contributions of the tile (split-K slices, or stream-K segments of consecutive CTAs)
// are added in index order 0, 1, ... (K order), so the result never depends on which CTA finished first and
// is bitwise reproducible. Two ways to meet:
//   * cluster (NVIDIA sm_90+, split grid, split_k <= 8): the tile's CTAs form a thread-block cluster; after a
//     cluster barrier each CTA reads its share of the tile from all split_k CTAs' shared memory (DSMEM) and
//     finishes it. No global workspace, no counters: nothing to zero, nothing that outlives the launch.
//   * workspace: each CTA writes its partial tile to ws[index][m][n] (fp32), makes it visible (fence) and
//     counts itself in the tile's counter; the last CTA to arrive adds the contributions, finishes the tile
//     and sets the counter back to zero, so the counters are zero again when the kernel ends and the launcher
//     zeroes them only when it allocates them (no memset per call, none between PDL launches).
#include "common/cluster.cuh"
#include "common/numerics.cuh"


namespace fp8dk {
namespace skinny {

// Release/acquire between CTAs at device scope (gfx942: agent scope writes back / invalidates L2 across XCDs).
FP8DK_DEVICE void fence_device() {
#if defined(FP8DK_AMD)
  __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "agent");
#else
  __threadfence();
#endif
}

FP8DK_DEVICE unsigned atomic_add_device(unsigned* p, unsigned v) {
#if defined(FP8DK_AMD)
  return __hip_atomic_fetch_add(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
#else
  return atomicAdd(p, v);
#endif
}

// The tile's arrival count, by one thread after a barrier of the CTA that follows its partial-sum stores:
// release (cumulative: the barrier orders the other threads' stores before it) and acquire (the other CTAs'
// partials are visible to this CTA's loads that a barrier orders after it), at device scope. One fence.acq_rel
// of one thread instead of every thread's fence_device(), whose sequentially consistent fence (MEMBAR.SC.GPU,
// plus an L1 invalidation) is the heaviest the GPU has.
FP8DK_DEVICE unsigned count_arrival(unsigned* p) {
#if defined(FP8DK_AMD)
  return __hip_atomic_fetch_add(p, 1u, __ATOMIC_ACQ_REL, __HIP_MEMORY_SCOPE_AGENT);
#else
  unsigned old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(old) : "l"(p) : "memory");
  return old;
#endif
}

// A partial written by another CTA, read after the acquire fence: from L2, never from this SM's L1 (on AMD
// the agent-scope fence already invalidated the CU's cache).
FP8DK_DEVICE float load_partial(const float* p) {
#if defined(FP8DK_AMD)
  return *p;
#else
  return __ldcg(p);
#endif
}

struct Epilogue {
  float alpha;            // scale_a * scale_b (times the FP8 unpack's product scale), 1 for 16-bit operands
  const uint16_t* bias;   // [N] in the out dtype, or nullptr
  uint16_t* out;
  long long out_stride;   // elements
  bool out_quads;         // 4 outputs of a row starting at a multiple of 4 are 8-byte aligned (finish4)
};

// out = acc * alpha + bias as one fused multiply-add (bias -0 when absent: x + -0 is x, the sign of a zero
// included). Written as `acc * alpha` then `+= bias`, the compiler fused the two at some inlined call sites
// and not at others, so a tile's bits depended on which of a kernel's code paths finished it: with the reducer
// warps, which finish some tiles and not others from run to run, 2 of 7.4 million outputs differed over 100
// reruns (docs/experiments/README.md, item 19).
template <class Out>
FP8DK_DEVICE uint16_t finished(const Epilogue& e, int n, float acc) {
  const float bias = e.bias != nullptr ? Out::to_float(e.bias[n]) : -0.f;
  return Out::from_float(fma_rn(acc, e.alpha, bias));
}

template <class Out>
FP8DK_DEVICE void finish(const Epilogue& e, int m, int n, float acc) {
  e.out[m * e.out_stride + n] = finished<Out>(e, n, acc);
}

// Outputs n .. n + 3 of row m (n a multiple of 4), each finished() as finish() does: one 8-byte store where
// e.out_quads, else four.
template <class Out>
FP8DK_DEVICE void finish4(const Epilogue& e, int m, int n, const float (&acc)[4]) {
  if (!e.out_quads) {
#pragma unroll
    for (int j = 0; j < 4; ++j) finish<Out>(e, m, n + j, acc[j]);
    return;
  }
  uint64_t bits = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) bits |= static_cast<uint64_t>(finished<Out>(e, n + j, acc[j])) << (16 * j);
  *reinterpret_cast<uint64_t*>(e.out + m * e.out_stride + n) = bits;
}

// How the contributions to a tile meet (above).
enum class Meet { kAlone, kCluster, kWorkspace };

// Rows of the tile of rows [n0, n0 + block_n) that exist in out[., n) (the last tile may end past n).
FP8DK_DEVICE int rows_in_tile(int block_n, int n, int n0) { return block_n < n - n0 ? block_n : n - n0; }

struct TileArgs {
  int red_pitch, mp, wk;  // red[wk][mp][red_pitch] floats: the warp columns' partial sums
  int block_n, n0;        // tile rows [n0, n0 + block_n) of out
  int m, n;
  int tile;
  int count, index;       // contributions to the tile, and which one this CTA's is (cluster: its rank)
  float* ws;              // kWorkspace: [contributions][m][n]
  unsigned* counters;     // kWorkspace: [tiles], zero on entry and on exit

  FP8DK_DEVICE int cols() const { return rows_in_tile(block_n, n, n0); }
  // Element (r, c) of this CTA's partial tile: red's warp columns added in column order.
  FP8DK_DEVICE float cta_sum(const float* red, int r, int c) const {
    float v = 0.f;
    for (int w = 0; w < wk; ++w) v += red[(w * mp + r) * red_pitch + c];
    return v;
  }
};

// The cluster meet: this CTA's partial tile (its warp columns added in order) in place of warp column 0's (each
// element read and written by one thread), a cluster barrier, then each CTA finishes a share of the tile, adding
// the ranks' partials in rank (= K) order: element i by the CTA of rank t.index = (i / threads) % t.count.
// `tid` of `threads` threads after a barrier of theirs that follows the warps' stores to red; every thread of
// every CTA of the cluster takes part in both cluster barriers.
template <class Out>
FP8DK_DEVICE void meet_in_cluster(float* red, const TileArgs& t, const Epilogue& e, int tid, int threads) {
#if defined(FP8DK_SM90)
  const int cols = t.cols();
  const int items = t.m * cols;
  for (int i = tid; i < items; i += threads) {
    const int r = i / cols, c = i % cols;
    red[r * t.red_pitch + c] = t.cta_sum(red, r, c);
  }
  cluster_sync();
  for (int i = t.index * threads + tid; i < items; i += t.count * threads) {
    const int r = i / cols, c = i % cols;
    float v = 0.f;
    for (int s = 0; s < t.count; ++s) v += load_cluster_shared(red + r * t.red_pitch + c, s);
    finish<Out>(e, r, t.n0 + c, v);
  }
  cluster_sync();  // no CTA leaves (and frees its shared memory) while others still read it
#elif defined(FP8DK_AMD)
  (void)red, (void)t, (void)e, (void)tid, (void)threads;
  __builtin_trap();  // the launchers never ask for clusters where the kernels have none
#else
  (void)red, (void)t, (void)e, (void)tid, (void)threads;
  __trap();
#endif
}

// Called by all threads of the CTA after a barrier that follows the warps' stores to red.
template <class Out>
FP8DK_DEVICE void reduce_tile(float* red, const TileArgs& t, Meet meet, const Epilogue& e) {
  const int cols = t.cols();
  const int items = t.m * cols;
  auto cta_sum = [&](int r, int c) { return t.cta_sum(red, r, c); };

  if (meet == Meet::kAlone) {
    for (int i = threadIdx.x; i < items; i += blockDim.x) finish<Out>(e, i / cols, t.n0 + i % cols, cta_sum(i / cols, i % cols));
    return;
  }

  if (meet == Meet::kCluster) {
    // Cluster rank == slice == index: grid (tiles, split_k) with clusters (1, split_k, 1).
    meet_in_cluster<Out>(red, t, e, threadIdx.x, blockDim.x);
    return;
  }

  const long long slice_elems = static_cast<long long>(t.m) * t.n;
  for (int i = threadIdx.x; i < items; i += blockDim.x) {
    const int r = i / cols, c = i % cols;
    t.ws[t.index * slice_elems + static_cast<long long>(r) * t.n + t.n0 + c] = cta_sum(r, c);
  }
  fence_device();  // each thread publishes its own writes before the CTA counts itself
  __shared__ unsigned arrived;
  sync_block();
  if (threadIdx.x == 0) arrived = atomic_add_device(t.counters + t.tile, 1u);
  sync_block();
  if (arrived != static_cast<unsigned>(t.count - 1)) return;
  if (threadIdx.x == 0) t.counters[t.tile] = 0u;  // every contribution has counted itself: ready for the next launch
  fence_device();  // acquire: the other slices' partials are visible after this
  for (int i = threadIdx.x; i < items; i += blockDim.x) {
    const int r = i / cols, c = i % cols;
    const float* p = t.ws + static_cast<long long>(r) * t.n + t.n0 + c;
    float v = 0.f;
    for (int s = 0; s < t.count; ++s) v += load_partial(p + s * slice_elems);
    finish<Out>(e, r, t.n0 + c, v);
  }
}

}  // namespace skinny
}  // namespace fp8dk
