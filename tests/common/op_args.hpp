// Valid argument sets for the decode-family ops, with fake device pointers: the
// CPU tests of argument validation start from these and break one thing at a time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attnjit/decode.hpp"
#include "attnjit/fia.hpp"
#include "attnjit/mla.hpp"
#include "attnjit/xqa.hpp"
#include "ops/decode/decode_spec.hpp"
#include "ops/fia/fia_plan.hpp"

namespace attnjit::testing {

inline const spec::Arch kPlanArch{90, true};

// Never dereferenced: planning only looks at the addresses (alignment, null).
inline void* fake(uintptr_t addr) { return reinterpret_cast<void*>(addr); }

// xqa: batch 2, 2 KV heads x group 4, head_dim 128, pages of 32, 4 pages per sequence.
constexpr int kBatch = 2, kKvHeads = 2, kGroup = 4, kHeads = kKvHeads * kGroup, kHd = 128, kPage = 32,
              kPagesPerSeq = 4, kPages = kBatch * kPagesPerSeq;

inline XqaArgs valid_xqa(KvLayout layout = KvLayout::kNHD, int q_seq_len = 1) {
  XqaArgs a;
  const DType dt = DType::kBFloat16;
  if (q_seq_len > 1) {
    a.q = TensorView::contiguous(fake(0x10000), dt, {kBatch, 1, q_seq_len, kHeads, kHd});
    a.output = TensorView::contiguous(fake(0x400000), dt, {kBatch, 1, q_seq_len, kHeads, kHd});
    const int64_t words = (q_seq_len + 31) / 32;
    a.mask = TensorView::contiguous(fake(0x500000), DType::kUInt16, {kBatch, q_seq_len, words * 2});
  } else {
    a.q = TensorView::contiguous(fake(0x10000), dt, {kBatch, 1, kHeads, kHd});
    a.output = TensorView::contiguous(fake(0x400000), dt, {kBatch, 1, kHeads, kHd});
  }
  a.q_seq_len = q_seq_len;
  if (layout == KvLayout::kNHD) {
    a.k_cache = TensorView::contiguous(fake(0x100000), dt, {kPages, kPage, kKvHeads, kHd});
    a.v_cache = TensorView::contiguous(fake(0x200000), dt, {kPages, kPage, kKvHeads, kHd});
  } else {
    a.k_cache = TensorView::contiguous(fake(0x100000), dt, {kPages, kKvHeads, kPage, kHd});
    a.v_cache = TensorView::contiguous(fake(0x200000), dt, {kPages, kKvHeads, kPage, kHd});
  }
  a.kv_layout = layout;
  a.page_table = TensorView::contiguous(fake(0x300000), DType::kInt32, {kBatch, kPagesPerSeq});
  a.seq_lens = TensorView::contiguous(fake(0x300100), DType::kUInt32, {kBatch, 1});
  a.num_kv_heads = kKvHeads;
  a.page_size = kPage;
  return a;
}

// single_decode_with_kv_cache: 32 q heads, 8 KV heads, head_dim 128, kv_len 1000.
constexpr int kSdHeads = 32, kSdKvHeads = 8, kSdLen = 1000;

struct SingleDecodeCall {
  TensorView q, k, v, out, lse;
  SingleDecodeOptions o;
  bool with_lse = false;
  ops::SingleDecodePlan plan() const {
    return ops::plan_single_decode(q, k, v, out, o, with_lse ? &lse : nullptr, kPlanArch);
  }
};

inline SingleDecodeCall valid_single(KvLayout layout = KvLayout::kNHD) {
  SingleDecodeCall c;
  const DType dt = DType::kFloat16;
  c.q = TensorView::contiguous(fake(0x10000), dt, {kSdHeads, kHd});
  c.out = TensorView::contiguous(fake(0x20000), dt, {kSdHeads, kHd});
  if (layout == KvLayout::kNHD) {
    c.k = TensorView::contiguous(fake(0x100000), dt, {kSdLen, kSdKvHeads, kHd});
    c.v = TensorView::contiguous(fake(0x200000), dt, {kSdLen, kSdKvHeads, kHd});
  } else {
    c.k = TensorView::contiguous(fake(0x100000), dt, {kSdKvHeads, kSdLen, kHd});
    c.v = TensorView::contiguous(fake(0x200000), dt, {kSdKvHeads, kSdLen, kHd});
  }
  c.o.kv_layout = layout;
  c.lse = TensorView::contiguous(fake(0x30000), DType::kFloat32, {kSdHeads});
  return c;
}

// fused_infer_attention_score: BSND bf16, batch 2, 8 heads over 2 KV heads, D 128,
// Q_S q_seq (1: decode), KV_S 256, LSE on.
constexpr int kFiaBatch = 2, kFiaHeads = 8, kFiaKvHeads = 2, kFiaKvSeq = 256;

inline FiaArgs valid_fia(int q_seq = 64) {
  FiaArgs a;
  const DType dt = DType::kBFloat16;
  a.input_layout = "BSND";
  a.num_heads = kFiaHeads;
  a.num_key_value_heads = kFiaKvHeads;
  a.scale = 0.088;
  a.query = TensorView::contiguous(fake(0x10000), dt, {kFiaBatch, q_seq, kFiaHeads, kHd});
  a.key = TensorView::contiguous(fake(0x100000), dt, {kFiaBatch, kFiaKvSeq, kFiaKvHeads, kHd});
  a.value = TensorView::contiguous(fake(0x200000), dt, {kFiaBatch, kFiaKvSeq, kFiaKvHeads, kHd});
  a.attention_out = TensorView::contiguous(fake(0x400000), dt, {kFiaBatch, q_seq, kFiaHeads, kHd});
  a.softmax_lse_flag = true;
  a.softmax_lse = TensorView::contiguous(fake(0x500000), DType::kFloat32, {kFiaBatch, kFiaHeads, q_seq, 1});
  return a;
}

// fused_infer_attention_score with query_rope/key_rope (MLA): bf16, batch 2, 32 heads (or heads), key
// N 1, D 512 + rope 64, Q_S q_seq (1: sparse 0; > 1: sparse 3 with the 2048x2048 mask),
// paged KV (blocks of block_size, 4 per sequence, rank 3), value = key, LSE on.
constexpr int kFiaMlaHeads = 32, kFiaMlaBlocks = 4;

inline FiaArgs valid_fia_mla(int q_seq = 1, const std::string& layout = "BSND", int block_size = 128,
                             int heads = kFiaMlaHeads) {
  FiaArgs a;
  const DType dt = DType::kBFloat16;
  const int64_t B = kFiaBatch, N = heads, S = q_seq;
  a.input_layout = layout;
  a.num_heads = N;
  a.num_key_value_heads = 1;
  a.scale = 0.0417;
  auto q_shape = [&](int64_t d) -> std::vector<int64_t> {
    if (layout == "BSH") return {B, S, N * d};
    if (layout == "BNSD") return {B, N, S, d};
    return {B, S, N, d};
  };
  auto view = [](uintptr_t at, DType t, const std::vector<int64_t>& shape) {
    TensorView v;
    v.data = fake(at);
    v.dtype = t;
    v.rank = int(shape.size());
    int64_t st = 1;
    for (int d = v.rank - 1; d >= 0; --d) v.shape[d] = shape[size_t(d)], v.stride[d] = st, st *= shape[size_t(d)];
    return v;
  };
  a.query = view(0x10000, dt, q_shape(512));
  a.query_rope = view(0x80000, dt, q_shape(64));
  a.attention_out = view(0x400000, dt, q_shape(512));
  const int64_t blocks = B * kFiaMlaBlocks;
  a.key = view(0x100000, dt, {blocks, block_size, 512});
  a.value = a.key;
  a.key_rope = view(0x200000, dt, {blocks, block_size, 64});
  a.block_table = view(0x300000, DType::kInt32, {B, kFiaMlaBlocks});
  a.block_size = block_size;
  a.actual_seq_lengths_kv = {int64_t(block_size) * kFiaMlaBlocks, 5};
  if (q_seq > 1) {
    a.sparse_mode = 3;
    a.atten_mask = view(0x600000, DType::kUInt8, {2048, 2048});
  }
  a.softmax_lse_flag = true;
  a.softmax_lse = view(0x500000, DType::kFloat32, {B, N, S, 1});
  return a;
}

// batch_decode_mla: batch 2, q_len 2, 16 heads, pages of 64, 4 pages per sequence; sparse
// (top_k 128) adds indices.
constexpr int kMlaBatch = 2, kMlaQLen = 2, kMlaHeads = 16, kMlaPage = 64, kMlaPagesPerSeq = 4, kMlaTopK = 128;

inline MlaArgs valid_mla(bool sparse = false, bool four_d_cache = false) {
  MlaArgs a;
  const DType dt = DType::kBFloat16;
  a.query = TensorView::contiguous(fake(0x10000), dt, {kMlaBatch, kMlaQLen, kMlaHeads, 576});
  const int64_t pages = kMlaBatch * kMlaPagesPerSeq;
  a.kv_cache = four_d_cache ? TensorView::contiguous(fake(0x100000), dt, {pages, 1, kMlaPage, 576})
                            : TensorView::contiguous(fake(0x100000), dt, {pages, kMlaPage, 576});
  a.block_tables = TensorView::contiguous(fake(0x300000), DType::kInt32, {kMlaBatch, kMlaPagesPerSeq});
  a.seq_lens = TensorView::contiguous(fake(0x300100), DType::kInt32, {kMlaBatch});
  a.max_seq_len = kMlaPage * kMlaPagesPerSeq;
  a.out = TensorView::contiguous(fake(0x400000), dt, {kMlaBatch, kMlaQLen, kMlaHeads, 512});
  if (sparse) {
    a.sparse_mla_top_k = kMlaTopK;
    a.indices = TensorView::contiguous(fake(0x500000), DType::kInt32, {kMlaBatch, kMlaQLen, kMlaTopK});
  }
  return a;
}

}  // namespace attnjit::testing
