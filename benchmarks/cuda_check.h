#pragma once
// CHECK(call): the standalone CUDA measurement tools' (stream_ceiling.cu, fence_under_flood.cu) check of a CUDA
// runtime call: on an error, the call, where it was and the runtime's message, then exit(1).
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CHECK(x)                                                                              \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)
