// fused_infer_attention_score: the seed's constraints, then spec and Params.
#include "ops/fia/fia_plan.hpp"
#include "ops/fia/fia_dequant_first.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "attnjit/error.hpp"
#include "ops/common/validate.hpp"
#include "ops/fia/fia_mla.hpp"
#include "ops/fia/prefill_family.hpp"
#include "runtime/backend.hpp"

namespace attnjit::ops {

namespace {

constexpr int64_t kMaxBatch = 65536;
constexpr int64_t kMaxHeads = 256;
constexpr int64_t kMaxGroup = 64;
constexpr int64_t kMaxHeadDim = 512;       // the seed's limit
constexpr int64_t kMaxSeq = 20971520;      // Q_S > 1: 20M
constexpr int64_t kMaxSeqDecode = 262144;  // Q_S = 1
constexpr int64_t kMaxTnd = 65536;
constexpr int64_t kCompressedMask = 2048;

[[noreturn]] void unsupported(const char* arg, const std::string& why) {
  throw Error(ErrorCode::kUnsupported, fmt::format("argument '{}': {}", arg, why));
}

FiaLayout parse_layout(const std::string& s) {
  if (s == "BSH") return FiaLayout::kBSH;
  if (s == "BSND") return FiaLayout::kBSND;
  if (s == "BNSD") return FiaLayout::kBNSD;
  if (s == "BNSD_BSND") return FiaLayout::kBNSD_BSND;
  if (s == "TND") return FiaLayout::kTND;
  if (s == "NZ" || s == "BSH_NZ" || s == "BNSD_NZ" || s == "BSND_NZ")
    unsupported("input_layout", "NZ is Ascend's fractal storage format; pass ND tensors (BSH, BSND, BNSD, TND)");
  invalid("input_layout", "BSH, BSND, BNSD, BNSD_BSND or TND", "'" + s + "'");
}

// Lengths under the seed's rule: none = S for all; one = the same for all; >= B =
// the first B; anything else is refused. Values in [0, limit].
void check_list(const std::vector<int64_t>& v, const char* name, int64_t batch, int64_t limit, const char* what) {
  if (v.empty()) return;
  ATTNJIT_REQUIRE(v.size() == 1 || int64_t(v.size()) >= batch, name,
                  fmt::format("1 or at least batch ({}) values", batch), fmt::format("{} values", v.size()));
  const size_t n = std::min<size_t>(v.size(), size_t(batch));
  for (size_t i = 0; i < n; ++i)
    ATTNJIT_REQUIRE(v[i] >= 0 && v[i] <= limit, name, fmt::format("values in [0, {}] ({})", limit, what),
                    fmt::format("{} at index {}", v[i], i));
}

// TND: cumulative, non-negative, non-decreasing, exactly `batch` values (batch
// is the Q list's count), the last <= T; == T for the query (`exact`): the seed's T is the
// sum of the lengths, and rows past the last would be outputs no work item writes.
void check_cumulative(const std::vector<int64_t>& v, const char* name, int64_t total, bool exact) {
  ATTNJIT_REQUIRE(!v.empty(), name, "the cumulative lengths (required with input_layout TND)", "none");
  int64_t prev = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    ATTNJIT_REQUIRE(v[i] >= prev, name, "non-negative, non-decreasing cumulative lengths",
                    fmt::format("{} at index {} after {}", v[i], i, prev));
    prev = v[i];
  }
  if (exact)
    ATTNJIT_REQUIRE(prev == total, name, fmt::format("a total equal to the query's T ({}: the sum of the lengths)", total),
                    std::to_string(prev));
  ATTNJIT_REQUIRE(prev <= total, name, fmt::format("a total <= T ({})", total), std::to_string(prev));
}

int64_t list_at(const std::vector<int64_t>& v, int b, int64_t dflt) {
  if (v.empty()) return dflt;
  return v.size() == 1 ? v[0] : v[size_t(b)];
}

void refuse_present(const TensorView& t, const char* name, const char* why) {
  if (present(t)) unsupported(name, why);
}

long long clamp_band(int64_t v) {
  return std::clamp<int64_t>(v, -int64_t(kPrefillBandInf), int64_t(kPrefillBandInf));
}

}  // namespace

