// FIA's decode rows (Q_S = 1) on the decode family's kernel (GqaDecode, split-KV):
// which calls it serves, their spec and DecodeParams, and the launch.
#pragma once

#include <optional>
#include <vector>

#include "attnjit/fia.hpp"
#include "decode/decode_params.cuh"
#include "driver/cuda_driver.hpp"
#include "ops/decode/decode_launch.hpp"
#include "ops/fia/fia_plan.hpp"
#include "spec/kernel_spec.hpp"

namespace attnjit::ops {

// How K/V reach the decode kernel.
enum class FiaDecodeKv {
  kPaged,       // FIA's block_table is the page table (block_size is the page size)
  kContiguous,  // BSH/BSND/BNSD K/V at any batch and KV_S: b * stride_b + s * stride_s (no table)
};

struct FiaDecodePlan {
  spec::KernelSpec spec;
  DecodeParams params{};  // everything but seq_lens and the splits
  DecodeShape shape;
  FiaDecodeKv kv = FiaDecodeKv::kContiguous;
  // Per-batch KV lengths (seq_lens) when they differ; empty: every batch has params.kv_len.
  std::vector<unsigned> ragged_lens;
};

// The decode plan for a call plan_fia accepted (plan is its result for a), or
// nullopt when the decode kernel does not serve its features: Q_S > 1 or TND,
// atten_mask, pse_shift, softmax_lse_flag (the decode kernel's LSE is base 2 and
// -inf for an empty row; FIA's is natural and +inf), unequal or unserved head
// dims, a block table whose rows are not contiguous, or a spec the decode family
// cannot implement on arch.
// Depends on shapes and the length lists only, never on data or capture state, so
// prewarm sees the spec the call launches.
std::optional<FiaDecodePlan> plan_fia_decode(const FiaPlan& plan, const FiaArgs& a, const spec::Arch& arch);

// The ragged lengths on the stream (one table per device and stream, kept for the
// process), then the decode family's split-KV planning and launch.
void launch_fia_decode(Runtime& rt, FiaDecodePlan& d, int device, CUstream stream);

}  // namespace attnjit::ops
