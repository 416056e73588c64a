// The decode family's plug-in pieces: can_implement, the generator (spec ->
// GqaDecode<Traits> TU and launch metadata) and the tiling both share.
#pragma once

#include <string>

#include "render/family.hpp"
#include "spec/kernel_spec.hpp"

namespace attnjit::ops {

// Tuning derived from the spec (mirrors DecodeTraits; the TU static_asserts it).
struct DecodeTiling {
  int warps = 4;
  int stages = 3;
  int smem_bytes = 0;  // dynamic shared memory per CTA (mirrors DecodeTraits::kSmemBytes)
  int smem_limit = 0;  // the arch's opt-in maximum per block
  int tile = 16;       // tokens per warp tile
  bool lazy_rescale = false;
  int min_blocks = 1;  // mirrors DecodeTraits::kMinBlocks (__launch_bounds__)
};
DecodeTiling decode_tiling(const spec::KernelSpec& spec);

bool decode_can_implement(const spec::KernelSpec& spec, const spec::Arch& arch, std::string* why);
render::RenderedUnit decode_generate(const spec::KernelSpec& spec);
// The decode kernels' backend table (the xqa family renders the same kernel).
const render::BackendTable& decode_backend_table();

}  // namespace attnjit::ops
