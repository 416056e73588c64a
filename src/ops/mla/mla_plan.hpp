// batch_decode_mla's host planning: validation -> KernelSpec + MlaParams, and the
// split-KV plan and workspace layout, apart from the launch so CPU tests reach them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "attnjit/mla.hpp"
#include "mla/mla_params.cuh"
#include "spec/kernel_spec.hpp"

namespace attnjit::ops {

struct MlaShape {
  int batch = 1;
  int num_heads = 1;
  int q_len = 1;
  int range = 1;       // tokens a request's CTAs split: max_seq_len, or top_k when sparse
  bool sparse = false;
};

int mla_row_blocks(const MlaShape& s);   // per group: ceil(rows_per_group / 16)
int64_t mla_base_ctas(const MlaShape& s);  // batch x groups x row blocks, before splitting

struct MlaSplit {
  int splits = 1;
  int tokens_per_split = 1;
};
// Splits that fill `slots` CTA slots (the decode family's choose_splits), rounded to tiles.
MlaSplit mla_plan_splits(const MlaShape& s, int slots);
// Semaphore bytes at the workspace's start (rounded to 256), then the partials of `splits`.
size_t mla_semaphore_bytes(const MlaShape& s);
size_t mla_workspace_need(const MlaShape& s, int splits);

struct MlaPlan {
  spec::KernelSpec spec;
  MlaParams params{};
  MlaShape shape;
  size_t workspace_bytes = 0;  // what the caller's workspace_buffer holds
};
MlaPlan plan_mla(const MlaArgs& args, const spec::Arch& arch);
spec::KernelSpec mla_prewarm_spec(const MlaArgs& args, const spec::Arch& arch);

}  // namespace attnjit::ops
