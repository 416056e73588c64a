// Grid planning shared by the decode-family ops (single_decode, xqa): split-KV
// choice, workspace sizing, then the generic launch (ops/common/launch.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "attnjit/runtime.hpp"
#include "decode/decode_params.cuh"
#include "driver/cuda_driver.hpp"
#include "spec/kernel_spec.hpp"

namespace attnjit::ops {

struct DecodeShape {
  int batch = 1;
  int num_kv_heads = 1;
  int group = 1;
  int q_seq_len = 1;
  int head_dim = 128;
  int max_seq_len = 1;
  // Keys left of each query row it sees (-1: all). The kernel walks only
  // [first visible tile, seq_len), so splits are planned over the visible span.
  int window_left = -1;
  // Query rows per CTA: 16, or kDecodeSplitMRows where the kernel has split-M
  // (decode_rows_per_cta in decode_generator.hpp decides).
  int rows_per_cta = 16;
  // KV heads per CTA: 2 with the kvpair feature (launch_decode sets it from the spec).
  int kv_heads_per_cta = 1;
};

constexpr int kDecodeRowsPerCta = 16;   // query rows per CTA outside split-M, and per workspace partial
// Longest KV a decode call may address: the kernel forms token indices in int, a
// split start plus up to a few hundred tokens of prologue, so keep clear of 2^31.
constexpr int64_t kMaxDecodeSeqLen = (int64_t(1) << 31) - (int64_t(1) << 16);
constexpr int kMaxBlocksPerSmForSplit = 4;

int decode_row_blocks(int group, int q_seq_len, int rows_per_cta = kDecodeRowsPerCta);
int64_t decode_base_ctas(const DecodeShape& s);  // CTAs before splitting (s.rows_per_cta rows each)
int64_t decode_head_ctas(const DecodeShape& s);  // the grid's KV-head CTAs: num_kv_heads / kv_heads_per_cta, rounded up
// 16-row blocks before splitting: the workspace holds one partial per block and
// split, and there is one semaphore per block (at least one per CTA).
int64_t decode_base_blocks16(const DecodeShape& s);

// The fewest tokens a split takes by length (decode and MLA; decode's short sequences split
// further, to one CTA an SM: fill_splits): below ~256 a split's partial and its share
// of the serial merge cost more than the fill gains (H200, 2026-12-01: single_decode L4K 16
// splits 12.2 us, 32 splits of 128 tokens 13.9 us; xqa B1 L8K 33 splits of 248 tokens 16.5 us,
// 17 splits 20.2 us).
constexpr int kMinTokensPerSplit = 256;

// Splits minimising waves x (tokens per split + fixed cost): fills the GPU for
// small batches and evens out the last wave for large ones. At most ~4 waves'
// worth and 256 splits, never fewer than kMinTokensPerSplit tokens per split. Pure: tested on the CPU.
// min_tokens: kMinTokensPerSplit (decode's ATTNJIT_DECODE_MIN_SPLIT_TOKENS may change it).
int choose_splits(int64_t base_ctas, int max_seq_len, int slots, int min_tokens = kMinTokensPerSplit);
// Short sequences (decode only): below kMinTokensPerSplit tokens a split still pays while the
// grid has fewer CTAs than SMs. Each CTA's warps keep only a few tiles in flight, so a grid of
// few CTAs leaves most of DRAM's latency exposed. The splits then grow to one CTA an SM, each
// at least one `granule` of tokens, and at most kMaxFillSplits: min(ceil(len / granule),
// sms / base_ctas, kMaxFillSplits), at least 1. H100, xqa bf16 hd128 g8 B1 (8 CTAs before
// splitting: 16 splits) beside FlashInfer's XQA, us: L1K 10.7 -> 7.9 (FlashInfer 8.9), L2K
// 12.2 -> 9.2 (10.0); fp8 L2K 10.8 -> 8.4 (8.2) (PERFORMANCE.md, fortieth session).
int fill_splits(int64_t base_ctas, int len, int sms, int granule);
// 16 is the most the fill was measured at; with fewer KV heads more splits would fill the SMs,
// but each adds to the last CTA's serial merge (unmeasured there).
constexpr int kMaxFillSplits = 16;
constexpr int kMinSplitGranule = 16;  // the smallest split granule (a 16-token warp tile)
// Bounds plan_splits' count on sm_count SMs, whatever the occupancy and split granule.
int max_splits(const DecodeShape& s, int sm_count);

// What a launch splits into: the split count after rounding each split to whole
// units of `granule` tokens (the kernel's split granule: a warp tile, which never
// spans two pages), and its tokens.
struct SplitPlan {
  int splits = 1;
  int tokens_per_split = 1;
};
// sms: the GPU's SMs; slots: sms x the kernel's CTAs an SM (at most kMaxBlocksPerSmForSplit).
SplitPlan plan_splits(const DecodeShape& s, int sms, int slots, int granule);
// The KV tokens a request's splits are planned over: max_seq_len, or with a window
// the union of its rows' windows (window_left + q_seq_len), whichever is less. The
// kernel's start rounds down to a tile; the last split takes those extra keys
// (decode_split_range in decode/decode_params.cuh). Pure: tested on the CPU.
int decode_visible_len(const DecodeShape& s);

// Whether a batch-1 call (xqa, or single_decode's one request) of spec and shape, on `sms`
// SMs, takes batch 1's kernel of 32-token warp tiles (decode_batch1_tile32): past
// kBatch1Tile32AboveTokens visible tokens, where that kernel's split plan runs in one wave (at
// most one CTA an SM). H100, bf16 hd128 g8 p32, 8 KV heads, beside FlashInfer's XQA, us,
// 16-token -> 32-token kernel:
//   L4K 11.08 -> 11.33 (the same 16 splits of 256 tokens: a warp has two 32-token tiles
//       against four 16-token ones), L6K 18.1 -> 12.95 (the 16-token plan's 192 CTAs leave 60
//       SMs with two), L8K 16.45 -> 15.5, L16K 33.0 -> 31.9, L32K 57.2 -> 55.1;
//   L64K 103.1 -> 100.6 and L128K 192.5 -> 191.7 at one wave (16 splits; plan_splits keeps a
//   one-CTA-an-SM kernel to one wave there) (PERFORMANCE.md, forty-third session).
constexpr int kBatch1Tile32AboveTokens = 4096;
bool decode_batch1_takes_tile32(const spec::KernelSpec& spec, const DecodeShape& shape, int sms);
// The SMs plan_xqa assumes where neither the call (sm_count) nor a device says (prewarm for an
// arch): the H100's and the H200's.
constexpr int kNominalSms = 132;

size_t decode_workspace_bytes(const DecodeShape& s, int splits);
size_t decode_semaphore_count(const DecodeShape& s);
// An upper bound on decode_workspace_bytes over every launch whose 16-row blocks
// are at most largest's and whose sequences are at most largest.max_seq_len, on
// sm_count SMs: blocks x splits <= min(blocks x K, C + blocks - 1) for K the split
// cap by length and C the cap by waves (plan_splits caps split-M launches by their
// 16-row blocks too), and both grow with blocks.
size_t decode_workspace_bound(const DecodeShape& largest, int sm_count);

struct DecodeLaunch {
  const spec::KernelSpec* spec = nullptr;
  DecodeShape shape;
  int device = -1;   // the current device; -1: ask the driver
  int sm_count = 0;  // 0: the device's
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  unsigned* semaphores = nullptr;
  size_t semaphore_count = 0;
  const char* workspace_name = "workspace_buffer";
  const char* semaphores_name = "semaphores";
  bool pdl = false;
  bool use_runtime_scratch = false;  // single_decode: the runtime owns the scratch
};

// A caller-owned workspace and semaphores (xqa) large enough for `splits`, else
// Error(kInvalidArgument) naming them. Pure: tested on the CPU.
void require_caller_scratch(const DecodeLaunch& launch, int splits);

// A kernel with the transposed tile (DecodeTiling::transposed: one query row per head,
// at most 8 rows) launched with more rows is a bug in the op that chose it:
// Error(kInternal). Pure: tested on the CPU.
void require_rows_fit_the_tile(const spec::KernelSpec& spec, const DecodeShape& shape);

// Plans the splits from the loaded kernel's metadata (its split granule and
// occupancy), fills the split fields of `p` and launches through the generic
// launch_kernel<DecodeParams>. Returns the number of splits used.
int launch_decode(Runtime& rt, const DecodeLaunch& launch, DecodeParams& p, Stream stream);

}  // namespace attnjit::ops
