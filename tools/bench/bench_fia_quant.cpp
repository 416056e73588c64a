// attnjit-bench --fia-quant (and the end of --fia): fused_infer_attention_score with
// quantised K/V (antiquant) beside the 16-bit KV of the same shape. Decode: TB/s of
// the KV bytes stored (issue 12's goals: int8 >= 3.9, int4 >= 3.6). Prefill: TFLOP/s
// (goal: int8 >= 90% of the 16-bit figure).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "attnjit/error.hpp"
#include "attnjit/fia.hpp"
#include "bench_cases.hpp"
#include "common/env_guard.hpp"
#include "bench_timing.hpp"

namespace attnjit::bench {

namespace {

using testing::DeviceTensor;

constexpr int kHeads = 32, kKvHeads = 8, kHd = 128;

// One KV variant: 16-bit, or int8/int4 with per-channel (mode 0), per-token (mode 1) or
// per-token-and-head (mode 3) scales.
struct Variant {
  const char* name;  // --kv picks one by its first word and mode: bf16, int8, int8-token, int8-head, int4, ...
  int bits;  // 16, 8, 4
  int mode;  // separate key/value_antiquant_mode (decode); prefill uses the combined scales
  bool int8_qkv = false;  // the full int8 path: int8 query too, dequant_scale1 / quant_scale1 / dequant_scale2
};

struct Set {
  DeviceTensor q, k, v, out, ks, vs, ko, vo, ds1, qs1, ds2;
};


// Q/K/V/out for batch B, query S qs, KV length L; `combined`: antiquant_scale (2, N, D).
// BNSD (head_major): FIA's head-major layout, one KV head's tokens contiguous.
void make(Set& x, int B, int qs, int L, const Variant& var, DType qd, bool combined, std::mt19937& rng,
          bool head_major = false) {
  const int pack = var.bits == 4 ? 8 : 1;
  const DType kvd = var.bits == 16 ? qd : var.bits == 8 ? DType::kInt8 : DType::kInt32;
  auto shape = [&](int s, int n, int d) {
    return head_major ? std::vector<int64_t>{B, n, s, d} : std::vector<int64_t>{B, s, n, d};
  };
  x.q = DeviceTensor(var.int8_qkv ? DType::kInt8 : qd, shape(qs, kHeads, kHd));
  x.out = DeviceTensor(qd, shape(qs, kHeads, kHd));
  x.k = DeviceTensor(kvd, shape(L, kKvHeads, kHd / pack));
  x.v = DeviceTensor(kvd, shape(L, kKvHeads, kHd / pack));
  const size_t q_n = size_t(B) * qs * kHeads * kHd;
  if (var.int8_qkv) {  // any bytes are valid int8
    std::vector<uint8_t> raw(q_n);
    for (auto& b : raw) b = uint8_t(rng());
    x.q.upload(raw);
  } else {
    x.q.upload(random_bytes(q_n, qd, rng));
  }
  const size_t kv_n = size_t(B) * L * kKvHeads * kHd / pack;
  if (var.bits == 16) {
    x.k.upload(random_bytes(kv_n, kvd, rng));
    x.v.upload(random_bytes(kv_n, kvd, rng));
  } else {  // any bytes are valid int8 / packed int4
    std::vector<uint8_t> raw(kv_n * dtype_size(kvd));
    for (auto& b : raw) b = uint8_t(rng());
    x.k.upload(raw);
    x.v.upload(raw);
  }
  if (var.bits == 16) return;
  auto fill = [&](DeviceTensor& t, DType d, std::vector<int64_t> shape, float value) {
    t.allocate(d, shape);
    t.upload_floats(std::vector<float>(size_t(t.view.numel()), value));
  };
  if (var.int8_qkv) {  // logits and V of order 1 from raw int8
    fill(x.ds1, DType::kFloat32, {1}, 1.0f / (127.0f * 127.0f));
    fill(x.qs1, DType::kFloat32, {1}, 127.0f);
    fill(x.ds2, DType::kFloat32, {1}, 1.0f / (127.0f * 127.0f));
  } else if (combined) {
    fill(x.ks, qd, {2, kKvHeads, kHd}, 1.0f / 64);
    fill(x.ko, qd, {2, kKvHeads, kHd}, 0.5f);
  } else if (var.mode == 0) {
    fill(x.ks, qd, {1, kKvHeads, 1, kHd}, 1.0f / 64);
    fill(x.vs, qd, {1, kKvHeads, 1, kHd}, 1.0f / 64);
    fill(x.ko, qd, {1, kKvHeads, 1, kHd}, 0.5f);
    fill(x.vo, qd, {1, kKvHeads, 1, kHd}, 0.5f);
  } else {  // per token: (1, B, S) at Q_S = 1, (B, S) at Q_S > 1; per token and head (B, N, S)
    const std::vector<int64_t> shape = var.mode == 3 ? std::vector<int64_t>{B, kKvHeads, L}
                                       : qs > 1      ? std::vector<int64_t>{B, L}
                                                     : std::vector<int64_t>{1, B, L};
    fill(x.ks, DType::kFloat32, shape, 1.0f / 64);
    fill(x.vs, DType::kFloat32, shape, 1.0f / 64);
    fill(x.ko, DType::kFloat32, shape, 0.5f);
    fill(x.vo, DType::kFloat32, shape, 0.5f);
  }
}

FiaArgs args(const Set& x, const Variant& var, bool combined, const char* layout = "BSND") {
  FiaArgs a;
  a.query = x.q.view;
  a.key = x.k.view;
  a.value = x.v.view;
  a.attention_out = x.out.view;
  a.input_layout = layout;
  a.num_heads = kHeads;
  a.num_key_value_heads = kKvHeads;
  a.scale = 1.0 / std::sqrt(double(kHd));
  if (var.bits == 16) return a;
  if (var.int8_qkv) {
    a.dequant_scale1 = x.ds1.view;
    a.quant_scale1 = x.qs1.view;
    a.dequant_scale2 = x.ds2.view;
  } else if (combined) {
    a.antiquant_scale = x.ks.view;
    a.antiquant_offset = x.ko.view;
  } else {
    a.key_antiquant_scale = x.ks.view;
    a.value_antiquant_scale = x.vs.view;
    a.key_antiquant_offset = x.ko.view;
    a.value_antiquant_offset = x.vo.view;
    a.key_antiquant_mode = a.value_antiquant_mode = var.mode;
  }
  return a;
}

}  // namespace

int bench_fia_quant(const Options& o) {
  const Variant decode_variants[] = {
      {"bf16", 16, 0},           {"int8 per-channel", 8, 0}, {"int8 per-token", 8, 1}, {"int8 per-token-and-head", 8, 3},
      {"int4 per-channel", 4, 0}, {"int4 per-token", 4, 1}, {"int4 per-token-and-head", 4, 3}};
  struct Shape {
    int batch, len;
  };
  const Shape shapes[] = {{128, 4096}, {16, 32768}};
  const bool head_major = std::string(o.layout) == "BNSD";
  if (!head_major && std::string(o.layout) != "BSND")
    throw Error(ErrorCode::kInvalidArgument, fmt::format("--layout '{}': expected BSND or BNSD", o.layout));
  fmt::print("\n{:<52} {:>9} {:>8} {:>8}\n",
             fmt::format("fia quantised KV decode (D128, N 32/8, {}, Q_S 1)", o.layout), "us", "TB/s", "vs bf16");
  std::mt19937 rng(12);
  for (const Shape& sh : shapes) {
    if (o.only_batch && sh.batch != o.only_batch) continue;
    double bf16_ms = 0;
    for (const Variant& var : decode_variants) {
      const std::string key = std::string(var.name).substr(0, 4) + (var.mode == 1 ? "-token" : var.mode == 3 ? "-head" : "");
      if (o.only_kv && key != o.only_kv) continue;
      const double kv = 2.0 * sh.batch * sh.len * kKvHeads * kHd * var.bits / 8.0;
      const int sets = std::max(1, int(std::ceil(3 * kL2Bytes / kv)));
      std::vector<Set> s(static_cast<size_t>(sets));
      for (auto& x : s) make(x, sh.batch, 1, sh.len, var, DType::kBFloat16, false, rng, head_major);
      const std::string kernel = prewarm_fused_infer_attention_score(args(s[0], var, false, o.layout));
      const double ms = time_median(
          sets, o, [&](int i) { fused_infer_attention_score(args(s[size_t(i)], var, false, o.layout)); });
      if (var.bits == 16) bf16_ms = ms;
      fmt::print("  {:<50} {:>9.2f} {:>8.2f} {:>7.2f}x  {}\n", fmt::format("B{} KV{} {}", sh.batch, sh.len, var.name),
                 ms * 1e3, kv / (ms * 1e-3) / 1e12, bf16_ms / ms, kernel);
    }
  }
  if (o.only_kv || o.only_batch || head_major) return 0;  // decode rows picked (profiling, the layout)
  // Prefill: combined per-channel int8 (the seed's Q_S > 1 path: fp16 query) against fp16 K/V,
  // dequantised first (the default at these rows) and in the kernel (ATTNJIT_FIA_DEQUANT_FIRST=0);
  // then the full int8 path (int8 Q/K/V, fp16 output), which always dequantises first.
  fmt::print("\n{:<52} {:>9} {:>8} {:>8}\n", "fia quantised KV prefill (fp16, B4 S4096 N 32/8 D128)", "ms",
             "TFLOP/s", "vs fp16");
  struct Row {
    Variant var;
    const char* dq_first;  // ATTNJIT_FIA_DEQUANT_FIRST for the row (null: unset)
  };
  const Row prefill_rows[] = {{{"fp16", 16, 0}, nullptr},
                              {{"int8 per-channel, dequantised first", 8, 0}, nullptr},
                              {{"int8 per-channel, in the kernel", 8, 0}, "0"},
                              {{"int8 Q/K/V (the full int8 path)", 8, 0, true}, nullptr}};
  for (bool causal : {false, true}) {
    double fp16_ms = 0;
    for (const Row& row : prefill_rows) {
      const Variant& var = row.var;
      testing::EnvGuard knob("ATTNJIT_FIA_DEQUANT_FIRST", row.dq_first);
      Set x;
      make(x, 4, 4096, 4096, var, DType::kFloat16, true, rng);
      DeviceTensor mask(DType::kUInt8, {2048, 2048});
      mask.zero();
      FiaArgs a = args(x, var, true);
      if (causal) a.sparse_mode = 3, a.atten_mask = mask.view;
      const std::string kernel = prewarm_fused_infer_attention_score(a);
      Options po = o;
      po.iters = std::max(5, o.iters / 5);
      const double ms = time_median(1, po, [&](int) { fused_infer_attention_score(a); });
      if (var.bits == 16) fp16_ms = ms;
      const double flops = 2.0 * 4096 * 4096.0 * (2 * kHd) * kHeads * 4 * (causal ? 0.5 : 1.0);
      fmt::print("  {:<50} {:>9.3f} {:>8.1f} {:>7.2f}x  {}\n", fmt::format("{} {}", causal ? "causal" : "full", var.name),
                 ms, flops / (ms * 1e-3) / 1e12, fp16_ms / ms, kernel);
    }
  }
  // Short queries (speculative or chunked steps, Q_S 16 x group 4 = 64 rows per KV head):
  // per-token int8 (bf16, the seed's only Q_S > 1 separate mode) in the kernel, the
  // default there, against dequantised first; TB/s of the K/V bytes stored.
  fmt::print("\n{:<52} {:>9} {:>8} {:>8}\n", "fia quantised KV, Q_S 16 (bf16, B32 KV4096 N 32/8)", "us", "TB/s",
             "vs bf16");
  const Row short_rows[] = {{{"bf16", 16, 0}, nullptr},
                            {{"int8 per-token, in the kernel", 8, 1}, nullptr},
                            {{"int8 per-token, dequantised first", 8, 1}, "1"}};
  double bf16_ms = 0;
  for (const Row& row : short_rows) {
    const Variant& var = row.var;
    testing::EnvGuard knob("ATTNJIT_FIA_DEQUANT_FIRST", row.dq_first);
    constexpr int kB = 32, kL = 4096;
    const double kv = 2.0 * kB * kL * kKvHeads * kHd * var.bits / 8.0;
    const int sets = std::max(1, int(std::ceil(3 * kL2Bytes / kv)));
    std::vector<Set> s(static_cast<size_t>(sets));
    for (auto& x : s) make(x, kB, 16, kL, var, DType::kBFloat16, false, rng);
    const std::string kernel = prewarm_fused_infer_attention_score(args(s[0], var, false));
    const double ms = time_median(sets, o, [&](int i) { fused_infer_attention_score(args(s[size_t(i)], var, false)); });
    if (var.bits == 16) bf16_ms = ms;
    fmt::print("  {:<50} {:>9.2f} {:>8.2f} {:>7.2f}x  {}\n", var.name, ms * 1e3, kv / (ms * 1e-3) / 1e12, bf16_ms / ms,
               kernel);
  }
  return 0;
}

}  // namespace attnjit::bench
