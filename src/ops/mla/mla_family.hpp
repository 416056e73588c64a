// The mla family's plug-in pieces: can_implement, the generator (spec ->
// MlaDecode<Traits> TU and launch metadata), the tiling both share, the backend table.
#pragma once

#include <string>

#include "render/family.hpp"
#include "spec/kernel_spec.hpp"

namespace attnjit::ops {

// Tuning derived from the spec (mirrors MlaTraits; the TU static_asserts it).
struct MlaTiling {
  int warps = 4;
  int stages = 2;      // cp.async KV tiles in flight + being computed
  int tile = 32;       // KV tokens per tile (the split granule)
  int rows = 16;       // head rows per CTA
  int smem_bytes = 0;  // mirrors MlaTraits::kSmemBytes
  int smem_limit = 0;  // the arch's opt-in maximum per block
  int min_blocks = 1;
};
MlaTiling mla_tiling(const spec::KernelSpec& spec);

bool mla_can_implement(const spec::KernelSpec& spec, const spec::Arch& arch, std::string* why);
render::RenderedUnit mla_generate(const spec::KernelSpec& spec);
const render::BackendTable& mla_backend_table();

}  // namespace attnjit::ops
