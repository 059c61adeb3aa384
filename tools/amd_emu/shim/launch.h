// Stand-in for common/launch.h in the emulator build (tools/amd_emu/build.py maps that path here with clang's
// -ivfsoverlay): the driver's launches take the launchers' LaunchShape as host C++, without torch or HIP.
// Only what the driver needs: dim3, LaunchShape and to_dim3, as in common/launch.h.
#pragma once

#include "common/plan.h"

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

namespace fp8dk {

struct LaunchShape {
  dim3 grid, block;
  int smem_bytes = 0;
  dim3 cluster = dim3(1, 1, 1);
};

inline dim3 to_dim3(Dims d) { return dim3(d.x, d.y, d.z); }

}  // namespace fp8dk
