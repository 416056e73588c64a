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
// The same, with the SMs a kernel choice is made for: the current GPU's when no arch is
// given (so the kernel is the one a launch there takes), else 0 (the op's nominal count).
struct PrewarmTarget {
  spec::Arch arch;
  int sms = 0;
};
PrewarmTarget prewarm_target(const std::string& arch);
// Compiles (or fetches) the spec; with no arch given it is for this GPU, so the
// kernel is also loaded on the current device: a launch inside a CUDA-graph
// capture then finds it. Returns the kernel's name.
std::string prewarm_spec(Runtime& rt, const spec::KernelSpec& spec, const std::string& arch);

}  // namespace attnjit::ops
