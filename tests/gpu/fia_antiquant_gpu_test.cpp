// fused_infer_attention_score with quantised K/V (antiquant) on the GPU against the
// float64 reference of the dequantised values, (x + offset) * scale: int8 and int4
// (packed in int32) K/V, every mode of the seed's separate key/value scales and of
// the combined antiquant_scale, at Q_S > 1 and Q_S = 1, with and without offsets,
// paged KV, masks, causal modes, GQA and ragged lengths. Outputs start as NaN, per-token
// scales of positions a batch does not hold are NaN; every element is checked.
#include <gtest/gtest.h>

#include <random>

#include "common/env_guard.hpp"
#include "fia_gpu_case.hpp"

namespace attnjit {
namespace {

using fia_gpu::FiaCase;
using fia_gpu::describe;
using fia_gpu::run_fia;

// Ragged KV lengths (one batch empty when there are three) and, at Q_S > 1, query lengths.
void ragged(FiaCase& c, std::mt19937& rng) {
  for (int b = 0; b < c.batch; ++b) {
    if (c.q_seq > 1) c.q_list.push_back(1 + int64_t(rng() % c.q_seq));
    c.kv_list.push_back(b == 2 ? 0 : 1 + int64_t(rng() % c.kv_seq));
  }
}

// Combined antiquant_scale at Q_S > 1: fp16 query, int8 K/V, per channel in the
// layout's shape or per tensor, the mode argument ignored; masks, causal modes, pse,
// LSE, GQA, left padding, a shared prefix and int8 output on some cases.
TEST(FiaAntiquantGpu, PrefillCombinedScales) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::mt19937 rng(9101);
  const char* layouts[] = {"BSH", "BSND", "BNSD", "BNSD_BSND"};
  const int dims[] = {64, 128, 256};
  for (int n = 0; n < 12; ++n) {
    FiaCase c;
    c.dtype = DType::kFloat16;
    c.layout = layouts[n % 4];
    c.head_dim = c.head_dim_v = dims[n % 3];
    c.batch = 1 + n % 3;
    c.kv_heads = 1 + n % 2;
    c.heads = c.kv_heads * (1 << (n % 4));
    c.q_seq = 2 + int(rng() % 150);
    c.kv_seq = 1 + int(rng() % 300);
    if (n % 2) ragged(c, rng);
    c.sparse = n % 5;
    c.mask = c.sparse >= 2 ? 2 : c.sparse == 1 || n % 3 == 0 ? 1 : 0;
    c.mask_shape = n;
    c.pre = int64_t(rng() % 200), c.next = int64_t(rng() % 50);
    c.pse = n % 4 == 3 ? 1 : 0;
    c.lse = n % 2 == 0;
    c.kvq.bits = 8;
    c.kvq.combined = true;
    c.kvq.key_mode = n % 6 == 5 ? 1 : 0;  // ignored at Q_S > 1: per channel
    c.kvq.per_tensor = n % 3 == 1;
    c.kvq.offset = n % 4 != 2;
    if (n == 4) c.prefix = 37, c.mask = 0, c.sparse = 0;  // a shared int8 prefix
    if (n == 7) c.quant = 2, c.quant_offset = true;       // int8 output
    if (n == 9 && !c.q_list.empty()) {                    // left padding on Q and KV
      c.q_pad = {int64_t(c.q_seq - *std::max_element(c.q_list.begin(), c.q_list.end()))};
      c.kv_pad = {0};
    }
    EXPECT_LE(run_fia(c, 9200 + n), 1e-2) << describe(c);
  }
}

// Separate key/value scales at Q_S > 1: per token (B, S) fp32, bf16 query, Q_S <= 16.
TEST(FiaAntiquantGpu, PrefillSeparatePerToken) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::mt19937 rng(9102);
  const char* layouts[] = {"BSND", "BSH", "BNSD", "BNSD_BSND"};
  for (int n = 0; n < 8; ++n) {
    FiaCase c;
    c.layout = layouts[n % 4];
    c.head_dim = c.head_dim_v = n % 2 ? 128 : 64;
    c.batch = 1 + n % 3;
    c.kv_heads = 2;
    c.heads = 2 * (1 + n % 4);
    c.q_seq = 2 + int(rng() % 15);
    c.kv_seq = 20 + int(rng() % 400);
    if (n % 2 == 0) ragged(c, rng);
    c.sparse = n % 4 == 1 ? 3 : 0;
    c.mask = c.sparse == 3 ? 2 : n % 4 == 2 ? 1 : 0;
    c.lse = n % 2 == 1;
    c.kvq.bits = 8;
    c.kvq.key_mode = c.kvq.value_mode = 1;
    c.kvq.offset = n % 3 != 0;
    if (n == 3) c.kernel = "prefill.";  // auto picks the portable kernel (the wgmma one refuses)
    EXPECT_LE(run_fia(c, 9300 + n), 1e-2) << describe(c);
  }
}

