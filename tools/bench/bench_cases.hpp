// attnjit-bench cases: xqa and single_decode at the issue shapes, timed with
// CUDA events over rotating input sets larger than L2.
#pragma once

#include <string>
#include <vector>

#include "attnjit/fia.hpp"
#include "attnjit/tensor.hpp"

namespace attnjit::bench {

constexpr double kReadRooflineTBs = 4.46;  // measured H200 HBM read bandwidth

struct Result {
  std::string op, shape, dtype;
  double ms = 0;        // median
  double bytes = 0;
  double tbs() const { return bytes / (ms * 1e-3) / 1e12; }
  double pct() const { return 100.0 * tbs() / kReadRooflineTBs; }
  int splits = 0;
  double plain_ms = 0;  // a windowed row: the plain sequence of the window's length (--window)
};

struct Options {
  int iters = 50;
  int warmup = 10;
  int only_batch = 0;             // --batch N: only the xqa shape with this batch
  int seq_len = 0;                // --len L: the xqa shapes at this seq_len instead (a fixed-cost fit)
  const char* only_kv = nullptr;  // --kv NAME: only this KV dtype ("bf16", "fp8_e4m3")
  const char* layout = "BSND";    // --layout BNSD: --fia-quant's decode rows in FIA's head-major layout
  int only_heads = 0;             // --heads N: only the --mla shapes with this many heads (one kernel under ncu)
  const char* only_backend = nullptr;  // --backend xqa|trtllm-gen: only this --mla backend
  int only_q_len = 0;             // --q-len N: only the --mla shapes with this q_len_per_request
};

std::vector<Result> bench_xqa(DType kv_dtype, const Options& o);
// Issue 9 item 1: window 4096 on 4 sequences at L 8K / 32K / 128K, window 32768 on
// 128K, and window 4096 with q_seq_len 3 on 32K, each after the plain sequence of
// what the window holds; a windowed row carries that time (plain_ms), and should be
// within 10% of it.
std::vector<Result> bench_xqa_window(DType kv_dtype, const Options& o);
// The same for single_decode's window_left (32 q heads, 8 KV heads): L 32K / 128K
// under window 4096, 128K under 32768.
std::vector<Result> bench_single_decode_window(DType kv_dtype, const Options& o);
std::vector<Result> bench_single_decode(DType kv_dtype, const Options& o);
// fused_infer_attention_score prefill TFLOP/s at the issue 11 shapes (bench_fia.cpp),
// then its decode rows (bench_fia_decode below).
// prefill_only (--fia-prefill): only the prefill rows, only the wgmma (trtllm-gen) kernel
// (tuning sweeps of its knobs).
int bench_fia(int iters, bool prefill_only = false);
// The median ms of `iters` timed fused_infer_attention_score calls after three untimed
// ones; -1, printing `what` (in `width` columns) and the error, where the call is refused.
double time_fia_call(FiaArgs& a, int iters, const std::string& what, int width);
// A prefill call's arguments: q/k/v/out in `layout`, scale 1 / sqrt(head_dim), and with
// `causal_mask` (the 2048 x 2048 mask) sparse_mode 3; paging and lengths are the caller's.
FiaArgs fia_prefill_args(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                         const char* layout, int heads, int kv_heads, int head_dim, Backend backend,
                         const TensorView* causal_mask);
// FIA at Q_S = 1 against xqa (and single_decode at batch 1) on the same shapes:
// TB/s and the ratio (issue 11: >= 95% of xqa's). bench_fia_decode.cpp.
int bench_fia_decode(const Options& o);
// Issue 13: prefill over paged K/V (block_size 128-512) and TND variable lengths beside the
// same work contiguous, both backends (bench_fia_layouts.cpp).
int bench_fia_layouts(const Options& o);
// MLA inside FIA (query_rope/key_rope) beside batch_decode_mla, same shapes: TB/s and the ratio.
int bench_fia_mla(const Options& o);
// Issue 12: B = 16 over a shared prefix against B = 1 and against the prefix copied into
// every batch (bench_fia_prefix.cpp): a P-token prefix should cost ~P tokens of reads.
int bench_fia_prefix(const Options& o);
// Issue 12: quantised K/V (int8, int4) beside 16-bit KV of the same shape: decode TB/s of
// the bytes stored, prefill TFLOP/s (bench_fia_quant.cpp).
int bench_fia_quant(const Options& o);
// Issue 10: batch_decode_mla (bf16, page 64) at the shapes; prints TB/s and TFLOP/s.
std::vector<Result> bench_mla(const Options& o);
// --startup's MLA rows: host cost per batch_decode_mla call, its plan and its tensor map
// (bench_mla_host.cpp); skipped when the store lacks the kernel.
int mla_host_overhead();

}  // namespace attnjit::bench
