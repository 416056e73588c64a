// MLA inside FIA (query_rope/key_rope) on the mla family's kernel: the seed's
// constraints for the rope arguments, the spec and MlaParams from plan_fia's result,
// and the launch (a per-stream lengths table, runtime-owned split-KV scratch).
#pragma once

#include <optional>
#include <vector>

#include "attnjit/fia.hpp"
#include "driver/cuda_driver.hpp"
#include "mla/mla_params.cuh"
#include "ops/fia/fia_plan.hpp"
#include "ops/mla/mla_plan.hpp"
#include "spec/kernel_spec.hpp"

namespace attnjit::ops {

// query_rope or key_rope was given: the call is FIA's MLA.
bool fia_uses_mla(const FiaArgs& a);

// The rope constraints plan_fia checks before its general ones (it calls this first
// for a rope call): both or neither, the NZ format, the layouts, paged KV with
// block_size 16 or 128, and the arguments the seed's MLA does not take. Throws
// Error naming the argument.
void check_fia_mla_early(const FiaArgs& a);

struct FiaMlaPlan {
  spec::KernelSpec spec;
  MlaParams params{};  // all but seq_lens/q_lens (a table set at launch), the splits and the scratch
  MlaShape shape;      // range: the longest KV length (at least 1)
  // [kv lengths | query lengths], one per batch, when they are not all (KV_S', Q_S):
  // the launch uploads them; empty: params.kv_len and params.q_len hold for every batch.
  std::vector<int> lens;
};

// The MLA plan for a call plan_fia accepted (plan is its result for a), or nullopt
// without query_rope/key_rope. Checks the rest of the seed's rope constraints (N 32,
// 64 or 128, D 512 + 64, Q_S 1 to 16, key N = 1, the sparse rules, the rope tensors'
// shapes; value must be the key tensor itself), each refusal naming its argument.
// Shapes and length lists only: prewarm sees the spec the call launches.
std::optional<FiaMlaPlan> plan_fia_mla(const FiaPlan& plan, const FiaArgs& a, const spec::Arch& arch);

// The lengths table on the stream (when m.lens is set), the split plan from the
// loaded kernel's occupancy, the runtime's split-KV scratch, then the launch.
void launch_fia_mla(Runtime& rt, FiaMlaPlan& m, int device, CUstream stream);

}  // namespace attnjit::ops