// int8 K/V dequantised first (dqpass, then the 16-bit attention of each backend),
// forced by ATTNJIT_FIA_DEQUANT_FIRST=1 at every row count: combined per-channel and
// per-tensor scales (fp16), per-token separate scales (bf16, Q_S <= 16), offsets or none,
// every layout, head dims 64-256, GQA, ragged lengths, masks, causal, LSE, int8 output
// and left padding; a few long KV lengths span many pass tiles. The default rule sends
// the 128-row cases there too, and keeps the others in the kernel (checked).
TEST(FiaAntiquantGpu, PrefillDequantFirst) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::mt19937 rng(9150);
  const char* layouts[] = {"BSND", "BSH", "BNSD", "BNSD_BSND"};
  const int dims[] = {64, 128, 192, 256};
  for (int n = 0; n < 16; ++n) {
    const bool forced = n < 12;
    testing::EnvGuard knob("ATTNJIT_FIA_DEQUANT_FIRST", forced ? "1" : nullptr);
    FiaCase c;
    const bool token = forced && n % 4 == 3;  // the separate per-token scales: bf16, Q_S <= 16
    c.dtype = token ? DType::kBFloat16 : DType::kFloat16;
    c.layout = layouts[n % 4];
    c.head_dim = c.head_dim_v = dims[(n / 2) % 4];
    c.batch = 1 + n % 3;
    c.kv_heads = 1 + n % 2;
    c.heads = c.kv_heads * (1 << (n % 5));
    c.q_seq = token ? 2 + int(rng() % 15) : 2 + int(rng() % 200);
    c.kv_seq = n % 5 == 4 ? 3000 + int(rng() % 2000) : 1 + int(rng() % 400);
    if (n % 5 == 4) c.q_seq = 2 + int(rng() % 40);  // long KV: a cheaper float64 reference
    if (n % 2) ragged(c, rng);
    if (!token) {
      c.sparse = n % 5;
      c.mask = c.sparse >= 2 ? 2 : c.sparse == 1 || n % 3 == 0 ? 1 : 0;
      c.mask_shape = n;
      c.pre = int64_t(rng() % 200), c.next = int64_t(rng() % 50);
    }
    c.lse = n % 2 == 0;
    c.kvq.bits = 8;
    c.kvq.combined = !token;
    c.kvq.key_mode = c.kvq.value_mode = token ? 1 : 0;
    c.kvq.per_tensor = !token && n % 3 == 1;
    c.kvq.offset = n % 4 != 2;
    if (n == 6) c.quant = 2, c.quant_offset = true;  // int8 output
    if (n == 8 && !c.q_list.empty()) {               // left padding on Q and KV
      c.q_pad = {int64_t(c.q_seq - *std::max_element(c.q_list.begin(), c.q_list.end()))};
      c.kv_pad = {int64_t(rng() % 5)};
      c.mask = c.sparse = 0;
    }
    if (!forced) {  // the default: 128 query rows per KV head or more
      c.q_seq = n % 2 ? 160 : 20;
      c.q_list.clear();
      c.heads = c.kv_heads * 4;
    }
    c.expect_pass = forced || c.q_seq * (c.heads / c.kv_heads) >= 128 ? 1 : 0;
    EXPECT_LE(run_fia(c, 9400 + n), 1e-2) << describe(c);
  }
}

