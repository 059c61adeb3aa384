#pragma once
// Thread-block clusters: the CTAs of a cluster (NVIDIA sm_90+) run at the same time, on SMs of one GPC, and
// can access each other's shared memory ("distributed shared memory", DSMEM). No torch includes.
//
//   cluster_rank()            this CTA's rank in its cluster, 0 .. cluster_ctas() - 1
//   cluster_ctas()            CTAs in this cluster (the launch's cluster size; 1 without clusters)
//   cluster_index()           which cluster of the grid this CTA belongs to (x dimension)
//   cluster_arrive()          this thread arrives at the cluster barrier, with release semantics: its earlier
//                             memory operations (shared memory of any CTA of the cluster included) are
//                             visible to every thread of the cluster once that thread's wait returns
//   cluster_arrive_relaxed()  arrives without ordering memory: only says "this thread got here"
//   cluster_wait()            waits until every thread of the cluster has arrived (acquire)
//   cluster_sync()            cluster_arrive() + cluster_wait(): a barrier over the cluster
//   copy_to_cluster_shared_async(dst, src, bytes, rank, landed)
//                             (sm_90 only) a block of this CTA's shared memory into the CTA of rank `rank`, by the
//                             copy engine, counted on that CTA's mbarrier like store_cluster_shared_async
//   load_cluster_shared(p, rank)
//                             the float at shared-memory address p, but in the CTA of cluster rank `rank`
//   store_cluster_shared_async(p, rank, v, landed)
//                             a store of v there through the asynchronous proxy (st.async): once it has landed it
//                             completes 4 bytes of the mbarrier at `landed` in that CTA, with release semantics at
//                             cluster scope, and the storing thread waits for nothing (no fence). The receiver
//                             arms its mbarrier with the bytes it expects and waits for it (cluster_landed_wait).
//
// An arrive and a wait split one barrier phase, so that work between them overlaps the other CTAs' arrival;
// they alternate, and every thread of every CTA of the cluster takes part in each (the .aligned forms: a
// warp executes them converged). A CTA's shared memory exists only while it runs: access another CTA's only
// after a barrier phase that it arrived at (it has started), and keep it from exiting until the last access
// is done (a barrier phase after that access).
//
// Cost on sm_90 (SASS): a release arrive waits for every earlier memory operation of the thread, global
// stores included (MEMBAR.ALL.GPU), so issue global stores that need no ordering after it; a relaxed arrive
// is a single UCGABAR_ARV; a wait is UCGABAR_WAIT plus an L1 invalidation (CCTL.IVALL). An exchange through
// store_cluster_shared_async and an mbarrier needs no MEMBAR at all.
//
// Where clusters do not exist (NVIDIA before sm_90, AMD, the host pass) the cluster is the CTA alone: rank 0 of
// 1, cluster_index() is blockIdx.x, a barrier phase is the block barrier (arrives do nothing, a wait is
// __syncthreads) and the "remote" access is to this CTA's own shared memory. Code written against these
// functions then runs as a correct one-CTA kernel there, which is what a launcher that finds no cluster
// support launches.
#include "common/platform.cuh"
#include "common/tma.cuh"

namespace fp8dk {

FP8DK_DEVICE unsigned cluster_rank() {
#if defined(FP8DK_SM90)
  unsigned r;
  asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
#else
  return 0;
#endif
}

FP8DK_DEVICE unsigned cluster_ctas() {
#if defined(FP8DK_SM90)
  unsigned n;
  asm("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
  return n;
#else
  return 1;
#endif
}

FP8DK_DEVICE unsigned cluster_index() {
#if defined(FP8DK_SM90)
  unsigned i;
  asm("mov.u32 %0, %%clusterid.x;" : "=r"(i));
  return i;
#else
  return blockIdx.x;
#endif
}

FP8DK_DEVICE void cluster_arrive() {
#if defined(FP8DK_SM90)
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
#endif
}

FP8DK_DEVICE void cluster_arrive_relaxed() {
#if defined(FP8DK_SM90)
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
#endif
}

FP8DK_DEVICE void cluster_wait() {
#if defined(FP8DK_SM90)
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
#else
  sync_block();
#endif
}

FP8DK_DEVICE void cluster_sync() {
  cluster_arrive();
  cluster_wait();
}

#if defined(FP8DK_SM90)
namespace detail {
// The address of shared-memory location p in the CTA of cluster rank `rank` (shared::cluster window).
FP8DK_DEVICE unsigned cluster_shared_address(const void* p, unsigned rank) {
  const unsigned local = static_cast<unsigned>(__cvta_generic_to_shared(p));
  unsigned remote;
  asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  return remote;
}
}  // namespace detail
#endif

// `landed` (an mbarrier of this CTA, initialized before the cluster barrier phase that precedes the store) at the
// same offset in the CTA of rank `rank` counts the store's 4 bytes.
FP8DK_DEVICE void store_cluster_shared_async(float* p, unsigned rank, float v, uint64_t* landed) {
#if defined(FP8DK_SM90)
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.f32 [%0], %1, [%2];"
               ::"r"(detail::cluster_shared_address(p, rank)), "f"(v), "r"(detail::cluster_shared_address(landed, rank))
               : "memory");
#else
  (void)rank, (void)landed;  // no clusters: the store is this CTA's own, ordered by the block barrier after it
  *p = v;
#endif
}

// Blocks until the phase of parity `parity` of this CTA's mbarrier `landed` has completed: the stores that
// other CTAs of the cluster made into this CTA's shared memory with store_cluster_shared_async are visible.
FP8DK_DEVICE void cluster_landed_wait(uint64_t* landed, unsigned parity) {
#if defined(FP8DK_SM90)
  tma::wait_cluster(landed, parity);
#else
  (void)landed, (void)parity;
  sync_block();
#endif
}

#if defined(FP8DK_SM90)
// `bytes` (a multiple of 16, both addresses 16-byte aligned) of this CTA's shared memory at `src` into the CTA of
// rank `rank` at the offset of `dst`, by the copy engine (cp.async.bulk, shared::cta to shared::cluster): one
// instruction for a whole block of rows, where st.async moves 4 to 16 bytes an instruction. Completes `bytes` on
// that CTA's mbarrier at the offset of `landed`. The writes to `src` before it are the generic proxy's: each
// writing thread fences them to the async proxy (fence_proxy_async_shared) before a barrier that orders them
// before this call. `src` stays untouched and the CTA alive until bulk_copies_read() returns.
FP8DK_DEVICE void copy_to_cluster_shared_async(void* dst, const void* src, unsigned bytes, unsigned rank,
                                               uint64_t* landed) {
  asm volatile(
      "cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
          detail::cluster_shared_address(dst, rank)),
      "r"(tma::shared_address(src)), "r"(bytes), "r"(detail::cluster_shared_address(landed, rank))
      : "memory");
}

// Makes this thread's generic-proxy writes to shared memory visible to the async proxy (the bulk copies above).
FP8DK_DEVICE void fence_proxy_async_shared() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// Closes the bulk copies this thread issued into one group and waits until they have read their sources.
FP8DK_DEVICE void bulk_copies_read() {
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
  asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}
#endif

FP8DK_DEVICE float load_cluster_shared(const float* p, unsigned rank) {
#if defined(FP8DK_SM90)
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(detail::cluster_shared_address(p, rank))
               : "memory");
  return v;
#else
  (void)rank;
  return *p;
#endif
}

}  // namespace fp8dk
