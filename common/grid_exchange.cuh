#pragma once
// An all-to-all exchange of a few floats among the CTAs of a grid whose launcher has made sure that all of them
// are resident at once (at most one CTA per SM and no more CTAs than SMs). Without that guarantee it can
// deadlock: never use it in a grid the device may run in waves.
//
// Each CTA publishes its values and reads everyone's, with no barrier, fence or atomic on the way: every value
// travels in one 64-bit word together with the launch's tag (value bits low, tag high; a 64-bit store and load
// are single-copy atomic), so a reader that finds the tag knows the value is this launch's, and polls until it
// finds it. The tag is the count of launches before this one, plus 1: the CTAs read the count after their PDL
// wait (the previous launch on the stream is then complete), and the last CTA to be done advances it. So the
// state, zeroed once when allocated, needs no memset per launch; a CUDA graph that zeroes it once per replay
// (a captured allocation) starts each replay at tag 1 with every slot stale.
//
// Against a barrier with a counter (an atomic arrival, release and acquire fences, a poll of the generation,
// then the loads of the values), the values' own stores are the signal: one round trip through L2 between the
// last CTA's values and everyone's reads, instead of three or four.
//
// NVIDIA only (the copy-engine kernel's fused epilogue is its one user).
#include "common/platform.cuh"

namespace fp8dk {

#if defined(FP8DK_NVIDIA)
// The state: the launch count at word 0, the CTAs done at word 32 (another 128-byte line), then the slots.
constexpr int kExchangeStateWords = 64;

struct GridExchange {
  unsigned* state;
  unsigned long long* slots;  // the values, [CTA][value index]: the layout is the caller's
  unsigned tag;

  // Read by every thread that publishes or collects, after the PDL wait.
  FP8DK_DEVICE explicit GridExchange(unsigned* words) {
    state = words;
    slots = reinterpret_cast<unsigned long long*>(words + kExchangeStateWords);
    unsigned count;
    asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(count) : "l"(state) : "memory");
    tag = count + 1;
  }

  FP8DK_DEVICE void publish(int slot, float value) const {
    const unsigned long long word = static_cast<unsigned long long>(tag) << 32 | float_as_uint(value);
    asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(slots + slot), "l"(word) : "memory");
  }

  static FP8DK_DEVICE unsigned tag_of(unsigned long long word) { return static_cast<unsigned>(word >> 32); }

  FP8DK_DEVICE unsigned long long load(int slot) const {
    unsigned long long word;
    asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(word) : "l"(slots + slot) : "memory");
    return word;
  }

  // Polls `slot` until it holds this launch's value, with a short sleep between polls.
  FP8DK_DEVICE float poll(int slot) const {
    unsigned long long word = load(slot);
    while (tag_of(word) != tag) {
      __nanosleep(100);
      word = load(slot);
    }
    return uint_as_float(static_cast<unsigned>(word));
  }

  // A slot's value as a copy of it holds it (e.g. a bulk copy of the slots into shared memory), or, where the
  // copy predates its publication, as polled.
  FP8DK_DEVICE float value_of(unsigned long long copied, int slot) const {
    return tag_of(copied) == tag ? uint_as_float(static_cast<unsigned>(copied)) : poll(slot);
  }

  // Waits until slot `first + i * stride` is published for every i < count, polled by one warp (`lane`): the
  // CTA then reads all slots at once, instead of all its threads polling the L2 that the CTAs still streaming
  // need. A lane's slots are polled together (one round trip per poll for all of them).
  FP8DK_DEVICE void wait_for(int first, int stride, int count, int lane) const {
    constexpr int kPolls = 8;
    for (int i0 = lane; i0 < count; i0 += 32 * kPolls) {
      int slot[kPolls];
      unsigned long long word[kPolls];
#pragma unroll
      for (int j = 0; j < kPolls; ++j) {
        slot[j] = first + (i0 + 32 * j < count ? i0 + 32 * j : i0) * stride;
        word[j] = load(slot[j]);
      }
      for (;;) {
        bool published = true;
#pragma unroll
        for (int j = 0; j < kPolls; ++j) published = published && tag_of(word[j]) == tag;
        if (published) break;
        __nanosleep(100);
#pragma unroll
        for (int j = 0; j < kPolls; ++j)
          if (tag_of(word[j]) != tag) word[j] = load(slot[j]);
      }
    }
  }

  // One thread per CTA, once its CTA has collected everything: the last of `ctas` advances the launch count.
  FP8DK_DEVICE void retire(unsigned ctas) const {
    if (atomicAdd(state + 32, 1u) == ctas - 1) {
      asm volatile("st.relaxed.gpu.global.u32 [%0], 0;" ::"l"(state + 32) : "memory");
      asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(state), "r"(tag) : "memory");
    }
  }
};
#endif

}  // namespace fp8dk