// Q_S = 1, separate scales: every key/value mode of the seed's table, int8 and int4,
// contiguous and paged KV (modes 4 and 5 manage scales by block), with and without offsets.
TEST(FiaAntiquantGpu, DecodeEverySeparateMode) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::mt19937 rng(9103);
  struct Mode {
    int bits, key, value;
    bool per_tensor, paged;
  };
  const Mode modes[] = {{8, 0, 0, false, false}, {4, 0, 0, false, false}, {8, 0, 0, true, false},
                        {8, 1, 1, false, false}, {4, 1, 1, false, false}, {8, 1, 1, false, true},
                        {8, 2, 2, false, false}, {8, 3, 3, false, false}, {4, 3, 3, false, false},
                        {8, 3, 3, false, true},  {8, 4, 4, false, true},  {8, 5, 5, false, true},
                        {8, 0, 1, false, false}, {4, 0, 1, false, false}, {8, 0, 0, false, true}};
  const char* layouts[] = {"BSH", "BSND", "BNSD"};
  int n = 0;
  for (const Mode& m : modes) {
    for (int variant = 0; variant < 2; ++variant, ++n) {
      FiaCase c;
      c.layout = layouts[n % 3];
      // key mode 0 + value mode 1 with int8 K/V takes an fp16 query (the seed).
      c.dtype = (m.key == 0 && m.value == 1 && m.bits == 8) || n % 2 ? DType::kFloat16 : DType::kBFloat16;
      c.head_dim = c.head_dim_v = m.bits == 4 ? (variant ? 64 : 128) : (variant ? 128 : 256);
      c.batch = 1 + n % 3;
      c.kv_heads = 1 + variant;
      c.heads = c.kv_heads * (variant ? 8 : 4);
      c.q_seq = 1;
      c.kv_seq = 1 + int(rng() % 700);
      if (m.paged) {
        c.block_size = variant ? 32 : 128;  // int8 pages: multiples of 32 (the seed)
        c.paged_rank4 = c.layout == std::string("BNSD") && variant;
        for (int b = 0; b < c.batch; ++b) c.kv_list.push_back(1 + int64_t(rng() % c.kv_seq));
      } else if (variant) {
        ragged(c, rng);
      }
      c.mask = n % 4 == 1 ? 1 : 0;
      c.mask_shape = n;
      c.lse = n % 3 == 0;
      c.kvq.bits = m.bits;
      c.kvq.key_mode = m.key;
      c.kvq.value_mode = m.value;
      c.kvq.per_tensor = m.per_tensor;
      c.kvq.channel_shape = n % 3;
      c.kvq.offset = variant == 0;
      EXPECT_LE(run_fia(c, 9400 + n), 1e-2) << describe(c);
    }
  }
}

// Q_S = 1, the combined antiquant_scale: mode 0 per channel (the layout's shape) or per
// tensor, mode 1 per token (2, B, S) fp32; int8 K/V, fp16 and bf16 queries.
TEST(FiaAntiquantGpu, DecodeCombinedScales) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::mt19937 rng(9104);
  const char* layouts[] = {"BSH", "BSND", "BNSD"};
  for (int n = 0; n < 9; ++n) {
    FiaCase c;
    c.dtype = n % 2 ? DType::kFloat16 : DType::kBFloat16;
    c.layout = layouts[n % 3];
    c.batch = 1 + n % 4;
    c.kv_heads = 1 + n % 2;
    c.heads = c.kv_heads * 4;
    c.q_seq = 1;
    c.kv_seq = 1 + int(rng() % 900);
    if (n % 2) ragged(c, rng);
    c.kvq.bits = 8;
    c.kvq.combined = true;
    c.kvq.key_mode = n / 3 == 2 ? 1 : 0;
    c.kvq.per_tensor = n / 3 == 1;
    c.kvq.offset = n % 2 == 0;
    c.lse = n % 2 == 1;
    EXPECT_LE(run_fia(c, 9500 + n), 1e-2) << describe(c);
  }
}

// Groups of the decode-kernel cases: up to 8 take the transposed tile (tokens in the MMA's
// M, heads in N: decode_transposed.cuh), 16 the row-major one.
constexpr int kDecodeGroups[] = {8, 4, 16, 1, 3, 6};

// int8 K/V whose scales vary by head and channel only run on the decode kernel at Q_S = 1
// (its split-KV walk; K's channel scales folded into q, V's applied to the output): every
// such mode and shape, offsets on and off, contiguous and paged, ragged, GQA, head dims
// 64-256.
TEST(FiaAntiquantGpu, DecodeKernelChannelScales) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::mt19937 rng(9105);
  const char* layouts[] = {"BSH", "BSND", "BNSD"};
  const int dims[] = {64, 128, 256};
  for (int n = 0; n < 12; ++n) {
    FiaCase c;
    c.layout = layouts[n % 3];
    c.dtype = n % 2 ? DType::kFloat16 : DType::kBFloat16;
    c.head_dim = c.head_dim_v = dims[n % 3];
    c.batch = 1 + n % 4;
    c.kv_heads = 1 + n % 2;
    c.heads = c.kv_heads * kDecodeGroups[n % 6];
    c.q_seq = 1;
    c.kv_seq = 16 * (1 + int(rng() % 190));  // whole 16-token views: contiguous K/V as pages (fia_decode.cpp)
    if (n % 4 == 3) {
      c.block_size = 64;
      for (int b = 0; b < c.batch; ++b) c.kv_list.push_back(1 + int64_t(rng() % c.kv_seq));
    } else if (n % 2) {
      ragged(c, rng);
    }
    c.kvq.bits = 8;
    c.kvq.combined = n % 6 == 5;
    c.kvq.key_mode = c.kvq.value_mode = n % 5 == 2 && !c.kvq.combined ? 2 : 0;
    c.kvq.per_tensor = n % 4 == 1;
    c.kvq.channel_shape = n % 3;
    c.kvq.offset = n % 3 != 1;
    c.kernel = "decode.";
    EXPECT_LE(run_fia(c, 9600 + n), 1e-2) << describe(c);
  }
}

