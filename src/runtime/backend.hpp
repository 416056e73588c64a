// Backend selection by SM arch: `auto` picks, an explicit choice that cannot
// serve the spec on this arch is an error (never a silent fallback).
#pragma once

#include <string>

#include "spec/kernel_spec.hpp"

namespace attnjit::runtime {

enum class BackendChoice { kAuto, kXqa, kTrtllmGen };

BackendChoice parse_backend_choice(const std::string& text);  // "auto", "xqa", "trtllm-gen"
const char* to_string(BackendChoice c);

// True when `backend` has kernels for this spec's family and features on `arch`.
bool backend_supports(spec::Backend backend, const spec::KernelSpec& spec, std::string* why);

// Fills spec.backend. Throws Error(kUnsupported) naming the backend, arch and reason.
void select_backend(BackendChoice choice, spec::KernelSpec& spec);

}  // namespace attnjit::runtime
