// Both MLA ops' launch (batch_decode_mla, FIA's query_rope path): the attention pass, then,
// where it has splits (mla_combine_pays), the combine pass that merges them.
#pragma once

#include <cuda.h>

#include "mla/mla_params.cuh"
#include "ops/common/launch.hpp"
#include "ops/mla/mla_plan.hpp"
#include "runtime/kernel_registry.hpp"

namespace attnjit::ops {

// p.num_splits, tokens_per_split, workspace and semaphores are set; grid is the attention
// pass's (splits, row groups, batch). Sets p.split_pass.
void launch_mla_passes(const runtime::LoadedKernel& k, const Grid& grid, CUstream stream, bool pdl, MlaParams& p,
                       const MlaShape& shape);
// The flat schedule's launch (spec::feature::kFlat): parts x row blocks CTAs over the
// caller's workspace (plan.workspace, holding mla_flat_workspace_need(parts)), after the
// semaphores are zeroed.
void launch_mla_flat(const runtime::LoadedKernel& k, CUstream stream, bool pdl, MlaPlan& plan, int parts);

}  // namespace attnjit::ops