FiaPlan plan_fia(const FiaArgs& a, const spec::Arch& arch) {
  FiaPlan plan;
  const FiaLayout layout = parse_layout(a.input_layout);
  plan.layout = layout;
  const bool tnd = layout == FiaLayout::kTND;
  require_backend(a.backend);
  // MLA (query_rope/key_rope): its own rules first; plan_fia_mla (fia_mla.cpp) checks the rest.
  const bool mla = fia_uses_mla(a);
  if (mla) check_fia_mla_early(a);

  // Left padding, the shared prefix, int8 output and the full int8 path (int8 query) are
  // fia_plan_extras.cpp's, quantised K/V (antiquant) fia_plan_antiquant.cpp's.
  fia_check_quant_combination(a);
  refuse_present(a.key_rope_antiquant_scale, "key_rope_antiquant_scale",
                 "none (the seed reserves it and uses none: pass None)");
  fia_check_antiquant_modes(a);
  ATTNJIT_REQUIRE(a.inner_precise >= 0 && a.inner_precise <= 3, "inner_precise", "0 to 3",
                  std::to_string(a.inner_precise));

  // Query.
  const TensorView& q = a.query;
  const int q_rank = tnd ? 3 : layout == FiaLayout::kBSH ? 3 : 4;
  const char* q_shape = tnd ? "(T, N, D)" : layout == FiaLayout::kBSH ? "(B, S, H)"
                        : layout == FiaLayout::kBSND           ? "(B, S, N, D)"
                                                                : "(B, N, S, D)";
  require_rank(q, "query", q_rank, q_shape);
  require_dtype(q, "query", {DType::kFloat16, DType::kBFloat16, DType::kInt8});  // int8: fia_check_int8_query
  const bool int8_query = q.dtype == DType::kInt8;
  // The 16-bit dtype of pse and of the output: the query's, fp16 on the full int8 path (the seed).
  const DType q16 = int8_query ? DType::kFloat16 : q.dtype;
  ATTNJIT_REQUIRE(a.num_heads >= 1 && a.num_heads <= kMaxHeads, "num_heads", fmt::format("1 to {}", kMaxHeads),
                  std::to_string(a.num_heads));
  const int64_t N = a.num_heads;
  int64_t B, QS, D;
  if (tnd) {
    B = int64_t(a.actual_seq_lengths.size());
    QS = 0;
    require_dim(q, "query", 1, N, "num_heads");
    D = q.shape[2];
    ATTNJIT_REQUIRE(q.shape[0] <= kMaxTnd, "query", fmt::format("T <= {} (TND)", kMaxTnd), q.shape_string());
  } else if (layout == FiaLayout::kBSH) {
    B = q.shape[0];
    QS = q.shape[1];
    ATTNJIT_REQUIRE(q.shape[2] % N == 0, "query", fmt::format("H a multiple of num_heads ({})", N), q.shape_string());
    D = q.shape[2] / N;
  } else if (layout == FiaLayout::kBSND) {
    B = q.shape[0];
    QS = q.shape[1];
    require_dim(q, "query", 2, N, "num_heads");
    D = q.shape[3];
  } else {
    B = q.shape[0];
    QS = q.shape[2];
    require_dim(q, "query", 1, N, "num_heads");
    D = q.shape[3];
  }
  const bool decode = !tnd && QS == 1;
  plan.decode = decode;
  if (layout == FiaLayout::kBNSD_BSND)
    ATTNJIT_REQUIRE(QS > 1, "input_layout", "BNSD_BSND only with Q_S > 1", fmt::format("Q_S {}", QS));
  ATTNJIT_REQUIRE(B >= 1 && B <= kMaxBatch, tnd ? "actual_seq_lengths" : "query",
                  fmt::format("batch 1 to {}", kMaxBatch), std::to_string(B));
  ATTNJIT_REQUIRE(QS <= (decode ? kMaxSeqDecode : kMaxSeq), "query", fmt::format("S <= {}", kMaxSeq), std::to_string(QS));
  // BSH: D comes from num_heads (default 1), so the message says where it came from.
  ATTNJIT_REQUIRE(D % 16 == 0 && D <= kMaxHeadDim, layout == FiaLayout::kBSH ? "num_heads" : "query",
                  "head dim a multiple of 16, at most 512 (fp16/bf16)",
                  layout == FiaLayout::kBSH ? fmt::format("D = H / num_heads = {} / {} = {}", q.shape[2], N, D)
                                            : fmt::format("D {}", D));
  if ((layout == FiaLayout::kBSH || layout == FiaLayout::kBSND) && !decode && !mla)  // MLA: the seed's N 128, D 512
    ATTNJIT_REQUIRE(N * D < 65535, "query", "N * D < 65535 (BSH/BSND)", std::to_string(N * D));

  // KV heads.
  ATTNJIT_REQUIRE(a.num_key_value_heads >= 0, "num_key_value_heads", ">= 0 (0: num_heads)",
                  std::to_string(a.num_key_value_heads));
  const int64_t KN = a.num_key_value_heads == 0 ? N : a.num_key_value_heads;
  ATTNJIT_REQUIRE(N % KN == 0, "num_key_value_heads", fmt::format("a divisor of num_heads ({})", N),
                  std::to_string(KN));
  ATTNJIT_REQUIRE(N / KN <= kMaxGroup || mla, "num_key_value_heads", "num_heads / num_key_value_heads <= 64",  // MLA: 128 / 1
                  std::to_string(N / KN));
  const int64_t G = N / KN;
  if (tnd) {
    ATTNJIT_REQUIRE(N == 8 || N == 16 || N == 32 || N == 64 || N == 128, "num_heads", "8, 16, 32, 64 or 128 (TND)",
                    std::to_string(N));
    ATTNJIT_REQUIRE(KN == N, "num_key_value_heads", "num_heads (TND: Q_N = K_N = V_N)", std::to_string(KN));
    require_dtype(q, "query", {DType::kBFloat16});
    ATTNJIT_REQUIRE(D == 192, "query", "Q/K head dim 192 (TND)", fmt::format("D {}", D));
  }

  // Key and value.
  const TensorView& k = a.key;
  const TensorView& v = a.value;
  const bool paged = present(a.block_table);
  fia_check_int8_query(a, decode, paged, tnd, mla);
  // int4 K/V packed in int32: the key's last dim (or H) is D / 8, its strides count words.
  const int64_t pack = fia_kv_pack(a, tnd, mla), Dk = D / pack;
  const char* d_what = pack > 1 ? "D / 8: int4 packed in int32" : "D, as query";
  const char* h_what = pack > 1 ? "H / 8 = num_key_value_heads * D / 8 (int4 in int32)" : "H = num_key_value_heads * D";
  int64_t KS = 0, DV = D;
  int64_t blocks = 0, max_blocks = 0;
  long long ksb, kss, ksh, vsb, vss, vsh;
  if (paged) {
    ATTNJIT_REQUIRE(!tnd, "block_table", "none with input_layout TND (no page attention)", "a block table");
    require_rank(a.block_table, "block_table", 2, "[B, max_blocks]");
    require_dtype(a.block_table, "block_table", {DType::kInt32});
    require_dim(a.block_table, "block_table", 0, B, "batch");
    ATTNJIT_REQUIRE(a.block_table.stride[1] == 1, "block_table", "stride 1 in dim 1",
                    std::to_string(a.block_table.stride[1]));
    const int64_t bs = a.block_size;
    if (decode || mla)  // MLA at Q_S 2-16 takes 16 or 128 (check_fia_mla_early)
      ATTNJIT_REQUIRE(bs >= 16 && bs <= 512 && bs % 16 == 0, "block_size", "a multiple of 16 in [16, 512] (Q_S = 1)",
                      std::to_string(bs));
    else
      ATTNJIT_REQUIRE(bs >= 128 && bs <= 512 && bs % 128 == 0, "block_size", "128, 256, 384 or 512 (Q_S > 1)",
                      std::to_string(bs));
    ATTNJIT_REQUIRE(!a.actual_seq_lengths_kv.empty(), "actual_seq_lengths_kv", "given (required with block_table)",
                    "none");
    const bool bnsd_q = layout == FiaLayout::kBNSD || layout == FiaLayout::kBNSD_BSND;
    ATTNJIT_REQUIRE(k.rank == 3 || (k.rank == 4 && bnsd_q), "key",
                    bnsd_q ? "(blocknum, block_size, H) or (blocknum, KV_N, block_size, D)"
                           : "(blocknum, block_size, H) (BSH/BSND queries)",
                    k.shape_string());
    require_rank(k, "key", k.rank, "");
    require_rank(v, "value", k.rank, "as key");
    for (int d = 0; d < k.rank; ++d) require_dim(v, "value", d, k.shape[d], "as key (paged)");
    blocks = k.shape[0];
    if (k.rank == 3) {
      require_dim(k, "key", 1, bs, "block_size");
      require_dim(k, "key", 2, KN * Dk, h_what);
      ATTNJIT_REQUIRE(KN * D <= 65535, "key", "KV_N * D <= 65535 for (blocknum, block_size, H)",
                      std::to_string(KN * D));
      ksb = k.stride[0], kss = k.stride[1], ksh = Dk;
      vsb = v.stride[0], vss = v.stride[1], vsh = Dk;
    } else {
      require_dim(k, "key", 1, KN, "num_key_value_heads");
      require_dim(k, "key", 2, bs, "block_size");
      require_dim(k, "key", 3, Dk, d_what);
      ksb = k.stride[0], ksh = k.stride[1], kss = k.stride[2];
      vsb = v.stride[0], vsh = v.stride[1], vss = v.stride[2];
    }
    max_blocks = a.block_table.shape[1];
    ATTNJIT_REQUIRE(max_blocks <= kMaxSeq / bs, "block_table", fmt::format("max_blocks * block_size <= {}", kMaxSeq),
                    a.block_table.shape_string());
    KS = max_blocks * bs;
  } else if (tnd) {
    require_rank(k, "key", 3, "(T_kv, N, D)");
    require_rank(v, "value", 3, "(T_kv, N, D_v)");
    require_dim(k, "key", 1, KN, "num_key_value_heads");
    require_dim(k, "key", 2, D, "D, as query");
    require_dim(v, "value", 0, k.shape[0], "T_kv, as key");
    ATTNJIT_REQUIRE(k.shape[0] <= kMaxSeq, "key", fmt::format("T_kv <= {}", kMaxSeq), k.shape_string());
    require_dim(v, "value", 1, KN, "num_key_value_heads");
    DV = v.shape[2];
    ATTNJIT_REQUIRE(DV == 128 || DV == 192, "value", "head dim 128 or 192 (TND)", fmt::format("D_v {}", DV));
    ksb = vsb = 0;
    kss = k.stride[0], ksh = k.stride[1];
    vss = v.stride[0], vsh = v.stride[1];
  } else {
    require_rank(k, "key", q_rank, q_shape);
    require_rank(v, "value", q_rank, q_shape);
    for (int d = 0; d < k.rank; ++d) require_dim(v, "value", d, k.shape[d], "as key");
    require_dim(k, "key", 0, B, "batch, as query");
    if (layout == FiaLayout::kBSH) {
      KS = k.shape[1];
      require_dim(k, "key", 2, KN * Dk, h_what);
      ksb = k.stride[0], kss = k.stride[1], ksh = Dk;
      vsb = v.stride[0], vss = v.stride[1], vsh = Dk;
    } else if (layout == FiaLayout::kBSND) {
      KS = k.shape[1];
      require_dim(k, "key", 2, KN, "num_key_value_heads");
      require_dim(k, "key", 3, Dk, d_what);
      ksb = k.stride[0], kss = k.stride[1], ksh = k.stride[2];
      vsb = v.stride[0], vss = v.stride[1], vsh = v.stride[2];
    } else {
      KS = k.shape[2];
      require_dim(k, "key", 1, KN, "num_key_value_heads");
      require_dim(k, "key", 3, Dk, d_what);
      ksb = k.stride[0], ksh = k.stride[1], kss = k.stride[2];
      vsb = v.stride[0], vsh = v.stride[1], vss = v.stride[2];
    }
    ATTNJIT_REQUIRE(KS <= (decode ? kMaxSeqDecode : kMaxSeq), "key", fmt::format("KV_S <= {}", decode ? kMaxSeqDecode : kMaxSeq),
                    std::to_string(KS));
  }
  require_dtype(k, "key", {q.dtype, DType::kInt8, DType::kInt32});  // int8/int4: antiquant
  require_dtype(v, "value", {k.dtype});
  for (auto [t, n] : {std::pair{&q, "query"}, {&k, "key"}, {&v, "value"}}) {
    require_inner_contiguous(*t, n);
    require_aligned(*t, n, 16);
  }
  if (DV > 256)  // the portable kernel splits them in two halves of whole 16-element chunks
    ATTNJIT_REQUIRE(DV % 32 == 0, "value", "a head dim past 256 that is a multiple of 32", std::to_string(DV));

  // Lengths.
  if (tnd) {
    check_cumulative(a.actual_seq_lengths, "actual_seq_lengths", q.shape[0], /*exact=*/true);
    check_cumulative(a.actual_seq_lengths_kv, "actual_seq_lengths_kv", k.shape[0], /*exact=*/false);
    ATTNJIT_REQUIRE(a.actual_seq_lengths_kv.size() == a.actual_seq_lengths.size(), "actual_seq_lengths_kv",
                    fmt::format("{} values (the batch, as actual_seq_lengths)", a.actual_seq_lengths.size()),
                    fmt::format("{} values", a.actual_seq_lengths_kv.size()));
  } else {
    if (!decode) check_list(a.actual_seq_lengths, "actual_seq_lengths", B, QS, "at most the query's S");
    check_list(a.actual_seq_lengths_kv, "actual_seq_lengths_kv", B, KS,
               paged ? "at most block_table's blocks * block_size" : "at most the key's S");
  }
  plan.batch = int(B);
  plan.num_heads = int(N);
  plan.num_kv_heads = int(KN);
  plan.q_seq = int(QS);
  plan.kv_seq = int(KS);
  int64_t max_kv = 0;
  for (int b = 0; b < B; ++b) max_kv = std::max<int64_t>(max_kv, fia_lengths(plan, a, b).kv_len);
  if (paged) {
    int64_t need = 0, need_max = 0;
    for (int b = 0; b < B; ++b) {
      const int64_t nb = (int64_t(fia_lengths(plan, a, b).kv_len) + a.block_size - 1) / a.block_size;
      need += nb;
      need_max = std::max(need_max, nb);
    }
    ATTNJIT_REQUIRE(blocks >= need, "key", fmt::format("blocknum >= {} (the blocks the KV lengths need)", need),
                    std::to_string(blocks));
    (void)need_max;  // <= max_blocks: the lengths were checked against max_blocks * block_size
  }

  // Sparse mode, masks and bands.
  int mask_kind = prefill_mask::kNone;
  long long band_lo = -kPrefillBandInf, band_hi = kPrefillBandInf;
  int band_shift = 0;
  const TensorView& m = a.atten_mask;
  const bool has_mask = present(m);
  const int64_t kv_cols = (paged ? ((max_kv + a.block_size - 1) / a.block_size) * a.block_size : KS) +
                          fia_prefix_seq(a, layout);  // the prefix's S: its length is on device
  if (has_mask) {
    require_defined(m, "atten_mask");
    require_dtype(m, "atten_mask", {DType::kUInt8, DType::kInt8});  // bool tensors are uint8 views
    ATTNJIT_REQUIRE(m.rank >= 2 && m.stride[m.rank - 1] == 1, "atten_mask", "rank 2 to 4 with stride 1 in the last dim",
                    m.shape_string());
  }
  const int64_t sparse = a.sparse_mode;
  if (decode) {
    // Q_S = 1 ignores sparse_mode, pre_tokens and next_tokens (the seed).
    if (has_mask) {
      const char* shapes = "(B, KV_S), (B, 1, KV_S) or (B, 1, 1, KV_S)";
      ATTNJIT_REQUIRE(m.rank >= 2 && m.rank <= 4, "atten_mask", shapes, m.shape_string());
      require_dim(m, "atten_mask", 0, B, "batch");
      for (int d = 1; d + 1 < m.rank; ++d) require_dim(m, "atten_mask", d, 1, "1");
      ATTNJIT_REQUIRE(m.shape[m.rank - 1] >= kv_cols, "atten_mask", fmt::format("KV_S >= {}", kv_cols),
                      m.shape_string());
      mask_kind = prefill_mask::kTensor;
      plan.params.mask_stride_b = m.stride[0];
      plan.params.mask_stride_s = 0;
    }
  } else {
    ATTNJIT_REQUIRE(sparse >= 0 && sparse <= 4, "sparse_mode",
                    "0 to 4 (5-8: prefix, global, dilated, block_local are not supported)", std::to_string(sparse));
    if (tnd)
      ATTNJIT_REQUIRE((sparse == 0 && !has_mask) || (sparse == 3 && has_mask), "sparse_mode",
                      "0 without atten_mask or 3 with atten_mask (TND)",
                      fmt::format("{} {} atten_mask", sparse, has_mask ? "with" : "without"));
    if (sparse >= 2) {
      ATTNJIT_REQUIRE(has_mask, "atten_mask", fmt::format("the 2048x2048 compressed mask (sparse_mode {})", sparse),
                      "none");
      ATTNJIT_REQUIRE(m.rank >= 2 && m.rank <= 4 && m.shape[m.rank - 1] == kCompressedMask &&
                          m.shape[m.rank - 2] == kCompressedMask && (m.rank < 3 || m.shape[0] == 1) &&
                          (m.rank < 4 || m.shape[1] == 1),
                      "atten_mask", "(2048, 2048), (1, 2048, 2048) or (1, 1, 2048, 2048) for sparse_mode 2-4",
                      m.shape_string());
      mask_kind = prefill_mask::kBand;
      if (sparse == 2) band_hi = 0;
      if (sparse == 3) band_hi = 0, band_shift = 1;
      if (sparse == 4) band_lo = -clamp_band(a.pre_tokens), band_hi = clamp_band(a.next_tokens), band_shift = 1;
    } else if (has_mask || sparse == 1) {
      ATTNJIT_REQUIRE(has_mask, "atten_mask", "the full (Q_S, KV_S) mask (sparse_mode 1)", "none");
      const char* shapes = "(Q_S, KV_S), (B, Q_S, KV_S), (1, Q_S, KV_S), (B, 1, Q_S, KV_S) or (1, 1, Q_S, KV_S)";
      ATTNJIT_REQUIRE(m.rank >= 2 && m.rank <= 4, "atten_mask", shapes, m.shape_string());
      const int64_t mb = m.rank >= 3 ? m.shape[0] : 1;
      ATTNJIT_REQUIRE(mb == 1 || mb == B, "atten_mask", std::string("batch 1 or B in ") + shapes, m.shape_string());
      if (m.rank == 4) require_dim(m, "atten_mask", 1, 1, "1");
      const int64_t need_q = tnd ? 0 : QS;
      ATTNJIT_REQUIRE(m.shape[m.rank - 2] >= need_q && m.shape[m.rank - 1] >= kv_cols, "atten_mask",
                      fmt::format("at least ({}, {}) in the last two dims", need_q, kv_cols), m.shape_string());
      mask_kind = prefill_mask::kTensor;
      plan.params.mask_stride_b = m.rank >= 3 && mb == B ? m.stride[0] : 0;
      plan.params.mask_stride_s = m.stride[m.rank - 2];
      if (sparse == 0 && !fia_left_padded(a, decode))  // left padding ignores pre/next here (the seed)
        band_lo = -clamp_band(a.pre_tokens), band_hi = clamp_band(a.next_tokens);
    }  // sparse 0 without a mask ignores pre/next
    if (tnd && sparse == 3)
      for (int b = 0; b < B; ++b) {
        const FiaLengths L = fia_lengths(plan, a, b);
        ATTNJIT_REQUIRE(L.q_len <= L.kv_len, "actual_seq_lengths",
                        "each batch's query length <= its KV length (TND, sparse_mode 3)",
                        fmt::format("{} > {} in batch {}", L.q_len, L.kv_len, b));
      }
  }
  if (!decode) ATTNJIT_REQUIRE(a.inner_precise >= 0, "inner_precise", "0 to 3", std::to_string(a.inner_precise));
  else ATTNJIT_REQUIRE(a.inner_precise <= 1, "inner_precise", "0 or 1 (Q_S = 1)", std::to_string(a.inner_precise));

  // Position shift.
  const TensorView& pse = a.pse_shift;
  const bool has_pse = present(pse);
  if (has_pse) {
    ATTNJIT_REQUIRE(!tnd, "pse_shift", "none with input_layout TND", pse.shape_string());
    require_rank(pse, "pse_shift", 4, "(B or 1, N, Q_S, KV_S)");
    require_dtype(pse, "pse_shift", {q16});
    ATTNJIT_REQUIRE(pse.shape[0] == 1 || pse.shape[0] == B, "pse_shift", fmt::format("batch 1 or {}", B),
                    pse.shape_string());
    require_dim(pse, "pse_shift", 1, N, "num_heads");
    ATTNJIT_REQUIRE(pse.shape[2] >= QS && pse.shape[3] >= kv_cols, "pse_shift",
                    fmt::format("at least (.., .., {}, {})", QS, kv_cols), pse.shape_string());
    ATTNJIT_REQUIRE(pse.stride[3] == 1, "pse_shift", "stride 1 in the last dim", std::to_string(pse.stride[3]));
  }

  // Outputs.
  const TensorView& o = a.attention_out;
  require_defined(o, "attention_out");
  require_dtype(o, "attention_out", {present(a.quant_scale2) ? DType::kInt8 : q16});  // int8: quant_scale2
  long long osb, oss, osh;
  if (tnd) {
    require_rank(o, "attention_out", 3, "(T, N, D_v)");
    require_dim(o, "attention_out", 0, q.shape[0], "T");
    require_dim(o, "attention_out", 1, N, "num_heads");
    require_dim(o, "attention_out", 2, DV, "D_v");
    osb = 0, oss = o.stride[0], osh = o.stride[1];
  } else if (layout == FiaLayout::kBSH) {
    require_rank(o, "attention_out", 3, "(B, S, H)");
    require_dim(o, "attention_out", 0, B, "batch");
    require_dim(o, "attention_out", 1, QS, "Q_S");
    require_dim(o, "attention_out", 2, N * DV, "num_heads * D");
    osb = o.stride[0], oss = o.stride[1], osh = DV;
  } else if (layout == FiaLayout::kBSND || layout == FiaLayout::kBNSD_BSND) {
    require_rank(o, "attention_out", 4, "(B, S, N, D)");
    for (auto [d, want, what] : {std::tuple{0, B, "batch"}, {1, QS, "Q_S"}, {2, N, "num_heads"}, {3, DV, "D"}})
      require_dim(o, "attention_out", d, want, what);
    osb = o.stride[0], oss = o.stride[1], osh = o.stride[2];
  } else {
    require_rank(o, "attention_out", 4, "(B, N, S, D)");
    for (auto [d, want, what] : {std::tuple{0, B, "batch"}, {1, N, "num_heads"}, {2, QS, "Q_S"}, {3, DV, "D"}})
      require_dim(o, "attention_out", d, want, what);
    osb = o.stride[0], osh = o.stride[1], oss = o.stride[2];
  }
  require_inner_contiguous(o, "attention_out");
  require_aligned(o, "attention_out", 16);
  const TensorView& lse = a.softmax_lse;
  if (a.softmax_lse_flag) {
    require_defined(lse, "softmax_lse");
    require_dtype(lse, "softmax_lse", {DType::kFloat32});
    if (tnd) {
      require_rank(lse, "softmax_lse", 3, "(T, N, 1)");
      require_dim(lse, "softmax_lse", 0, q.shape[0], "T");
      require_dim(lse, "softmax_lse", 1, N, "num_heads");
      require_dim(lse, "softmax_lse", 2, 1, "1");
      plan.params.lse_stride_b = 0, plan.params.lse_stride_s = lse.stride[0], plan.params.lse_stride_h = lse.stride[1];
    } else {
      require_rank(lse, "softmax_lse", 4, "(B, N, Q_S, 1)");
      for (auto [d, want, what] : {std::tuple{0, B, "batch"}, {1, N, "num_heads"}, {2, QS, "Q_S"}, {3, int64_t(1), "1"}})
        require_dim(lse, "softmax_lse", d, want, what);
      plan.params.lse_stride_b = lse.stride[0], plan.params.lse_stride_h = lse.stride[1];
      plan.params.lse_stride_s = lse.stride[2];
    }
    require_aligned(lse, "softmax_lse", 4);
  } else if (present(lse)) {
    require_defined(lse, "softmax_lse");
    require_dtype(lse, "softmax_lse", {DType::kFloat32});
    ATTNJIT_REQUIRE(lse.numel() == 1, "softmax_lse", "the placeholder [1] (softmax_lse_flag is false)",
                    lse.shape_string());
    plan.lse_placeholder = true;
  }
  ATTNJIT_REQUIRE(std::isfinite(a.scale), "scale", "a finite value", fmt::format("{}", a.scale));

  // Spec.
  spec::KernelSpec& s = plan.spec;
  s.family = spec::OpFamily::kPrefill;
  s.q_dtype = s.kv_dtype = q.dtype;
  s.out_dtype = q16;
  s.head_dim_qk = int(D);
  s.head_dim_vo = int(DV);
  s.group_size = 1;  // the group is a runtime value: rows are (token, group head) pairs
  s.page_size = paged ? int(a.block_size) : 0;
  s.layout = spec::KvLayout::kNHD;  // layouts are strides in the Params
  s.mask = static_cast<spec::MaskMode>(mask_kind);
  s.pos_encoding = spec::PosEncoding::kNone;
  s.features = (a.softmax_lse_flag ? spec::feature::kReturnLse : 0u) | (has_pse ? spec::feature::kPse : 0u);
  s.arch = arch;
  const FiaDims dims{layout, B, N, KN, QS, KS, D, DV, decode, paged, has_mask, sparse, pack};
  fia_plan_extras(a, dims, plan);
  fia_plan_antiquant(a, dims, plan);  // sets kv_dtype before the backend is chosen
  if (!mla) {  // MLA runs the mla family's kernel (plan_fia_mla picks its backend), never a prefill one
    fia_plan_dequant_first(a, dims, plan);  // int8 K/V at Q_S > 1: 16-bit copies, then a 16-bit spec
    runtime::select_backend(static_cast<runtime::BackendChoice>(a.backend), s);
    const PrefillGridShape grid = prefill_grid_shape(s);
    plan.rows_per_cta = grid.rows;
    plan.dv_chunks = grid.dv_chunks;
  }

  // Params (the work list is filled per launch).
  PrefillParams& p = plan.params;
  p.q = q.data;
  p.k = k.data;
  p.v = v.data;
  p.out = o.data;
  p.lse = a.softmax_lse_flag ? static_cast<float*>(lse.data) : nullptr;
  p.mask = mask_kind == prefill_mask::kTensor ? static_cast<const unsigned char*>(m.data) : nullptr;
  p.pse = has_pse ? pse.data : nullptr;
  p.block_table = paged ? static_cast<const int*>(a.block_table.data) : nullptr;
  if (tnd) p.q_stride_b = 0, p.q_stride_s = q.stride[0], p.q_stride_h = q.stride[1];
  else if (layout == FiaLayout::kBSH) p.q_stride_b = q.stride[0], p.q_stride_s = q.stride[1], p.q_stride_h = D;
  else if (layout == FiaLayout::kBSND) p.q_stride_b = q.stride[0], p.q_stride_s = q.stride[1], p.q_stride_h = q.stride[2];
  else p.q_stride_b = q.stride[0], p.q_stride_h = q.stride[1], p.q_stride_s = q.stride[2];
  p.k_stride_b = ksb, p.k_stride_s = kss, p.k_stride_h = ksh;
  p.v_stride_b = vsb, p.v_stride_s = vss, p.v_stride_h = vsh;
  p.o_stride_b = osb, p.o_stride_s = oss, p.o_stride_h = osh;
  if (has_pse) {
    p.pse_stride_b = pse.shape[0] == 1 ? 0 : pse.stride[0];
    p.pse_stride_h = pse.stride[1];
    p.pse_stride_s = decode ? 0 : pse.stride[2];
  }
  p.block_table_stride_b = paged ? a.block_table.stride[0] : 0;
  p.group = int(G);
  p.q_seq = tnd ? 0 : int(QS);
  p.block_size = paged ? int(a.block_size) : 0;
  p.band_lo = int(band_lo);
  p.band_hi = int(band_hi);
  p.band_shift = band_shift;
  p.scale = static_cast<float>(a.scale);
  return plan;
}

