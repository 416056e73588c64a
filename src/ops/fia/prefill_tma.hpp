// TMA tensor maps for the wgmma prefill kernel's K/V loads (contiguous K/V): built
// per launch from the call's pointers and strides.
#pragma once

#include <optional>

#include "attnjit/fia.hpp"
#include "driver/tensor_map.hpp"
#include "ops/fia/fia_plan.hpp"

namespace attnjit::ops {

// One of K or V as a 4-D map: the head dim innermost in boxes of 64 (one 128-byte
// swizzle span), then head, token and batch in rising stride order (TMA wants each
// stride to span the dimension below it), the token box the KV tile. dim_of[0..2]:
// the map dimension of the head, token and batch coordinates.
struct KvMapPlan {
  driver::TiledTensorMapDesc desc;
  int dim_of[3] = {};
};
// nullopt where TMA cannot take the tensor (strides not 16-byte multiples or
// overlapping, a misaligned base, a dtype other than fp16/bf16). Pure: no driver.
std::optional<KvMapPlan> plan_kv_map(const void* base, DType dtype, int head_dim, uint64_t heads, uint64_t tokens,
                                     uint64_t batch, long long sb, long long ss, long long sh, int kv_tile);

// Where the plan's kernel is the wgmma one over contiguous K/V, or paged K/V whose
// block_size whole KV tiles divide, and the strides suit TMA (16-byte multiples,
// rising), encodes p.k_map / p.v_map and sets p.kv_tma;
// else p.kv_tma = 0 and the kernel gathers with cp.async. ATTNJIT_PREFILL_TMA=0
// turns TMA off (a run-time switch: both paths are in every such kernel).
void prefill_set_kv_maps(const FiaPlan& plan, const FiaArgs& a, PrefillParams& p);

}  // namespace attnjit::ops
