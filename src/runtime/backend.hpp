// Backend resolution: one table per family (render::BackendTable, registered
// with the family). `auto` follows the table; an explicit choice that cannot
// serve the spec on its arch is an error, never a silent fallback.
#pragma once

#include <string>

#include "render/family.hpp"
#include "spec/kernel_spec.hpp"

namespace attnjit::runtime {

enum class BackendChoice { kAuto, kXqa, kTrtllmGen };

BackendChoice parse_backend_choice(const std::string& text);  // "auto", "xqa", "trtllm-gen"
const char* to_string(BackendChoice c);

// True when `backend` is available for the spec's family on its arch (a kernel
// for that arch exists and has run correctly on a GPU: the table's verified
// list) and the family's can_implement accepts the spec with that backend.
bool backend_supports(spec::Backend backend, const spec::KernelSpec& spec, std::string* why);

// What resolution picks, and why (for inspect and doctor).
struct BackendDecision {
  spec::Backend backend = spec::Backend::kXqa;
  std::string why;
};
// Resolves `choice` for `spec` (on spec.arch) against `family`'s table. Throws
// Error(kUnsupported) naming the backend, the spec and the reason.
BackendDecision decide_backend(const render::Family& family, BackendChoice choice, const spec::KernelSpec& spec);

// Fills spec.backend (the launch path: no allocation when the choice succeeds).
// Throws as decide_backend.
void select_backend(BackendChoice choice, spec::KernelSpec& spec);

}  // namespace attnjit::runtime
