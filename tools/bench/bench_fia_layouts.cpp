// attnjit-bench --fia-layouts: fused_infer_attention_score prefill over paged K/V (block_size
// 128 / 256 / 512, shuffled block tables) and over TND variable lengths, beside the same
// work contiguous (BSND, one length), on both backends: issue 13 asks for these measured.
// TFLOP/s counts 2 * (D_qk + D_v) * H per visible (query, key) pair: L_q * L_kv a sequence,
// half of it under the causal rule (sparse_mode 3, as bench_fia counts it). TND is the seed's
// DeepSeek form: Q/K head dim 192, V 128.
#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "attnjit/error.hpp"
#include "attnjit/fia.hpp"
#include "bench_cases.hpp"
#include "common/device_tensor.hpp"
#include "driver/cuda_driver.hpp"

namespace attnjit::bench {

namespace {
constexpr double kGemmTflops = 790.0;  // measured H200 bf16 GEMM rate (DESIGN.md)
constexpr int kHeads = 32, kKvHeads = 8, kHd = 128;

void fill(testing::DeviceTensor& t, size_t n, std::mt19937& rng) {
  const auto vals = testing::random_values(std::min<size_t>(n, 1 << 22), rng);
  std::vector<float> full(n);
  for (size_t i = 0; i < n; ++i) full[i] = vals[i % vals.size()];
  t.upload_floats(full);
}

void report(const std::string& what, double ms, double pairs, int dims = 2 * kHd) {
  if (ms < 0) return;
  const double tflops = 2.0 * pairs * dims * kHeads / (ms * 1e-3) / 1e12;
  fmt::print("{:<52} {:>10.3f} {:>10.1f} {:>7.1f}%\n", what, ms, tflops, 100.0 * tflops / kGemmTflops);
}
}  // namespace

int bench_fia_layouts(const Options& o) {
  std::mt19937 rng(7);
  testing::DeviceTensor mask(DType::kUInt8, {2048, 2048});
  mask.zero();
  const Backend backends[] = {Backend::kXqa, Backend::kTrtllmGen};
  auto name = [](Backend b) { return b == Backend::kXqa ? "xqa" : "trtllm-gen"; };

  // Paged K/V: B4 S8K, 32 query heads on 8 KV heads, D128 (the GQA shape of bench_fia).
  constexpr int B = 4, S = 8192;
  fmt::print("{:<52} {:>10} {:>10} {:>8}\n", "fia prefill paged K/V (bf16, B4 S8K H32/8 D128)", "ms", "TFLOP/s",
             "% GEMM");
  testing::DeviceTensor q(DType::kBFloat16, {B, S, kHeads, kHd}), o_t(DType::kBFloat16, {B, S, kHeads, kHd});
  fill(q, size_t(B) * S * kHeads * kHd, rng);
  for (int bs : {0, 128, 256, 512}) {  // 0: contiguous BSND, the reference row
    const int blocks = bs ? B * (S / bs) : 0;
    testing::DeviceTensor k = bs ? testing::DeviceTensor(DType::kBFloat16, {blocks, bs, kKvHeads * kHd})
                                 : testing::DeviceTensor(DType::kBFloat16, {B, S, kKvHeads, kHd});
    testing::DeviceTensor v = bs ? testing::DeviceTensor(DType::kBFloat16, {blocks, bs, kKvHeads * kHd})
                                 : testing::DeviceTensor(DType::kBFloat16, {B, S, kKvHeads, kHd});
    fill(k, size_t(B) * S * kKvHeads * kHd, rng);
    fill(v, size_t(B) * S * kKvHeads * kHd, rng);
    testing::DeviceTensor bt(DType::kInt32, {B, std::max(1, S / std::max(bs, 1))});
    if (bs) {
      std::vector<int> ids(blocks);
      std::iota(ids.begin(), ids.end(), 0);
      std::shuffle(ids.begin(), ids.end(), rng);
      bt.upload_pod(ids);
    }
    for (bool causal : {false, true})
      for (Backend b : backends) {
        FiaArgs a = fia_prefill_args(q.view, k.view, v.view, o_t.view, "BSND", kHeads, kKvHeads, kHd, b,
                                     causal ? &mask.view : nullptr);
        if (bs) {
          a.block_table = bt.view;
          a.block_size = bs;
          a.actual_seq_lengths_kv.assign(B, S);
        }
        const std::string what = fmt::format("{} {} {}", bs ? fmt::format("block_size {}", bs) : std::string("contiguous"),
                                             causal ? "causal" : "full", name(b));
        report(what, time_fia_call(a, o.iters, what, 52), double(B) * S * double(S) * (causal ? 0.5 : 1.0));
      }
  }

  // TND: 16 sequences of 512 to 3584 tokens (~32K in all), 32 heads, Q/K 192 and V 128.
  constexpr int kSeqs = 16;
  std::vector<int64_t> lens(kSeqs);
  for (auto& l : lens) l = 512 + 128 * int64_t(rng() % 25);
  const int64_t total = std::accumulate(lens.begin(), lens.end(), int64_t(0));
  std::vector<int64_t> cum(kSeqs);
  std::partial_sum(lens.begin(), lens.end(), cum.begin());
  double pairs = 0;
  for (int64_t l : lens) pairs += double(l) * double(l);
  fmt::print("{:<52} {:>10} {:>10} {:>8}\n",
             fmt::format("fia prefill TND (bf16, {} seqs, {} tokens, H32 D192/128)", kSeqs, total), "ms", "TFLOP/s",
             "% GEMM");
  constexpr int kTndQk = 192, kTndV = 128;
  testing::DeviceTensor tq(DType::kBFloat16, {total, kHeads, kTndQk}), tk(DType::kBFloat16, {total, kHeads, kTndQk}),
      tv(DType::kBFloat16, {total, kHeads, kTndV}), to(DType::kBFloat16, {total, kHeads, kTndV});
  fill(tq, size_t(total) * kHeads * kTndQk, rng);
  fill(tk, size_t(total) * kHeads * kTndQk, rng);
  fill(tv, size_t(total) * kHeads * kTndV, rng);
  for (bool causal : {false, true})
    for (Backend b : backends) {
      FiaArgs a = fia_prefill_args(tq.view, tk.view, tv.view, to.view, "TND", kHeads, kHeads, kTndQk, b,
                                   causal ? &mask.view : nullptr);
      a.actual_seq_lengths = cum;
      a.actual_seq_lengths_kv = cum;
      const std::string what = fmt::format("TND {} {}", causal ? "causal" : "full", name(b));
      report(what, time_fia_call(a, o.iters, what, 52), pairs * (causal ? 0.5 : 1.0), kTndQk + kTndV);
    }
  return 0;
}

}  // namespace attnjit::bench
