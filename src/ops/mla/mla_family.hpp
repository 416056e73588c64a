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
  int stages = 2;      // cp.async KV tiles in flight + being computed (fp8 KV: 4)
  int tile = 32;       // KV tokens per tile (the split granule)
  int rows = 16;       // head rows per CTA
  int kv_elem_bytes = 2;  // 1: fp8 KV, widened to fp16 in registers (xqa) or in shared memory (wgmma)
  int kv_row_bytes = 0;   // a shared-memory KV row: 576 elements + 16 bytes of padding
  int smem_bytes = 0;  // mirrors MlaTraits::kSmemBytes
  int smem_limit = 0;  // the arch's opt-in maximum per block
  int min_blocks = 1;
  bool hopper = false;  // the trtllm-gen (wgmma, sm_90a) kernel: MlaHopperTraits
  int ring_slots = 0;   // its narrow tile: the producer's ring of 64 x 64 blocks (else 0)
  bool flat = false;    // its wide tile's flat schedule (spec::feature::kFlat)
};
MlaTiling mla_tiling(const spec::KernelSpec& spec);

// The output dtype of a query dtype: the query's, and bf16 for an fp8 query (FlashInfer's
// trtllm-gen and xqa MLA write bf16 there).
inline DType mla_out_dtype(DType q) { return q == DType::kFloat8E4M3 ? DType::kBFloat16 : q; }

bool mla_can_implement(const spec::KernelSpec& spec, const spec::Arch& arch, std::string* why);
render::RenderedUnit mla_generate(const spec::KernelSpec& spec);
const render::BackendTable& mla_backend_table();

}  // namespace attnjit::ops