FiaLengths fia_lengths(const FiaPlan& plan, const FiaArgs& a, int b) {
  FiaLengths L{};
  if (plan.layout == FiaLayout::kTND) {
    const int64_t q0 = b ? a.actual_seq_lengths[size_t(b - 1)] : 0;
    const int64_t k0 = b ? a.actual_seq_lengths_kv[size_t(b - 1)] : 0;
    L.q_tok0 = int(q0);
    L.kv_tok0 = int(k0);
    L.q_len = int(a.actual_seq_lengths[size_t(b)] - q0);
    L.kv_len = int(a.actual_seq_lengths_kv[size_t(b)] - k0);
    return L;
  }
  L.q_len = plan.decode ? 1 : int(list_at(a.actual_seq_lengths, b, plan.q_seq));
  L.kv_len = int(list_at(a.actual_seq_lengths_kv, b, plan.kv_seq));
  return L;
}

int fia_fill_work(const FiaPlan& plan, const FiaArgs& a, int first, int count, PrefillParams& p) {
  const int G = plan.params.group;
  const int rows_padded = plan.layout == FiaLayout::kTND ? 0 : plan.q_seq * G;
  int tiles = 0;
  for (int i = 0; i < count; ++i) {
    const FiaLengths L = fia_lengths(plan, a, first + i);
    PrefillBatch& e = p.batches[i];
    e.q_len = L.q_len;
    e.kv_len = L.kv_len;
    e.q_tok0 = L.q_tok0;
    e.kv_tok0 = L.kv_tok0;
    e.tile_begin = tiles;
    const int rows = L.q_len * G;
    const int R = plan.rows_per_cta;
    e.compute_tiles = (rows + R - 1) / R;
    const int zero_rows = std::max(0, rows_padded - rows);
    tiles += e.compute_tiles + (zero_rows + R - 1) / R;
  }
  p.num_batches = count;
  p.first_batch = first;
  return tiles;
}

}  // namespace attnjit::ops