// int8 K/V with per-token scales on the decode kernel at Q_S = 1 (K's: s = (q.k + off *
// sum(q)) * scale per key; V's: into P before P V, offsets summed per row): every
// per-token mode (1, 3, page-managed 4 and 5, the combined antiquant_mode 1, and key
// mode 0 with value mode 1), offsets on and off, contiguous and paged, ragged, GQA, head
// dims 64-256, single and split-KV walks, and scales spread over 2^-12..2^12 (the V
// scales' running power-of-two unit). Per-token scales past each batch's length are NaN.
TEST(FiaAntiquantGpu, DecodeKernelTokenScales) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::mt19937 rng(9106);
  struct Mode {
    int key, value;
    bool combined, paged;
  };
  const Mode modes[] = {{1, 1, false, false}, {3, 3, false, false}, {1, 1, true, false}, {0, 1, false, false},
                        {1, 1, false, true},  {3, 3, false, true},  {4, 4, false, true}, {5, 5, false, true},
                        {0, 1, false, true},  {1, 1, true, true}};
  const char* layouts[] = {"BSH", "BSND", "BNSD"};
  const int dims[] = {64, 128, 256};
  int n = 0;
  for (const Mode& m : modes) {
    for (int variant = 0; variant < 2; ++variant, ++n) {
      FiaCase c;
      c.layout = layouts[n % 3];
      // key mode 0 + value mode 1 takes an fp16 query (the seed).
      c.dtype = m.key == 0 || n % 2 ? DType::kFloat16 : DType::kBFloat16;
      c.head_dim = c.head_dim_v = dims[(n + variant) % 3];
      c.batch = 1 + n % 4;
      c.kv_heads = 1 + variant;
      c.heads = c.kv_heads * kDecodeGroups[n % 6];
      c.q_seq = 1;
      // Long walks split the KV (one case past 16K tokens); short ones do not.
      c.kv_seq = n == 7 ? 16384 + 32 * int(rng() % 64) : 16 * (1 + int(rng() % (variant ? 400 : 60)));
      if (m.paged) {
        c.block_size = variant ? 32 : 128;
        c.paged_rank4 = c.layout == std::string("BNSD") && variant;
        for (int b = 0; b < c.batch; ++b) c.kv_list.push_back(1 + int64_t(rng() % c.kv_seq));
      } else if (variant) {
        ragged(c, rng);
      }
      c.kvq.bits = 8;
      c.kvq.combined = m.combined;
      c.kvq.key_mode = m.key;
      c.kvq.value_mode = m.value;
      c.kvq.channel_shape = n % 3;
      c.kvq.offset = n % 3 != 2;
      c.kvq.octaves = n % 4 == 1 ? 12 : 0;
      c.kernel = "decode.";
      EXPECT_LE(run_fia(c, 9800 + n), 1e-2) << describe(c);
    }
  }
}

// int4 K/V (eight to an int32) on the decode kernel at Q_S = 1: nibbles widened in
// registers from ldmatrix, Q's dims and O's permuted to match. Every int4 mode of the seed
// (per channel in each shape, per token, per token and head, key 0 with value 1), offsets
// on and off, contiguous (int4 has no page attention), ragged, GQA, head dims 64-256,
// single and split-KV walks, scales over 2^-12..2^12 in some cases.
TEST(FiaAntiquantGpu, DecodeKernelInt4) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::mt19937 rng(9107);
  const int modes[][2] = {{0, 0}, {1, 1}, {3, 3}, {0, 1}};
  const char* layouts[] = {"BSH", "BSND", "BNSD"};
  const int dims[] = {64, 128, 256};
  int n = 0;
  for (const auto& m : modes) {
    for (int variant = 0; variant < 3; ++variant, ++n) {
      FiaCase c;
      c.layout = layouts[n % 3];
      c.dtype = n % 2 ? DType::kFloat16 : DType::kBFloat16;
      c.head_dim = c.head_dim_v = dims[(n + variant) % 3];
      c.batch = 1 + n % 4;
      c.kv_heads = 1 + variant % 2;
      c.heads = c.kv_heads * kDecodeGroups[n % 6];
      c.q_seq = 1;
      c.kv_seq = n == 4 ? 12288 + 16 * int(rng() % 64) : 16 * (1 + int(rng() % (variant ? 300 : 50)));
      if (variant == 1) ragged(c, rng);
      c.kvq.bits = 4;
      c.kvq.key_mode = m[0];
      c.kvq.value_mode = m[1];
      c.kvq.channel_shape = n % 3;
      c.kvq.offset = variant != 2;
      c.kvq.octaves = n % 4 == 2 ? 12 : 0;
      c.kernel = "decode.";
      EXPECT_LE(run_fia(c, 9900 + n), 1e-2) << describe(c);
    }
  }
}

