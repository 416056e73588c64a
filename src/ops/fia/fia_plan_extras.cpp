// fused_infer_attention_score's rarer arguments: left padding (query/kv_padding_size),
// the shared prefix (key/value_shared_prefix, actual_shared_prefix_len) and int8
// output (quant_scale2, quant_offset2). The seed's constraints on them, then the
// spec bits and Params fields. Device tensors (pads, prefix length) are read by the
// kernel, never here: a host read would sync the stream and break graph capture.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

#include "attnjit/error.hpp"
#include "ops/common/validate.hpp"
#include "ops/fia/fia_mla.hpp"
#include "ops/fia/fia_plan.hpp"

namespace attnjit::ops {

namespace {

// The element count, saturating at INT64_MAX: shapes here are not yet checked, and a
// product of huge dims must not overflow (it only has to compare unequal).
int64_t numel(const TensorView& t) {
  int64_t n = 1;
  for (int d = 0; d < t.rank; ++d)
    if (__builtin_mul_overflow(n, t.shape[d], &n)) return INT64_MAX;
  return n;
}

// An int64 pad tensor: 1 value (every batch) or B values, contiguous. Returns its stride.
int check_pad(const TensorView& t, const char* name, int64_t batch) {
  require_defined(t, name);
  require_dtype(t, name, {DType::kInt64});
  const int64_t n = numel(t);
  ATTNJIT_REQUIRE(n == 1 || n == batch, name, fmt::format("1 value or one per batch ({})", batch), t.shape_string());
  if (n > 1) require_contiguous(t, name);
  require_aligned(t, name, 8);
  return n == 1 ? 0 : 1;
}

// quant_scale2 / quant_offset2: fp32 (bf16 too with bf16 queries); one value or one
// per output channel (N * D_v values, h-major: (H,), (1, 1, H), (N, D), (1, N, 1, D),
// (1, 1, N, D)). Returns whether it is per channel.
bool check_quant_scale(const TensorView& t, const char* name, DType qd, int64_t channels) {
  require_defined(t, name);
  if (qd == DType::kBFloat16) require_dtype(t, name, {DType::kFloat32, DType::kBFloat16});
  else require_dtype(t, name, {DType::kFloat32});
  const int64_t n = numel(t);
  ATTNJIT_REQUIRE(n == 1 || n == channels, name,
                  fmt::format("1 value (per tensor) or N * D = {} (per channel)", channels), t.shape_string());
  if (n > 1) require_contiguous(t, name);
  return n > 1;
}

// The full int8 path's three per-tensor scales, with their argument names.
std::array<std::pair<const TensorView*, const char*>, 3> int8_path_scales(const FiaArgs& a) {
  return {{{&a.dequant_scale1, "dequant_scale1"}, {&a.quant_scale1, "quant_scale1"}, {&a.dequant_scale2, "dequant_scale2"}}};
}

}  // namespace

bool fia_left_padded(const FiaArgs& a, bool decode) {
  const bool q = !decode && present(a.query_padding_size) && !a.actual_seq_lengths.empty();
  const bool kv = present(a.kv_padding_size) && !a.actual_seq_lengths_kv.empty();
  return q || kv;
}

void fia_check_quant_combination(const FiaArgs& a) {
  // A fp16/bf16 query with int8 output takes quant_scale2 (and quant_offset2) only; an
  // int8 query takes all three of the int8 path's scales (then quant_scale2 for int8 output).
  const bool int8_query = a.query.dtype == DType::kInt8;
  if (int8_query)  // antiquant is the 16-bit query's: said first, before the scales it lacks
    for (auto [t, n] : {std::pair{&a.antiquant_scale, "antiquant_scale"}, {&a.antiquant_offset, "antiquant_offset"},
                        {&a.key_antiquant_scale, "key_antiquant_scale"},
                        {&a.key_antiquant_offset, "key_antiquant_offset"},
                        {&a.value_antiquant_scale, "value_antiquant_scale"},
                        {&a.value_antiquant_offset, "value_antiquant_offset"}})
      ATTNJIT_REQUIRE(!present(*t), n,
                      "none with an int8 query (the full int8 path dequantises by dequant_scale1 and dequant_scale2)",
                      t->shape_string());
  for (auto [t, n] : int8_path_scales(a)) {
    if (int8_query)
      ATTNJIT_REQUIRE(present(*t), n, "a per-tensor fp32 scale with an int8 query (the full int8 path)", "none");
    else
      ATTNJIT_REQUIRE(!present(*t), n, "none with a fp16/bf16 query (only the int8 query path takes it)",
                      t->shape_string());
  }
  ATTNJIT_REQUIRE(!present(a.quant_offset2) || present(a.quant_scale2), "quant_offset2",
                  "only together with quant_scale2", "quant_offset2 without quant_scale2");
  ATTNJIT_REQUIRE(present(a.key_shared_prefix) == present(a.value_shared_prefix),
                  present(a.key_shared_prefix) ? "value_shared_prefix" : "key_shared_prefix",
                  "key_shared_prefix and value_shared_prefix together", "only one of them");
  ATTNJIT_REQUIRE(!present(a.actual_shared_prefix_len) || present(a.key_shared_prefix), "actual_shared_prefix_len",
                  "only with key_shared_prefix and value_shared_prefix", "no shared prefix");
}

void fia_check_int8_query(const FiaArgs& a, bool decode, bool paged, bool tnd, bool mla) {
  if (a.query.dtype != DType::kInt8) return;
  const char* kWhy = " (the full int8 path)";
  ATTNJIT_REQUIRE(!mla, "query", "fp16 or bf16 with query_rope/key_rope (no int8 MLA)", "int8");
  ATTNJIT_REQUIRE(!tnd, "query", "bf16 with input_layout TND", "int8");
  // The seed: "query, key, value all int8 is not supported" at Q_S = 1.
  ATTNJIT_REQUIRE(!decode, "query", "Q_S > 1 with int8 (all-int8 Q/K/V is not supported at Q_S = 1)", "int8 at Q_S 1");
  ATTNJIT_REQUIRE(!paged, "block_table", "none with an int8 query (page attention takes no int8 query)", "a block table");
  for (auto [t, n] : {std::pair{&a.key, "key"}, {&a.value, "value"}})
    ATTNJIT_REQUIRE(t->dtype == DType::kInt8, n, std::string("int8 with an int8 query") + kWhy,
                    std::string("dtype ") + dtype_name(t->dtype));
  ATTNJIT_REQUIRE(!present(a.key_shared_prefix), "key_shared_prefix",
                  "none with int8 query, key and value (the seed: no prefix on the all-int8 path)", "a shared prefix");
  for (auto [t, n] : int8_path_scales(a)) {
    require_defined(*t, n);
    // Ascend's uint64 form packs a scale for its own matmul unit; no DType carries it here.
    require_dtype(*t, n, {DType::kFloat32});
    ATTNJIT_REQUIRE(numel(*t) == 1, n, "one value (per tensor)", t->shape_string());
    require_aligned(*t, n, 4);
  }
}

namespace {
int64_t prefix_s(const TensorView& t, FiaLayout layout) {
  if (!present(t) || t.rank < 3) return 0;  // shapes are checked in fia_plan_extras
  return layout == FiaLayout::kBNSD || layout == FiaLayout::kBNSD_BSND ? (t.rank == 4 ? t.shape[2] : 0) : t.shape[1];
}
}  // namespace

FiaEmpty fia_empty_inputs(const FiaArgs& a) {
  auto has_zero = [](const TensorView& t) {
    return t.rank >= 1 && std::any_of(t.shape, t.shape + t.rank, [](int64_t n) { return n == 0; });
  };
  if (has_zero(a.query)) return FiaEmpty::kNothing;
  // Only the plain case: a prefix still holds keys, MLA and paged K/V have their own rules.
  if (!has_zero(a.key) || present(a.block_table) || present(a.key_shared_prefix) || present(a.value_shared_prefix) ||
      fia_uses_mla(a))
    return FiaEmpty::kNone;
  const std::string& l = a.input_layout;
  const bool tnd = l == "TND", bnsd = l == "BNSD" || l == "BNSD_BSND";
  if (!tnd && !bnsd && l != "BSH" && l != "BSND") return FiaEmpty::kNone;  // the plan names the layout
  const int s_dim = tnd ? 0 : bnsd ? 2 : 1, rank = tnd || l == "BSH" ? 3 : 4;
  const TensorView &k = a.key, &v = a.value, &q = a.query;
  if (k.rank != rank || v.rank != rank || q.rank != rank) return FiaEmpty::kNone;
  for (int d = 0; d < rank; ++d) {
    if ((k.shape[d] == 0) != (d == s_dim)) return FiaEmpty::kNone;  // S2 = 0 and nothing else
    if (d + 1 < rank && v.shape[d] != k.shape[d]) return FiaEmpty::kNone;  // the value's head dim may differ
  }
  if (v.shape[rank - 1] < 1 || (!tnd && k.shape[0] != q.shape[0])) return FiaEmpty::kNone;
  const TensorView& o = a.attention_out;
  require_defined(o, "attention_out");
  require_contiguous(o, "attention_out");
  if (present(a.softmax_lse)) {  // with the flag the LSE's rows (+inf), without it the seed's [1] placeholder (0)
    require_defined(a.softmax_lse, "softmax_lse");
    require_dtype(a.softmax_lse, "softmax_lse", {DType::kFloat32});
    require_contiguous(a.softmax_lse, "softmax_lse");
  } else {
    ATTNJIT_REQUIRE(!a.softmax_lse_flag, "softmax_lse", "an fp32 tensor (softmax_lse_flag is set)", "none");
  }
  return FiaEmpty::kZeroOutput;
}

int64_t fia_prefix_seq(const FiaArgs& a, FiaLayout layout) { return prefix_s(a.key_shared_prefix, layout); }

void fia_plan_extras(const FiaArgs& a, const FiaDims& d, FiaPlan& plan) {
  spec::KernelSpec& s = plan.spec;
  PrefillParams& p = plan.params;
  const bool tnd = d.layout == FiaLayout::kTND;
  const bool bnsd = d.layout == FiaLayout::kBNSD || d.layout == FiaLayout::kBNSD_BSND;

  // Left padding. The query's only with Q_S > 1; each only with its actual lengths
  // (else the seed's right-padding case: the tensor is ignored).
  // The query's pad means nothing at Q_S = 1 (the seed: "only Q_S > 1; otherwise the
  // parameter has no effect"), so there it is ignored whatever else the call holds.
  const bool qpad = present(a.query_padding_size) && !d.decode, kvpad = present(a.kv_padding_size);
  for (auto [given, name] : {std::pair{qpad, "query_padding_size"}, {kvpad, "kv_padding_size"}}) {
    if (!given) continue;
    ATTNJIT_REQUIRE(!tnd, name, "none with input_layout TND (no left padding)", "a padding tensor");
    ATTNJIT_REQUIRE(!d.paged, name, "none with block_table (left padding has no page attention)", "a block table too");
    ATTNJIT_REQUIRE(!present(a.key_shared_prefix), name, "none with key_shared_prefix (the prefix has no left padding)",
                    "a shared prefix too");
  }
  const int q_stride = qpad ? check_pad(a.query_padding_size, "query_padding_size", d.B) : 0;
  const int kv_stride = kvpad ? check_pad(a.kv_padding_size, "kv_padding_size", d.B) : 0;
  const bool q_applies = qpad && !a.actual_seq_lengths.empty();
  const bool kv_applies = kvpad && !a.actual_seq_lengths_kv.empty();
  if (q_applies || kv_applies) {
    s.features |= spec::feature::kLeftPad;
    p.q_pad = q_applies ? static_cast<const long long*>(a.query_padding_size.data) : nullptr;
    p.kv_pad = kv_applies ? static_cast<const long long*>(a.kv_padding_size.data) : nullptr;
    p.q_pad_stride = q_stride;
    p.kv_pad_stride = kv_stride;
  }
  p.kv_seq = int(d.KS);

  // Shared prefix: (1, P, H), (1, P, KV_N, D) or (1, KV_N, P, D) in the key's layout and dtype.
  if (present(a.key_shared_prefix)) {
    ATTNJIT_REQUIRE(!tnd, "key_shared_prefix", "none with input_layout TND (no prefix)", "a shared prefix");
    ATTNJIT_REQUIRE(!d.paged, "key_shared_prefix", "none with block_table (the prefix has no page attention)",
                    "a block table too");
    int64_t ps = 0;
    long long st[2][2];  // [k, v][s, h]
    for (int i = 0; i < 2; ++i) {
      const TensorView& t = i ? a.value_shared_prefix : a.key_shared_prefix;
      const char* name = i ? "value_shared_prefix" : "key_shared_prefix";
      const int64_t dim = (i ? d.DV : d.D) / d.kv_pack;  // int4 in int32: D / 8, as key (the seed)
      require_defined(t, name);
      require_dtype(t, name, {a.key.dtype});
      if (d.layout == FiaLayout::kBSH) {
        require_rank(t, name, 3, "(1, S, H), as key with batch 1");
        require_dim(t, name, 2, d.KN * dim, "H, as key");
        st[i][0] = t.stride[1], st[i][1] = dim;
      } else if (bnsd) {
        require_rank(t, name, 4, "(1, KV_N, S, D), as key with batch 1");
        require_dim(t, name, 1, d.KN, "num_key_value_heads, as key");
        require_dim(t, name, 3, dim, "D, as key");
        st[i][0] = t.stride[2], st[i][1] = t.stride[1];
      } else {
        require_rank(t, name, 4, "(1, S, KV_N, D), as key with batch 1");
        require_dim(t, name, 2, d.KN, "num_key_value_heads, as key");
        require_dim(t, name, 3, dim, "D, as key");
        st[i][0] = t.stride[1], st[i][1] = t.stride[2];
      }
      require_dim(t, name, 0, 1, "batch 1");
      require_inner_contiguous(t, name);
      require_aligned(t, name, 16);
      if (i == 0) ps = prefix_s(t, d.layout);
      else require_dim(t, name, bnsd ? 2 : 1, ps, "S, as key_shared_prefix");
    }
    const int64_t limit = d.decode ? 262144 : 20971520;
    ATTNJIT_REQUIRE(ps + d.KS <= limit, "key_shared_prefix", fmt::format("prefix S + key S <= {}", limit),
                    fmt::format("{} + {}", ps, d.KS));
    const TensorView& len = a.actual_shared_prefix_len;
    if (present(len)) {
      require_defined(len, "actual_shared_prefix_len");
      require_dtype(len, "actual_shared_prefix_len", {DType::kInt64});
      ATTNJIT_REQUIRE(len.rank == 1 && len.shape[0] == 1, "actual_shared_prefix_len", "shape [1]", len.shape_string());
      require_aligned(len, "actual_shared_prefix_len", 8);
    }
    s.features |= spec::feature::kSharedPrefix;
    p.kp = a.key_shared_prefix.data;
    p.vp = a.value_shared_prefix.data;
    p.kp_stride_s = st[0][0], p.kp_stride_h = st[0][1];
    p.vp_stride_s = st[1][0], p.vp_stride_h = st[1][1];
    p.prefix_len = present(len) ? static_cast<const long long*>(len.data) : nullptr;  // read on device, clamped to S
    p.prefix_seq = int(ps);
  }

  // int8 output for fp16/bf16 inputs.
  if (present(a.quant_scale2)) {
    ATTNJIT_REQUIRE(!tnd, "quant_scale2", "none with input_layout TND (no post-quantisation)", "a scale");
    const int64_t channels = d.N * d.DV;
    const bool per_channel = check_quant_scale(a.quant_scale2, "quant_scale2", a.query.dtype, channels);
    if (present(a.quant_offset2)) {
      check_quant_scale(a.quant_offset2, "quant_offset2", a.query.dtype, channels);
      require_dtype(a.quant_offset2, "quant_offset2", {a.quant_scale2.dtype});
      ATTNJIT_REQUIRE(a.quant_offset2.shape_string() == a.quant_scale2.shape_string(), "quant_offset2",
                      "quant_scale2's shape " + a.quant_scale2.shape_string(), a.quant_offset2.shape_string());
    }
    if (per_channel)
      ATTNJIT_REQUIRE(!(s.features & spec::feature::kLeftPad), "quant_scale2",
                      "per tensor with left padding (per channel is not supported there)", a.quant_scale2.shape_string());
    // Band with negative pre/next leaves rows out (the seed refuses it with int8 output).
    if (!d.decode && d.sparse == 4)
      ATTNJIT_REQUIRE(a.pre_tokens >= 0 && a.next_tokens >= 0, a.pre_tokens < 0 ? "pre_tokens" : "next_tokens",
                      ">= 0 with int8 output in sparse_mode 4 (band)",
                      std::to_string(a.pre_tokens < 0 ? a.pre_tokens : a.next_tokens));
    // With an offset, rows that compute nothing would read as the offset: the seed refuses them.
    if (present(a.quant_offset2) && !d.decode)
      for (int b = 0; b < d.B; ++b) {
        const FiaLengths L = fia_lengths(plan, a, b);
        const int64_t q = L.q_len, kv = L.kv_len + fia_prefix_seq(a, d.layout);
        const bool band0 = d.sparse == 0 && d.has_mask && !(s.features & spec::feature::kLeftPad);  // else pre/next ignored
        const bool bad = (band0 && (q - kv - a.pre_tokens > 0 || a.next_tokens < 0)) ||
                         (d.sparse == 3 && kv - q < 0) || (d.sparse == 4 && a.next_tokens + kv - q < 0);
        ATTNJIT_REQUIRE(!bad, "quant_offset2",
                        "sparse_mode, pre/next_tokens and lengths where every row sees a key (int8 output)",
                        fmt::format("batch {} (q {}, kv {}, sparse_mode {})", b, q, kv, d.sparse));
      }
    s.out_dtype = DType::kInt8;
    p.quant_scale = a.quant_scale2.data;
    p.quant_offset = present(a.quant_offset2) ? a.quant_offset2.data : nullptr;
    p.quant_stride_h = per_channel ? int(d.DV) : 0;
    p.quant_stride_d = per_channel ? 1 : 0;
    p.quant_bf16 = a.quant_scale2.dtype == DType::kBFloat16 ? 1 : 0;
  }
}

}  // namespace attnjit::ops
