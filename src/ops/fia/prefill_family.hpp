// The prefill kernel family (FIA): can_implement, tiling and the generator.
#pragma once

#include <string>

#include "ops/fia/fia_plan.hpp"
#include "render/family.hpp"
#include "spec/kernel_spec.hpp"

namespace attnjit::ops {

struct PrefillTiling {
  int kv_tile = 64;   // KV tokens per main-loop step
  int smem_bytes = 0;
  int smem_limit = 0;
};
PrefillTiling prefill_tiling(const spec::KernelSpec& s);

bool prefill_can_implement(const spec::KernelSpec& s, const spec::Arch& arch, std::string* why);
render::RenderedUnit prefill_generate(const spec::KernelSpec& s);
const render::BackendTable& prefill_backend_table();

}  // namespace attnjit::ops
