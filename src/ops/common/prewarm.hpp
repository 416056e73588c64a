// Prewarm helpers every op shares: the target arch, and compiling (or fetching)
// a spec, also loading it on this GPU when no arch was given.
#pragma once

#include <string>

#include "attnjit/runtime.hpp"
#include "spec/kernel_spec.hpp"

namespace attnjit::ops {

// The arch to prewarm for: `arch` when given, else the current GPU's (kNoDevice
// without one).
spec::Arch prewarm_arch(const std::string& arch);
// Compiles (or fetches) the spec; with no arch given it is for this GPU, so the
// kernel is also loaded on the current device: a launch inside a CUDA-graph
// capture then finds it. Returns the kernel's name.
std::string prewarm_spec(Runtime& rt, const spec::KernelSpec& spec, const std::string& arch);

}  // namespace attnjit::ops
