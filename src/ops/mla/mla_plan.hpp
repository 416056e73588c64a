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
  // 16 (xqa); trtllm-gen: kHopperRows (the wide tile), or kNarrowRows / kNarrow32Rows where a
  // group's rows fit the narrow tile (32: 16-bit KV).
  int rows_per_cta = mla_const::kRowsPerCta;
  int tile_tokens = mla_const::kTileTokens;  // the split granule: 32 (xqa), kHopperTile (trtllm-gen)
};

int mla_row_blocks(const MlaShape& s);   // per group: ceil(rows_per_group / rows_per_cta)
int64_t mla_base_ctas(const MlaShape& s);  // batch x groups x row blocks, before splitting

struct MlaSplit {
  int splits = 1;
  int tokens_per_split = 1;
};
// Splits that fill `slots` CTA slots (the decode family's choose_splits), rounded to the
// kernel's tiles (s.tile_tokens).
MlaSplit mla_plan_splits(const MlaShape& s, int slots);
// How the splits merge (MlaParams::split_pass): by a combine launch spread over many CTAs
// wherever there are splits, or (ATTNJIT_MLA_COMBINE=0) by the attention pass's last CTA of
// each row block. The last CTA merges its row block's partials (splits x rows x 514 floats)
// alone, at one SM's share of L2 bandwidth; the combine launch was as fast or faster at every
// measured shape with 2 or more splits, 3.4-5.5x at one request (docs/PERFORMANCE.md,
// fifteenth session). ATTNJIT_MLA_COMBINE=1 / 0 forces one way.
bool mla_combine_pays(int splits);
// Semaphore bytes at the workspace's start (rounded to 256), then the partials of `splits`.
size_t mla_semaphore_bytes(const MlaShape& s);
size_t mla_workspace_need(const MlaShape& s, int splits);

struct MlaPlan {
  spec::KernelSpec spec;
  MlaParams params{};
  MlaShape shape;
  size_t workspace_bytes = 0;  // what the caller's workspace_buffer holds
  void* workspace = nullptr;   // its data
};
MlaPlan plan_mla(const MlaArgs& args, const spec::Arch& arch);
// The wgmma kernel's rows per CTA for rows_per_group rows a group: the narrow tile (rows in
// wgmma's N) where they fit it, else the wide one. ATTNJIT_MLA_NARROW=0 keeps the wide tile
// everywhere (a measuring knob: both tiles are in every wgmma kernel).
int mla_hopper_rows(int rows_per_group, bool fp8_kv);
// Whether the wide tile runs in 32-token tiles (spec::feature::kTile32) for this shape.
bool mla_wide_tile32(const MlaShape& s, bool fp8_kv);
// Whether the wide tile runs the flat schedule (spec::feature::kFlat): parts of equal work,
// each a contiguous run of the batch's tiles across request boundaries, split requests
// merged by their last piece. ATTNJIT_MLA_FLAT=1 / 0: wherever the dense wide tile runs, or
// never; by default never: on the H100 it measured 0.88-0.99x of the split schedule at 128
// heads and large batches, and far slower where a request spans many parts (a merge of many
// pieces by one CTA): each CTA pays a piece's start (Q, the first tiles) two or three times
// (docs/PERFORMANCE.md, thirty-seventh session).
bool mla_wide_flat(const MlaShape& s);
// The flat launch's parts (gridDim.y): the CTA slots over the row blocks, at most what
// `workspace_bytes` holds (mla_flat_workspace_need); 0 where not even one fits. (With fewer
// units than parts the last parts are empty: MlaFlatSplit gives the first parts one unit each.)
int mla_flat_parts(const MlaShape& s, int slots, size_t workspace_bytes);
int mla_flat_overhead(const MlaShape& s);  // a request's fixed cost in tiles (128 tokens' worth)
// Semaphores, then (batch + parts) x row blocks partial blocks (slot b + part of request b).
size_t mla_flat_workspace_need(const MlaShape& s, int parts);
spec::KernelSpec mla_prewarm_spec(const MlaArgs& args, const spec::Arch& arch);

// The wgmma kernel's dense KV as a TMA tensor map in plan.params.kv_map (kv_tma = 1), where
// the plan took trtllm-gen for a dense call and the cache's layout allows one; otherwise (or
// with ATTNJIT_MLA_TMA=0, 16-bit KV only) kv_tma = 0 and the kernel copies rows with cp.async.
// Dense fp8 always gets its map (plan_mla sent views TMA cannot describe to xqa). Takes the
// driver: call it at launch, after plan_mla.
void mla_set_kv_map(const MlaArgs& args, MlaPlan& plan);
// Whether TMA can describe the cache view of these strides (elements): rows and pages
// that do not overlap (the 16-byte rules plan_mla checks for every view).
bool mla_kv_tma_describable(int64_t stride_page, int64_t stride_tok, int page_size);

}  // namespace attnjit::ops
