// batch_decode_mla: validate -> KernelSpec -> MlaParams -> split plan -> launch
// (FlashInfer trtllm_batch_decode_with_kv_cache_mla semantics).
#include "attnjit/mla.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "attnjit/error.hpp"
#include "ops/common/launch.hpp"
#include "ops/common/prewarm.hpp"
#include "ops/common/validate.hpp"
#include "ops/decode/decode_launch.hpp"
#include "ops/mla/mla_family.hpp"
#include "ops/mla/mla_launch.hpp"
#include "ops/mla/mla_plan.hpp"
#include "runtime/backend.hpp"
#include "runtime/kernel_registry.hpp"
#include "util/env_knob.hpp"

namespace attnjit {

namespace {
constexpr int kMaxQLen = 16;
constexpr int kMaxHeads = 128;
constexpr int kMaxTopK = 1 << 20;
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

namespace ops {

int mla_row_blocks(const MlaShape& s) {
  const int64_t rows = s.sparse ? s.num_heads : int64_t(s.q_len) * s.num_heads;
  return static_cast<int>(ceil_div(rows, s.rows_per_cta));
}

int64_t mla_base_ctas(const MlaShape& s) {
  return int64_t(s.batch) * (s.sparse ? s.q_len : 1) * mla_row_blocks(s);
}

MlaSplit mla_plan_splits(const MlaShape& s, int slots) {
  MlaSplit plan;
  const int len = std::max(s.range, 1);
  plan.splits = std::min(choose_splits(mla_base_ctas(s), len, slots), mla_const::kMaxSplits);
  // ATTNJIT_MLA_SPLITS=N forces the count (a measuring knob), within what the workspace holds
  // (mla_workspace_bytes: <= 4 waves of slots, >= 256 tokens a split).
  if (const auto forced = util::env_knob("ATTNJIT_MLA_SPLITS", 1, mla_const::kMaxSplits, "1 to 256"))
    plan.splits = static_cast<int>(std::min<int64_t>(
        {*forced, ceil_div(4 * int64_t(slots), mla_base_ctas(s)), ceil_div(len, kMinTokensPerSplit), mla_const::kMaxSplits}));
  const int tile = s.tile_tokens;
  plan.tokens_per_split = static_cast<int>(ceil_div(ceil_div(len, plan.splits), tile) * tile);
  plan.splits = static_cast<int>(ceil_div(len, plan.tokens_per_split));
  return plan;
}

int mla_hopper_rows(int rows_per_group, bool fp8_kv) {
  const bool narrow = util::env_knob("ATTNJIT_MLA_NARROW", 0, 1, "0 or 1").value_or(1) == 1;
  if (narrow && rows_per_group <= mla_const::kNarrowRows) return mla_const::kNarrowRows;
  // 17-32 rows: the 32-row narrow tile with 16-bit KV (fp8's widening in registers is the 16-row tile's).
  if (narrow && !fp8_kv && rows_per_group <= mla_const::kNarrow32Rows) return mla_const::kNarrow32Rows;
  return mla_const::kHopperRows;
}

bool mla_wide_tile32(const MlaShape& s, bool fp8_kv) {
  // The 64-row tile in 32-token tiles, four buffers, where one row block holds the whole group
  // (no second CTA reads the same KV from L2, so the tile waits on its loads): dense 16-bit KV
  // only. H100, h64: B16 L8K 1.018x, B2 L16K 1.064x of the 64-token tile; but a launch of few
  // CTAs is latency-bound and wants fewer, longer tiles (h16 B1 L4K in the wide tile: 0.85x),
  // so only where the splits can give at least kMinCtas CTAs (a split holds >= 256 tokens).
  constexpr int64_t kMinCtas = 64;
  // (Where a request's rows take several row blocks, 128 heads, 32-token tiles lost: 0.76-0.83x
  // on the H100, PERFORMANCE.md thirty-fifth session.)
  const bool fits = s.rows_per_cta == mla_const::kHopperRows && !s.sparse && !fp8_kv && mla_row_blocks(s) == 1;
  // ATTNJIT_MLA_TILE32=0/1 (a measuring knob): never, or wherever it fits.
  if (const auto knob = util::env_knob("ATTNJIT_MLA_TILE32", 0, 1, "0 or 1")) return fits && *knob == 1;
  return fits && mla_base_ctas(s) * ceil_div(std::max(s.range, 1), kMinTokensPerSplit) >= kMinCtas;
}

bool mla_wide_flat(const MlaShape& s) {
  const bool fits = s.rows_per_cta == mla_const::kHopperRows && !s.sparse;
  return fits && util::env_knob("ATTNJIT_MLA_FLAT", 0, 1, "0 or 1").value_or(0) == 1;
}

int mla_flat_overhead(const MlaShape& s) { return 128 / s.tile_tokens; }

int mla_flat_parts(const MlaShape& s, int slots, size_t workspace_bytes) {
  const int64_t part_bytes = int64_t(mla_row_blocks(s)) * mla_partial_floats(s.rows_per_cta) * sizeof(float);
  const int64_t room = (int64_t(workspace_bytes) - int64_t(mla_semaphore_bytes(s))) / part_bytes - s.batch;
  return static_cast<int>(std::max<int64_t>(0, std::min({std::max<int64_t>(1, slots / mla_row_blocks(s)), room, int64_t(65535)})));
}

size_t mla_flat_workspace_need(const MlaShape& s, int parts) {
  return mla_semaphore_bytes(s) + static_cast<size_t>(int64_t(s.batch) + parts) * mla_row_blocks(s) *
                                      mla_partial_floats(s.rows_per_cta) * sizeof(float);
}

bool mla_combine_pays(int splits) {
  if (splits <= 1) return false;
  const auto knob = util::env_knob("ATTNJIT_MLA_COMBINE", 0, 1, "0 or 1");
  return knob ? *knob == 1 : true;
}

void launch_mla_passes(const runtime::LoadedKernel& k, const Grid& grid, CUstream stream, bool pdl, MlaParams& p,
                       const MlaShape& shape) {
  const bool combine = mla_combine_pays(p.num_splits);
  p.split_pass = combine ? 1 : 0;
  // The last-CTA merge counts arrivals in the workspace's first bytes, whose extent follows
  // this call's CTAs: a call of another shape may have left partials there. Zeroed in stream
  // order (capture-safe); the default combine launch needs no semaphores.
  if (!combine && p.num_splits > 1)
    driver::memset_d32_async(reinterpret_cast<CUdeviceptr>(p.semaphores), 0u, static_cast<size_t>(mla_base_ctas(shape)),
                             stream);
  launch_kernel(k, grid, stream, pdl, p);
  if (!combine) return;
  // The combine pass: the same entry (its split_pass 2 branch), one row a CTA (a single
  // long request, h128 B1: 2 row blocks of 64 rows, gives 128 CTAs), only the rows a row
  // block can hold (16 heads in the 64-row tile: 16 CTAs, not 64).
  // With few splits a CTA merges several rows (mla_combine_rows): h64 B16 at 8 splits launched
  // 1024 one-row CTAs, each a few dependent latencies long, 20 us on the H100 (ncu).
  const int rows = std::min(shape.rows_per_cta, p.rows_per_group);
  int per_cta = mla_combine_rows(p.num_splits, mla_combine_batch(k.launch.threads));
  // ATTNJIT_MLA_COMBINE_ROWS=1 (a measuring knob): at most that many rows a CTA (1: one).
  if (const auto most = util::env_knob("ATTNJIT_MLA_COMBINE_ROWS", 1, 8, "1, 2, 4 or 8"))
    while (per_cta > *most) per_cta /= 2;
  // ...but not below a CTA an SM: where the rows are few, fewer and longer CTAs lose (H100,
  // h128 B1 L4K: 128 one-row CTAs -> 64 two-row ones, 0.92x).
  while (per_cta > 1 && int64_t((rows + per_cta - 1) / per_cta) * grid.y * grid.z < k.num_sms) per_cta /= 2;
  const Grid cgrid{static_cast<unsigned>((rows + per_cta - 1) / per_cta), grid.y, grid.z};
  runtime::LoadedKernel kc = k;
  kc.launch.threads = mla_combine_threads(k.launch.threads, int64_t(cgrid.x) * cgrid.y * cgrid.z, k.num_sms);
  kc.launch.smem_bytes = mla_combine_smem_bytes(kc.launch.threads, per_cta);
  MlaParams pc = p;
  pc.split_pass = 2;
  pc.combine_rows = per_cta;
  launch_kernel(kc, cgrid, stream, pdl, pc);
}

void launch_mla_flat(const runtime::LoadedKernel& k, CUstream stream, bool pdl, MlaPlan& plan, int parts) {
  MlaParams& p = plan.params;
  unsigned char* ws = static_cast<unsigned char*>(plan.workspace);
  p.semaphores = reinterpret_cast<unsigned*>(ws);
  p.workspace = reinterpret_cast<float*>(ws + mla_semaphore_bytes(plan.shape));
  p.num_splits = 1;  // (the split plan's fields: unused by the flat schedule)
  p.tokens_per_split = plan.shape.tile_tokens;
  p.split_pass = 0;
  p.flat_overhead = mla_flat_overhead(plan.shape);
  // The split requests' last pieces merge in place, counted per (request, row block); a call
  // of another shape may have left counts there.
  driver::memset_d32_async(reinterpret_cast<CUdeviceptr>(p.semaphores), 0u, static_cast<size_t>(mla_base_ctas(plan.shape)),
                           stream);
  const Grid grid{static_cast<unsigned>(p.row_blocks), static_cast<unsigned>(parts), 1u};  // row blocks adjacent
  launch_kernel(k, grid, stream, pdl, p);
}

size_t mla_semaphore_bytes(const MlaShape& s) {
  return static_cast<size_t>(ceil_div(mla_base_ctas(s) * 4, 256) * 256);
}

size_t mla_workspace_need(const MlaShape& s, int splits) {
  if (splits <= 1) return 0;
  return mla_semaphore_bytes(s) +
         static_cast<size_t>(mla_base_ctas(s)) * splits * mla_partial_floats(s.rows_per_cta) * sizeof(float);
}

MlaPlan plan_mla(const MlaArgs& a, const spec::Arch& arch) {
  require_backend(a.backend);
  ATTNJIT_REQUIRE(a.qk_nope_head_dim == 128, "qk_nope_head_dim", "128", std::to_string(a.qk_nope_head_dim));
  ATTNJIT_REQUIRE(a.kv_lora_rank == 512, "kv_lora_rank", "512", std::to_string(a.kv_lora_rank));
  ATTNJIT_REQUIRE(a.qk_rope_head_dim == 64, "qk_rope_head_dim", "64", std::to_string(a.qk_rope_head_dim));

  require_defined(a.query, "query");
  require_rank(a.query, "query", 4, "[batch, q_len_per_request, num_heads, 576]");
  require_dtype(a.query, "query", {DType::kBFloat16, DType::kFloat16, DType::kFloat8E4M3});
  require_dim(a.query, "query", 3, 576, "head_dim_qk = kv_lora_rank + qk_rope_head_dim");
  ATTNJIT_REQUIRE(a.query.shape[0] <= 65535, "query", "batch <= 65535", a.query.shape_string());
  const int batch = static_cast<int>(a.query.shape[0]);
  const int64_t q_len = a.query.shape[1], heads = a.query.shape[2];
  ATTNJIT_REQUIRE(q_len <= kMaxQLen, "query", fmt::format("q_len_per_request 1 to {}", kMaxQLen),
                  fmt::format("{} in {}", q_len, a.query.shape_string()));
  ATTNJIT_REQUIRE(heads <= kMaxHeads, "query", fmt::format("num_heads 1 to {}", kMaxHeads),
                  fmt::format("{} in {}", heads, a.query.shape_string()));

  require_defined(a.kv_cache, "kv_cache");
  ATTNJIT_REQUIRE(a.kv_cache.rank == 3 || a.kv_cache.rank == 4, "kv_cache",
                  "[num_pages, page_size, 576] or [num_pages, 1, page_size, 576]", a.kv_cache.shape_string());
  if (a.kv_cache.rank == 4) require_dim(a.kv_cache, "kv_cache", 1, 1, "1 in [num_pages, 1, page_size, 576]");
  // FlashInfer's trtllm-gen pairs: 16-bit KV with the query's dtype, fp8 KV with a 16-bit or an fp8 query.
  const bool fp8_q = a.query.dtype == DType::kFloat8E4M3;
  ATTNJIT_REQUIRE(a.kv_cache.dtype == a.query.dtype || a.kv_cache.dtype == DType::kFloat8E4M3, "kv_cache",
                  fp8_q ? std::string("dtype fp8_e4m3 (an fp8_e4m3 query needs an fp8_e4m3 KV cache)")
                        : fmt::format("dtype {} (the query's) or fp8_e4m3", dtype_name(a.query.dtype)),
                  fmt::format("dtype {}", dtype_name(a.kv_cache.dtype)));
  const int kr = a.kv_cache.rank;
  require_dim(a.kv_cache, "kv_cache", kr - 1, 576, "kv_lora_rank + qk_rope_head_dim");
  const int64_t page_size = a.kv_cache.shape[kr - 2];
  ATTNJIT_REQUIRE(page_size == 16 || page_size == 32 || page_size == 64 || page_size == 128, "kv_cache",
                  "page_size 16, 32, 64 or 128", fmt::format("{} in {}", page_size, a.kv_cache.shape_string()));

  require_defined(a.block_tables, "block_tables");
  require_rank(a.block_tables, "block_tables", 2, "[batch, max_pages_per_seq]");
  require_dtype(a.block_tables, "block_tables", {DType::kInt32});
  require_dim(a.block_tables, "block_tables", 0, batch, "batch");
  // Rows may be apart (a column slice of a wider table): the kernels step them by stride[0].
  require_inner_contiguous(a.block_tables, "block_tables");
  require_aligned(a.block_tables, "block_tables", 4);
  ATTNJIT_REQUIRE(a.block_tables.shape[1] <= kMaxDecodeSeqLen / page_size, "block_tables",
                  fmt::format("max_pages_per_seq * page_size <= {}", kMaxDecodeSeqLen),
                  fmt::format("max_pages_per_seq {}", a.block_tables.shape[1]));
  const int64_t max_tokens = a.block_tables.shape[1] * page_size;
  require_defined(a.seq_lens, "seq_lens");
  require_rank(a.seq_lens, "seq_lens", 1, "[batch]");
  require_dtype(a.seq_lens, "seq_lens", {DType::kInt32, DType::kUInt32});
  require_dim(a.seq_lens, "seq_lens", 0, batch, "batch");
  require_contiguous(a.seq_lens, "seq_lens");
  require_aligned(a.seq_lens, "seq_lens", 4);
  ATTNJIT_REQUIRE(a.max_seq_len >= 1 && a.max_seq_len <= max_tokens, "max_seq_len",
                  fmt::format("1 to max_pages_per_seq * page_size = {}", max_tokens), std::to_string(a.max_seq_len));

  const bool sparse = a.sparse_mla_top_k > 0;
  ATTNJIT_REQUIRE(a.sparse_mla_top_k >= 0 && a.sparse_mla_top_k <= kMaxTopK, "sparse_mla_top_k",
                  fmt::format("0 (dense) to {}", kMaxTopK), std::to_string(a.sparse_mla_top_k));
  if (sparse) {
    require_defined(a.indices, "indices");
    require_rank(a.indices, "indices", 3, "[batch, q_len_per_request, sparse_mla_top_k] int32");
    require_dtype(a.indices, "indices", {DType::kInt32});
    require_dim(a.indices, "indices", 0, batch, "batch");
    require_dim(a.indices, "indices", 1, q_len, "q_len_per_request");
    require_dim(a.indices, "indices", 2, a.sparse_mla_top_k, "sparse_mla_top_k");
    require_inner_contiguous(a.indices, "indices");  // the kernels step batch and query token by their strides
    require_aligned(a.indices, "indices", 4);
  } else {
    ATTNJIT_REQUIRE(!present(a.indices), "indices", "none without sparse_mla_top_k > 0", a.indices.shape_string());
  }

  require_defined(a.out, "out");
  require_rank(a.out, "out", 4, "[batch, q_len_per_request, num_heads, 512] (required: the C++ API does not allocate)");
  // The query's dtype; bf16 for an fp8 query, as FlashInfer writes.
  const DType out_dtype = mla_out_dtype(a.query.dtype);
  ATTNJIT_REQUIRE(a.out.dtype == out_dtype, "out",
                  fp8_q ? std::string("dtype bf16 (the output of an fp8_e4m3 query)")
                        : fmt::format("dtype {} (the query's)", dtype_name(out_dtype)),
                  fmt::format("dtype {}", dtype_name(a.out.dtype)));
  for (int d = 0; d < 3; ++d) require_dim(a.out, "out", d, a.query.shape[d], "as query");
  require_dim(a.out, "out", 3, 512, "kv_lora_rank");
  require_inner_contiguous(a.query, "query");
  require_aligned(a.query, "query", 16);
  require_inner_contiguous(a.kv_cache, "kv_cache");
  require_aligned(a.kv_cache, "kv_cache", 16);
  require_inner_contiguous(a.out, "out");
  require_aligned(a.out, "out", 4);

  if (!a.bmm1_scale.device_ptr) require_finite_positive(a.bmm1_scale.value, "bmm1_scale");
  if (!a.bmm2_scale.device_ptr) require_finite_positive(a.bmm2_scale.value, "bmm2_scale");
  if (present(a.sinks)) {
    require_defined(a.sinks, "sinks");
    require_dtype(a.sinks, "sinks", {DType::kFloat32});
    ATTNJIT_REQUIRE(a.sinks.numel() == heads, "sinks", fmt::format("[num_heads] = [{}]", heads), a.sinks.shape_string());
    require_contiguous(a.sinks, "sinks");
    require_aligned(a.sinks, "sinks", 4);
  }
  ATTNJIT_REQUIRE(a.lse_base == LseBase::kE || a.lse_base == LseBase::kTwo, "lse_base", "kE or kTwo",
                  fmt::format("enum value {}", static_cast<int>(a.lse_base)));
  if (present(a.lse)) {
    require_defined(a.lse, "lse");
    require_rank(a.lse, "lse", 2, "[batch * q_len_per_request, num_heads] fp32");
    require_dtype(a.lse, "lse", {DType::kFloat32});
    require_dim(a.lse, "lse", 0, int64_t(batch) * q_len, "batch * q_len_per_request");
    require_dim(a.lse, "lse", 1, heads, "num_heads");
    require_contiguous(a.lse, "lse");
    require_aligned(a.lse, "lse", 4);
  }
  if (a.sm_count) ATTNJIT_REQUIRE(*a.sm_count >= 1, "sm_count", ">= 1", std::to_string(*a.sm_count));

  MlaPlan plan;
  spec::KernelSpec& s = plan.spec;
  s.family = spec::OpFamily::kMla;
  s.q_dtype = a.query.dtype;
  s.kv_dtype = a.kv_cache.dtype;
  s.out_dtype = a.out.dtype;
  s.head_dim_qk = 576;
  s.head_dim_vo = 512;
  s.group_size = 1;  // heads are a launch parameter: one kernel serves every head count
  s.page_size = static_cast<int>(page_size);
  s.layout = spec::KvLayout::kNHD;
  s.mask = sparse ? spec::MaskMode::kCustom : spec::MaskMode::kCausal;
  if (present(a.sinks)) s.features |= spec::feature::kSinks;
  if (present(a.lse)) s.features |= spec::feature::kReturnLse;
  if (a.bmm1_scale.device_ptr || a.bmm2_scale.device_ptr) s.features |= spec::feature::kScalePointers;
  s.arch = arch;
  runtime::select_backend(static_cast<runtime::BackendChoice>(a.backend), s);
  if (s.backend == spec::Backend::kTrtllmGen && s.kv_dtype == DType::kFloat8E4M3 && !sparse) {
    // The wgmma kernel lands dense fp8 pages by TMA only: a view whose rows or pages overlap goes to xqa.
    const int64_t stride_page = a.kv_cache.stride[0], stride_tok = a.kv_cache.stride[kr - 2];
    if (!mla_kv_tma_describable(stride_page, stride_tok, static_cast<int>(page_size))) {
      ATTNJIT_REQUIRE(a.backend == Backend::kAuto, "kv_cache",
                      "rows and pages that do not overlap (backend trtllm-gen loads fp8 pages by TMA)",
                      fmt::format("strides {} per page, {} per token", stride_page, stride_tok));
      s.backend = spec::Backend::kXqa;
    }
  }
  plan.shape = {batch, static_cast<int>(heads), static_cast<int>(q_len), sparse ? a.sparse_mla_top_k : a.max_seq_len,
                sparse};
  if (s.backend == spec::Backend::kTrtllmGen) {
    plan.shape.rows_per_cta = mla_hopper_rows(sparse ? static_cast<int>(heads) : static_cast<int>(heads * q_len),
                                              s.kv_dtype == DType::kFloat8E4M3);
    plan.shape.tile_tokens = mla_const::kHopperTile;
    if (plan.shape.rows_per_cta == mla_const::kNarrowRows) s.features |= spec::feature::kNarrowTile;
    if (plan.shape.rows_per_cta == mla_const::kNarrow32Rows) s.features |= spec::feature::kNarrow32;
    if (mla_wide_tile32(plan.shape, s.kv_dtype == DType::kFloat8E4M3)) {
      s.features |= spec::feature::kTile32;
      plan.shape.tile_tokens = mla_const::kHopperTile32;
    }
    if (mla_wide_flat(plan.shape)) s.features |= spec::feature::kFlat;
  }
  MlaParams& p = plan.params;
  p = MlaParams{};
  p.q = a.query.data;
  p.kv = a.kv_cache.data;
  p.out = a.out.data;
  p.lse = present(a.lse) ? static_cast<float*>(a.lse.data) : nullptr;
  p.block_tables = static_cast<const int*>(a.block_tables.data);
  p.seq_lens = static_cast<const int*>(a.seq_lens.data);
  p.indices = sparse ? static_cast<const int*>(a.indices.data) : nullptr;
  p.sinks = present(a.sinks) ? static_cast<const float*>(a.sinks.data) : nullptr;
  p.bmm1_scale_ptr = a.bmm1_scale.device_ptr;
  p.bmm2_scale_ptr = a.bmm2_scale.device_ptr;
  p.q_stride_b = a.query.stride[0];
  p.q_stride_t = a.query.stride[1];
  p.q_stride_h = a.query.stride[2];
  p.o_stride_b = a.out.stride[0];
  p.o_stride_t = a.out.stride[1];
  p.o_stride_h = a.out.stride[2];
  p.kv_stride_page = a.kv_cache.stride[0];
  p.kv_stride_tok = a.kv_cache.stride[kr - 2];
  p.bt_stride_b = a.block_tables.stride[0];
  p.idx_stride_b = sparse ? a.indices.stride[0] : 0;
  p.idx_stride_t = sparse ? a.indices.stride[1] : 0;
  p.batch = batch;
  p.num_heads = static_cast<int>(heads);
  p.q_len = static_cast<int>(q_len);
  p.pages_per_seq = static_cast<int>(a.block_tables.shape[1]);
  // Sparse positions are int32: pages past 2^31 tokens are unreachable (and the product stays small).
  p.num_tokens = std::min<int64_t>(a.kv_cache.shape[0], int64_t(1) << 31) * page_size;
  p.top_k = a.sparse_mla_top_k;
  p.rows_per_group = sparse ? p.num_heads : p.num_heads * p.q_len;
  p.row_blocks = mla_row_blocks(plan.shape);
  p.bmm1_scale = a.bmm1_scale.value;
  p.bmm2_scale = a.bmm2_scale.value;
  p.lse_base2 = a.lse_base == LseBase::kTwo ? 1 : 0;
  if (present(a.workspace_buffer)) {
    plan.workspace_bytes = require_scratch_bytes(a.workspace_buffer, "workspace_buffer", 256);
    plan.workspace = a.workspace_buffer.data;
  }
  return plan;
}

spec::KernelSpec mla_prewarm_spec(const MlaArgs& args, const spec::Arch& arch) {
  ShapesOnlyScope shapes_only;
  return plan_mla(args, arch).spec;
}

}  // namespace ops

size_t mla_workspace_bytes(int batch, int num_heads, int q_len, int max_seq_len, int sm_count, int top_k) {
  ATTNJIT_REQUIRE(batch >= 1 && batch <= 65535, "batch", "1 to 65535", std::to_string(batch));
  ATTNJIT_REQUIRE(num_heads >= 1 && num_heads <= kMaxHeads, "num_heads", fmt::format("1 to {}", kMaxHeads),
                  std::to_string(num_heads));
  ATTNJIT_REQUIRE(q_len >= 1 && q_len <= kMaxQLen, "q_len_per_request", fmt::format("1 to {}", kMaxQLen),
                  std::to_string(q_len));
  ATTNJIT_REQUIRE(max_seq_len >= 1 && max_seq_len <= ops::kMaxDecodeSeqLen, "max_seq_len",
                  fmt::format("1 to {}", ops::kMaxDecodeSeqLen), std::to_string(max_seq_len));
  ATTNJIT_REQUIRE(sm_count >= 1, "sm_count", ">= 1 (the GPU's multiprocessor count)", std::to_string(sm_count));
  ATTNJIT_REQUIRE(top_k >= 0 && top_k <= kMaxTopK, "sparse_mla_top_k", fmt::format("0 to {}", kMaxTopK),
                  std::to_string(top_k));
  // Either backend may serve the call: the larger of the two kernels' needs.
  // choose_splits caps splits by length (256 tokens each), by ~4 waves of slots, and at 256:
  // base x splits <= min(base x by_length, by_waves + base - 1), both growing with base, so a
  // smaller call never needs more (as decode_workspace_bound argues).
  auto need = [&](int rows, int blocks_per_sm) -> size_t {
    const ops::MlaShape s{batch, num_heads, q_len, top_k > 0 ? top_k : max_seq_len, top_k > 0, rows};
    const int64_t base = ops::mla_base_ctas(s);
    const int64_t by_length = std::min<int64_t>(ceil_div(s.range, 128), mla_const::kMaxSplits);
    const int64_t by_waves = 4 * int64_t(sm_count) * blocks_per_sm;
    if (by_length <= 1) return 0;
    const int64_t partials = std::min(base * by_length, by_waves + base - 1);
    return ops::mla_semaphore_bytes(s) + static_cast<size_t>(partials) * mla_partial_floats(rows) * sizeof(float);
  };
  return std::max(need(mla_const::kRowsPerCta, ops::kMaxBlocksPerSmForSplit),
                  need(mla_const::kHopperRows, ops::kMaxBlocksPerSmForSplit));
}

std::string prewarm_mla(const MlaArgs& args, const std::string& arch, Runtime* runtime) {
  const spec::KernelSpec s = ops::mla_prewarm_spec(args, ops::prewarm_arch(arch));
  return ops::prewarm_spec(runtime ? *runtime : Runtime::global(), s, arch);
}

void batch_decode_mla(const MlaArgs& args, Stream stream, Runtime* runtime) {
  const int device = driver::current_device();
  const driver::DeviceCaps& info = driver::device_caps(device);
  ops::MlaPlan plan = ops::plan_mla(args, spec::arch_for_device(info.sm_major, info.sm_minor));
  Runtime& rt = runtime ? *runtime : Runtime::global();
  CUstream cs = reinterpret_cast<CUstream>(stream);
  const runtime::LoadedKernel* kp = &rt.registry().kernel(plan.spec, device, cs);
  const int sms = args.sm_count.value_or(kp->num_sms > 0 ? kp->num_sms : 1);
  const int slots = sms * std::clamp(kp->blocks_per_sm, 1, ops::kMaxBlocksPerSmForSplit);
  ops::mla_set_kv_map(args, plan);
  MlaParams& p = plan.params;
  const bool pdl = args.enable_pdl.value_or(true) && info.sm_major >= 9;
  if (plan.spec.has(spec::feature::kFlat)) {
    const int parts =
        ops::mla_flat_parts(plan.shape, slots, args.workspace_buffer.data ? plan.workspace_bytes : 0);
    if (parts >= 1) return ops::launch_mla_flat(*kp, cs, pdl, plan, parts);
    // No room for one part (a workspace sized for a call that never splits): the split schedule.
    plan.spec.features &= ~spec::feature::kFlat;
    kp = &rt.registry().kernel(plan.spec, device, cs);
  }
  const runtime::LoadedKernel& k = *kp;
  const ops::MlaSplit split = ops::mla_plan_splits(plan.shape, slots);
  p.num_splits = split.splits;
  p.tokens_per_split = split.tokens_per_split;
  if (split.splits > 1) {
    const size_t need = ops::mla_workspace_need(plan.shape, split.splits);
    ATTNJIT_REQUIRE(args.workspace_buffer.data && plan.workspace_bytes >= need, "workspace_buffer",
                    fmt::format(">= {} bytes for this call ({} splits; mla_workspace_bytes sizes it)", need, split.splits),
                    args.workspace_buffer.data ? fmt::format("{} bytes", plan.workspace_bytes) : std::string("none"));
    unsigned char* ws = static_cast<unsigned char*>(args.workspace_buffer.data);
    p.semaphores = reinterpret_cast<unsigned*>(ws);
    p.workspace = reinterpret_cast<float*>(ws + ops::mla_semaphore_bytes(plan.shape));
  }
  ops::Grid grid;
  grid.x = static_cast<unsigned>(split.splits);
  grid.y = static_cast<unsigned>((plan.shape.sparse ? plan.shape.q_len : 1) * p.row_blocks);
  grid.z = static_cast<unsigned>(plan.shape.batch);
  ops::launch_mla_passes(k, grid, cs, pdl, p, plan.shape);
}

}  // namespace attnjit
