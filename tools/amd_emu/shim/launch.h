// Stand-in for common/launch.h in the emulator build (tools/amd_emu/build.py maps that path here with clang's
// -ivfsoverlay, so that common/row_chunk_grid.h -- the launchers' real grid planning -- compiles as host C++
// without torch or HIP). Only what row_chunk_grid.h needs: dim3 and LaunchShape, as in common/launch.h.
#pragma once

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

}  // namespace fp8dk
