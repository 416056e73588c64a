// MLA inside FIA: the rope constraints, then the mla kernel's spec and Params from
// plan_fia's strides, then the launch with a lengths table per (device, stream).
#include "ops/fia/fia_mla.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "attnjit/error.hpp"
#include "ops/common/launch.hpp"
#include "ops/common/stream_lengths.hpp"
#include "ops/common/validate.hpp"
#include "ops/decode/decode_launch.hpp"
#include "ops/mla/mla_launch.hpp"
#include "runtime/backend.hpp"
#include "runtime/kernel_registry.hpp"

namespace attnjit::ops {

namespace {

constexpr int64_t kMlaDim = 512, kRopeDim = 64, kMaxQs = 16;
constexpr int kMaxGridZ = 65535;  // the kernel's grid z is the batch
const char* const kWhy = "with query_rope/key_rope (MLA)";

[[noreturn]] void unsupported(const char* arg, const std::string& why) {
  throw Error(ErrorCode::kUnsupported, fmt::format("argument '{}': {}", arg, why));
}

bool is_nz(const TensorView& t) { return t.rank == 5; }  // [blockNum, N, D/16, blockSize, 16]

bool same_view(const TensorView& a, const TensorView& b) {
  if (a.data != b.data || a.dtype != b.dtype || a.rank != b.rank) return false;
  for (int d = 0; d < a.rank; ++d)
    if (a.shape[d] != b.shape[d] || a.stride[d] != b.stride[d]) return false;
  return true;
}

int64_t list_at(const std::vector<int64_t>& v, int b, int64_t dflt) {
  if (v.empty()) return dflt;
  return v.size() == 1 ? v[0] : v[size_t(b)];
}

}  // namespace

bool fia_uses_mla(const FiaArgs& a) { return present(a.query_rope) || present(a.key_rope); }

void check_fia_mla_early(const FiaArgs& a) {
  ATTNJIT_REQUIRE(present(a.query_rope) == present(a.key_rope), present(a.query_rope) ? "key_rope" : "query_rope",
                  "query_rope and key_rope together (the seed: both or neither)", "only one of them");
  for (auto [t, n] : {std::pair{&a.key, "key"}, {&a.value, "value"}, {&a.key_rope, "key_rope"}})
    if (is_nz(*t))
      unsupported(n, fmt::format("{} looks like the NZ format [blockNum, N, D/16, blockSize, 16], Ascend's fractal "
                                 "storage; pass ND tensors: (blocknum, block_size, D) or (blocknum, 1, block_size, D)",
                                 t->shape_string()));
  const std::string& l = a.input_layout;
  ATTNJIT_REQUIRE(l == "BSH" || l == "BSND" || l == "BNSD", "input_layout", std::string("BSH, BSND or BNSD ") + kWhy,
                  "'" + l + "'");
  // int8 query_rope/key_rope and the quantised paths are the seed's, not served here.
  if (a.query_rope.dtype == DType::kInt8) unsupported("query_rope", "int8 (the quantised MLA path) is not supported yet");
  if (a.key_rope.dtype == DType::kInt8) unsupported("key_rope", "int8 (the quantised MLA path) is not supported yet");
  for (auto [t, n] : {std::pair{&a.dequant_scale1, "dequant_scale1"}, {&a.quant_scale1, "quant_scale1"},
                      {&a.dequant_scale2, "dequant_scale2"}, {&a.quant_scale2, "quant_scale2"},
                      {&a.quant_offset2, "quant_offset2"}, {&a.antiquant_scale, "antiquant_scale"},
                      {&a.antiquant_offset, "antiquant_offset"}, {&a.key_antiquant_scale, "key_antiquant_scale"},
                      {&a.key_antiquant_offset, "key_antiquant_offset"},
                      {&a.value_antiquant_scale, "value_antiquant_scale"},
                      {&a.value_antiquant_offset, "value_antiquant_offset"}})
    if (present(*t)) unsupported(n, std::string("the quantised MLA paths are not supported yet ") + kWhy);
  ATTNJIT_REQUIRE(!present(a.key_rope_antiquant_scale), "key_rope_antiquant_scale",
                  "none (the seed reserves it, unused)", a.key_rope_antiquant_scale.shape_string());
  // The seed's MLA features are sparse modes, ND/NZ KV, three layouts and page attention.
  for (auto [t, n] : {std::pair{&a.pse_shift, "pse_shift"}, {&a.query_padding_size, "query_padding_size"},
                      {&a.kv_padding_size, "kv_padding_size"}, {&a.key_shared_prefix, "key_shared_prefix"},
                      {&a.value_shared_prefix, "value_shared_prefix"},
                      {&a.actual_shared_prefix_len, "actual_shared_prefix_len"}})
    ATTNJIT_REQUIRE(!present(*t), n, std::string("none ") + kWhy + " (the seed lists sparse, paged KV and LSE)",
                    t->shape_string());
  ATTNJIT_REQUIRE(present(a.block_table), "block_table",
                  std::string("a block table ") + kWhy + " (the seed: page attention is required)", "none");
  ATTNJIT_REQUIRE(a.block_size == 16 || a.block_size == 128, "block_size", std::string("16 or 128 ") + kWhy,
                  std::to_string(a.block_size));
}

std::optional<FiaMlaPlan> plan_fia_mla(const FiaPlan& plan, const FiaArgs& a, const spec::Arch& arch) {
  if (!fia_uses_mla(a)) return std::nullopt;
  check_fia_mla_early(a);  // plan_fia ran it; a direct caller gets the same refusals
  const TensorView& q = a.query;
  const TensorView& k = a.key;
  const int64_t B = plan.batch, N = plan.num_heads, QS = plan.q_seq;
  const int64_t D = plan.spec.head_dim_qk;
  ATTNJIT_REQUIRE(N == 32 || N == 64 || N == 128, "num_heads", std::string("32, 64 or 128 ") + kWhy,
                  std::to_string(N));
  ATTNJIT_REQUIRE(D == kMlaDim, "query", std::string("D 512 ") + kWhy, fmt::format("D {} in {}", D, q.shape_string()));
  ATTNJIT_REQUIRE(QS >= 1 && QS <= kMaxQs, "query", std::string("S 1 to 16 ") + kWhy,
                  fmt::format("S {} in {}", QS, q.shape_string()));
  ATTNJIT_REQUIRE(plan.num_kv_heads == 1, "num_key_value_heads", std::string("1: the key has N = 1 ") + kWhy,
                  std::to_string(a.num_key_value_heads));
  ATTNJIT_REQUIRE(B <= kMaxGridZ, "query", fmt::format("batch <= {} {}", kMaxGridZ, kWhy), std::to_string(B));
  // V is the 512-dim latent that K's first 512 dims hold (the kernel reads one tile for both).
  if (!same_view(a.value, k))
    unsupported("value", "the key tensor itself with query_rope/key_rope (MLA: V is the latent that the key's 512 "
                         "dims hold, read once for both)");

  // Sparse rules (the seed): Q_S = 1 only mode 0 without a mask, Q_S > 1 only mode 3 with one.
  const bool has_mask = present(a.atten_mask);
  if (QS == 1) {
    ATTNJIT_REQUIRE(a.sparse_mode == 0, "sparse_mode", std::string("0 at Q_S = 1 ") + kWhy,
                    std::to_string(a.sparse_mode));
    ATTNJIT_REQUIRE(!has_mask, "atten_mask", std::string("none at Q_S = 1 ") + kWhy, a.atten_mask.shape_string());
    // Q_S = 1 reads actual_seq_lengths with query_rope (issue 11): each 0 or 1.
    const auto& v = a.actual_seq_lengths;
    ATTNJIT_REQUIRE(v.empty() || v.size() == 1 || int64_t(v.size()) >= B, "actual_seq_lengths",
                    fmt::format("1 or at least batch ({}) values", B), fmt::format("{} values", v.size()));
    for (size_t i = 0; i < std::min<size_t>(v.size(), size_t(B)); ++i)
      ATTNJIT_REQUIRE(v[i] == 0 || v[i] == 1, "actual_seq_lengths", "values in [0, 1] (at most the query's S)",
                      fmt::format("{} at index {}", v[i], i));
  } else {
    ATTNJIT_REQUIRE(a.sparse_mode == 3, "sparse_mode", std::string("3 (rightDownCausal) at Q_S > 1 ") + kWhy,
                    std::to_string(a.sparse_mode));
    ATTNJIT_REQUIRE(has_mask, "atten_mask", "the 2048x2048 compressed mask (sparse_mode 3)", "none");
  }

  // query_rope: the query's dtype and layout, its B, N and S, D 64.
  const TensorView& qr = a.query_rope;
  require_defined(qr, "query_rope");
  require_dtype(qr, "query_rope", {q.dtype});
  require_rank(qr, "query_rope", q.rank, "the query's layout with D 64");
  const bool bsh = plan.layout == FiaLayout::kBSH, bnsd = plan.layout == FiaLayout::kBNSD;
  for (int d = 0; d + 1 < q.rank; ++d) require_dim(qr, "query_rope", d, q.shape[d], "as query");
  require_dim(qr, "query_rope", q.rank - 1, bsh ? N * kRopeDim : kRopeDim, bsh ? "num_heads * 64" : "64");
  require_inner_contiguous(qr, "query_rope");
  require_aligned(qr, "query_rope", 16);

  // key_rope: the key's dtype and layout, its block, N and block_size dims, D 64.
  const TensorView& kr = a.key_rope;
  require_defined(kr, "key_rope");
  require_dtype(kr, "key_rope", {k.dtype});
  require_rank(kr, "key_rope", k.rank, k.rank == 3 ? "(blocknum, block_size, 64)" : "(blocknum, 1, block_size, 64)");
  for (int d = 0; d + 1 < k.rank; ++d) require_dim(kr, "key_rope", d, k.shape[d], "as key");
  require_dim(kr, "key_rope", k.rank - 1, kRopeDim, "64");
  require_inner_contiguous(kr, "key_rope");
  require_aligned(kr, "key_rope", 16);

  FiaMlaPlan m;
  spec::KernelSpec& s = m.spec;
  s.family = spec::OpFamily::kMla;
  s.q_dtype = s.kv_dtype = s.out_dtype = q.dtype;
  s.head_dim_qk = mla_const::kHeadDimQk;
  s.head_dim_vo = mla_const::kHeadDimVo;
  s.group_size = 1;  // heads are a launch parameter
  s.page_size = int(a.block_size);
  s.layout = spec::KvLayout::kNHD;
  s.mask = spec::MaskMode::kCausal;
  s.features = spec::feature::kSplitRope | (a.softmax_lse_flag ? spec::feature::kReturnLse : 0u);
  s.arch = arch;
  runtime::select_backend(static_cast<runtime::BackendChoice>(a.backend), s);

  // Lengths: a table only when they are not all (the same KV length, Q_S).
  int max_kv = 0;
  bool uniform = true;
  const int kv0 = int(list_at(a.actual_seq_lengths_kv, 0, plan.kv_seq));
  for (int b = 0; b < B; ++b) {
    const int kv = int(list_at(a.actual_seq_lengths_kv, b, plan.kv_seq));
    const int ql = int(list_at(a.actual_seq_lengths, b, QS));
    max_kv = std::max(max_kv, kv);
    uniform = uniform && kv == kv0 && ql == QS;
  }
  if (!uniform) {
    m.lens.resize(size_t(2 * B));
    for (int b = 0; b < B; ++b) {
      m.lens[size_t(b)] = int(list_at(a.actual_seq_lengths_kv, b, plan.kv_seq));
      m.lens[size_t(B + b)] = int(list_at(a.actual_seq_lengths, b, QS));
    }
  }

  const PrefillParams& pp = plan.params;
  MlaParams& p = m.params;
  p = MlaParams{};
  p.q = q.data;
  p.kv = k.data;
  p.out = a.attention_out.data;
  p.lse = a.softmax_lse_flag ? static_cast<float*>(a.softmax_lse.data) : nullptr;
  p.block_tables = static_cast<const int*>(a.block_table.data);
  p.q_stride_b = pp.q_stride_b, p.q_stride_t = pp.q_stride_s, p.q_stride_h = pp.q_stride_h;
  p.o_stride_b = pp.o_stride_b, p.o_stride_t = pp.o_stride_s, p.o_stride_h = pp.o_stride_h;
  p.kv_stride_page = pp.k_stride_b;  // paged: the block stride
  p.kv_stride_tok = pp.k_stride_s;
  p.bt_stride_b = pp.block_table_stride_b;
  p.batch = int(B);
  p.num_heads = int(N);
  p.q_len = int(QS);
  p.pages_per_seq = int(a.block_table.shape[1]);
  p.num_tokens = 0;  // dense: unused
  p.rows_per_group = int(QS * N);
  p.bmm1_scale = pp.scale;  // FIA: scale * q.k (default 1.0)
  p.bmm2_scale = 1.0f;
  p.lse_base2 = 0;
  // The rope tensors, in the query's and key's layouts.
  p.q_rope = qr.data;
  if (bsh) p.qr_stride_b = qr.stride[0], p.qr_stride_t = qr.stride[1], p.qr_stride_h = kRopeDim;
  else if (bnsd) p.qr_stride_b = qr.stride[0], p.qr_stride_h = qr.stride[1], p.qr_stride_t = qr.stride[2];
  else p.qr_stride_b = qr.stride[0], p.qr_stride_t = qr.stride[1], p.qr_stride_h = qr.stride[2];
  p.kv_rope = kr.data;
  p.kvr_stride_page = kr.stride[0];
  p.kvr_stride_tok = kr.stride[k.rank - 2];
  p.lse_stride_b = pp.lse_stride_b, p.lse_stride_t = pp.lse_stride_s, p.lse_stride_h = pp.lse_stride_h;
  p.kv_len = kv0;

  m.shape = {int(B), int(N), int(QS), std::max(max_kv, 1), false};
  p.row_blocks = mla_row_blocks(m.shape);
  return m;
}

void launch_fia_mla(Runtime& rt, FiaMlaPlan& m, int device, CUstream stream) {
  MlaParams& p = m.params;
  runtime::KernelRegistry& reg = rt.registry();
  const runtime::LoadedKernel& k = reg.kernel(m.spec, device, stream);
  const int slots = std::max(k.num_sms, 1) * std::clamp(k.blocks_per_sm, 1, kMaxBlocksPerSmForSplit);
  const MlaSplit split = mla_plan_splits(m.shape, slots);
  p.num_splits = split.splits;
  p.tokens_per_split = split.tokens_per_split;
  if (split.splits > 1) {
    const int64_t ctas = mla_base_ctas(m.shape);
    const size_t bytes = size_t(ctas) * size_t(split.splits) * size_t(mla_partial_floats()) * sizeof(float);
    const runtime::Scratch scratch = reg.scratch(device, bytes, size_t(ctas), stream);
    p.workspace = static_cast<float*>(scratch.workspace);
    p.semaphores = scratch.semaphores;
  }
  p.seq_lens = nullptr;
  p.q_lens = nullptr;
  if (!m.lens.empty()) {
    const auto* lens = reinterpret_cast<const uint32_t*>(m.lens.data());  // non-negative ints
    int* table = reinterpret_cast<int*>(
        upload_stream_lengths("fused_infer_attention_score (MLA)", device, stream, lens, m.lens.size()));
    p.seq_lens = table;
    p.q_lens = table + m.shape.batch;
  }
  Grid grid;
  grid.x = static_cast<unsigned>(split.splits);
  grid.y = static_cast<unsigned>(p.row_blocks);
  grid.z = static_cast<unsigned>(m.shape.batch);
  const bool pdl = driver::device_caps(device).sm_major >= 9;  // the kernel waits before its first read
  launch_mla_passes(k, grid, stream, pdl, p, m.shape);
}

}  // namespace attnjit::ops
