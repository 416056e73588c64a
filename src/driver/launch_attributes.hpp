// The cuLaunchKernelEx attributes of a LaunchConfig (thread block cluster, PDL), checked and
// assembled on the stack: separate from the launch so that CPU tests can see them.
#pragma once

#include <cuda.h>  // types only

#include "driver/cuda_driver.hpp"

namespace attnjit::driver {

constexpr int kMaxLaunchAttributes = 2;       // cluster dimension + programmatic serialization
constexpr unsigned kMaxPortableCluster = 8;   // blocks; any sm_90+ GPU runs this size
constexpr unsigned kMaxNonPortableCluster = 16;

// Fills `attrs` and returns how many it used. A cluster of {1,1,1} adds no attribute.
// Throws Error(kInvalidArgument) when a cluster dim is 0 or does not divide the grid's,
// or the cluster holds more than kMaxNonPortableCluster blocks. No allocation.
int launch_attributes(const LaunchConfig& cfg, CUlaunchAttribute (&attrs)[kMaxLaunchAttributes]);

}  // namespace attnjit::driver
