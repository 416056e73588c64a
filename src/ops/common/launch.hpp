// Launch code shared by every family: a loaded kernel's metadata (threads,
// dynamic shared memory, cluster dims) plus the op's grid and by-value Params.
#pragma once

#include <fmt/format.h>

#include "attnjit/error.hpp"
#include "driver/cuda_driver.hpp"
#include "runtime/kernel_registry.hpp"

namespace attnjit::ops {

struct Grid {
  unsigned x = 1, y = 1, z = 1;
};

// Launches `k` with `params` passed by value (the kernel takes one
// `const __grid_constant__ Params`). No allocation.
template <class Params>
void launch_kernel(const runtime::LoadedKernel& k, const Grid& grid, CUstream stream, bool pdl, Params& params) {
  // The family registered its Params size; a launch with another type would hand
  // the kernel bytes it reads as something else.
  if (k.params_bytes != sizeof(Params))
    throw Error(ErrorCode::kInternal, fmt::format("launch: the kernel's family takes {}-byte Params, given {} bytes",
                                                  k.params_bytes, sizeof(Params)));
  if (k.launch.cluster[0] * k.launch.cluster[1] * k.launch.cluster[2] != 1)
    throw Error(ErrorCode::kUnsupported, "launch: thread-block clusters need the driver's cluster launch");
  driver::LaunchConfig cfg;
  cfg.grid[0] = grid.x;
  cfg.grid[1] = grid.y;
  cfg.grid[2] = grid.z;
  cfg.block[0] = static_cast<unsigned>(k.launch.threads);
  cfg.smem_bytes = static_cast<unsigned>(k.launch.smem_bytes);
  cfg.stream = stream;
  cfg.pdl = pdl;
  void* args[] = {&params};
  driver::launch(k.function, cfg, args);
}

}  // namespace attnjit::ops