// int4 K/V with a token's KV heads side by side (BSH, BSND) and group <= 4: one CTA serves
// two KV heads (kvpair), their groups in the transposed tile's 8 columns, each stage row
// both heads' rows. Groups 1-4, even and odd KV head counts (the last CTA of an odd count
// has one head), head dims 64 and 128, every int4 mode (per channel, per token, key 0 with
// value 1, and per token and head: both heads' scales a stage, tokhead), offsets on and
// off, ragged and split-KV walks; BNSD pairs with per-token scales only (not per head),
// and head dim 256 (whole-line rows) keeps one head a CTA.
TEST(FiaAntiquantGpu, DecodeKernelInt4KvPair) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::mt19937 rng(9131);
  const int modes[][2] = {{0, 0}, {1, 1}, {0, 1}, {3, 3}};
  const int kv_heads[] = {2, 3, 5, 8};
  const int dims[] = {128, 64, 128, 64};
  for (int n = 0; n < 16; ++n) {
    FiaCase c;
    const auto& m = modes[n % 4];
    c.layout = n % 5 == 4 ? "BNSD" : n % 2 ? "BSH" : "BSND";
    c.dtype = n % 3 ? DType::kBFloat16 : DType::kFloat16;
    c.head_dim = c.head_dim_v = n == 14 ? 256 : dims[n % 4];
    c.batch = 1 + n % 3;
    c.kv_heads = kv_heads[(n / 4 + n) % 4];
    c.heads = c.kv_heads * (1 + (n + n / 4) % 4);
    c.q_seq = 1;
    c.kv_seq = n % 6 == 5 ? 8192 + 16 * int(rng() % 64) : 16 * (1 + int(rng() % 200));
    if (n % 4 == 1) ragged(c, rng);
    c.kvq.bits = 4;
    c.kvq.key_mode = m[0];
    c.kvq.value_mode = m[1];
    c.kvq.channel_shape = n % 3;
    c.kvq.offset = n % 3 != 1;
    c.kvq.octaves = n % 5 == 2 ? 12 : 0;
    c.kernel = "decode.";
    const bool per_token = m[0] == 1 || m[1] == 1;
    c.kv_pair = c.head_dim <= 128 && (c.layout != std::string("BNSD") || per_token) ? 1 : 0;
    EXPECT_LE(run_fia(c, 9950 + n), 1e-2) << describe(c);
  }
  // Per token and head (mode 3) at head dim 128: BSND and BSH pair (odd head counts too),
  // BNSD does not.
  for (int n = 0; n < 6; ++n) {
    FiaCase c;
    c.layout = n == 5 ? "BNSD" : n % 2 ? "BSH" : "BSND";
    c.dtype = n % 2 ? DType::kBFloat16 : DType::kFloat16;
    c.batch = 1 + n % 3;
    c.kv_heads = n % 3 == 0 ? 3 : 2 + 2 * (n % 2);
    c.heads = c.kv_heads * (1 + n % 4);
    c.q_seq = 1;
    c.kv_seq = n == 4 ? 8192 + 48 : 16 * (1 + int(rng() % 200));
    if (n % 3 == 1) ragged(c, rng);
    c.kvq.bits = 4;
    c.kvq.key_mode = c.kvq.value_mode = 3;
    c.kvq.offset = n % 2 == 0;
    c.kvq.octaves = n % 3 == 2 ? 12 : 0;
    c.kernel = "decode.";
    c.kv_pair = n == 5 ? 0 : 1;
    EXPECT_LE(run_fia(c, 9970 + n), 1e-2) << describe(c);
  }
}

}  // namespace
}  // namespace attnjit
