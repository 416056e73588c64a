// fused_infer_attention_score: Ascend's npu_fused_infer_attention_score (FIA)
// semantics on NVIDIA GPUs: prefill (Q_S > 1) and decode (Q_S = 1) in one op.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attnjit/runtime.hpp"
#include "attnjit/tensor.hpp"
#include "attnjit/types.hpp"

namespace attnjit {

// The seed's arguments, names and defaults. An absent optional tensor is a
// default TensorView (null data); an absent length list is empty.
struct FiaArgs {
  // input_layout BSH: (B, S, H); BSND: (B, S, N, D); BNSD and BNSD_BSND: (B, N, S, D);
  // TND: (T, N, D). fp16 or bf16; int8 (Q_S > 1, with int8 key and value) is the full int8 path.
  TensorView query;
  // As the layout says, with KV_S and num_key_value_heads (int4 in int32: D / 8); TND: (T_kv, N, 192) and
  // value (T_kv, N, 128 or 192). Paged (block_table given): (blocknum, block_size,
  // KV_N * D) or, with BNSD queries, (blocknum, KV_N, block_size, D).
  TensorView key;
  TensorView value;
  TensorView pse_shift;   // optional fp16/bf16 (q's dtype; fp16 for int8) (B or 1, N, Q_S', KV_S'), Q_S' >= Q_S, KV_S' >= KV_S
  TensorView atten_mask;  // optional bool/int8/uint8, nonzero = masked out (shapes: see README)
  std::vector<int64_t> actual_seq_lengths;     // host list; TND: cumulative, its length is B
  std::vector<int64_t> actual_seq_lengths_kv;  // host list; TND: cumulative; paged: required
  // The full int8 path: dequant_scale1, quant_scale1, dequant_scale2, one fp32 value each on
  // device, required with an int8 query (an error otherwise); out = dequant_scale2 *
  // quant_scale1 * softmax(scale * dequant_scale1 * q k^T + pse) v, fp16 (README).
  // quant_scale2 (+ quant_offset2): int8 attention_out, clamp(round(out * scale + offset));
  // fp32 or bf16, per tensor or per channel (N * D_v).
  TensorView dequant_scale1, quant_scale1, dequant_scale2, quant_scale2, quant_offset2;
  TensorView antiquant_scale, antiquant_offset;
  TensorView block_table;  // optional int32 [B, max_blocks]: paged KV
  // Left padding: int64 device tensors (1 or B values), read by the kernel; with the
  // actual lengths, valid rows are [S - pad - len, S - pad). The shared prefix: key's
  // layout with batch 1, a batch's KV is [prefix | own]; actual_shared_prefix_len an int64
  // device [1]. Quantised K/V (int8, or int4 packed eight to an int32 whose last dim or H
  // is D / 8): antiquant_scale/offset (K at index 0, V at 1) or key_/value_antiquant_scale/
  // offset (modes 0-5, which win), dequantised as (x + offset) * scale; shapes: see README.
  TensorView query_padding_size, kv_padding_size;
  TensorView key_antiquant_scale, key_antiquant_offset, value_antiquant_scale, value_antiquant_offset;
  TensorView key_shared_prefix, value_shared_prefix, actual_shared_prefix_len;
  // MLA inside FIA: query_rope (query's layout and dtype, D 64) with query D 512, N 32/64/128,
  // Q_S 1-16; key_rope (blocknum, [1,] block_size, 64) with key (.., 512), num_key_value_heads 1,
  // value the key tensor itself, paged (block_size 16 or 128). key_rope_antiquant_scale: reserved.
  TensorView query_rope, key_rope, key_rope_antiquant_scale;
  int64_t num_heads = 1;
  double scale = 1.0;
  int64_t pre_tokens = 2147483647;
  int64_t next_tokens = 2147483647;
  std::string input_layout = "BSH";
  int64_t num_key_value_heads = 0;  // 0: num_heads
  int64_t sparse_mode = 0;          // 0 default, 1 allMask, 2 leftUpCausal, 3 rightDownCausal, 4 band
  int64_t inner_precise = 0;        // 0-3 (Q_S = 1: 0 or 1); every mode computes in fp32 here
  int64_t block_size = 0;
  int64_t antiquant_mode = 0;
  bool softmax_lse_flag = false;
  int64_t key_antiquant_mode = 0;
  int64_t value_antiquant_mode = 0;

  // Outputs. attention_out: query's shape and dtype, int8 with quant_scale2 (BNSD_BSND: (B, S, N, D); TND
  // and BSH with V's head dim). softmax_lse: with softmax_lse_flag, fp32 (B, N, Q_S, 1)
  // (TND: (T, N, 1)), natural log, +inf for a row that sees no key or lies past its
  // actual length. Without the flag it may be absent; given, it must be the seed's
  // placeholder, fp32 with one element, and the op writes 0 into it.
  TensorView attention_out;
  TensorView softmax_lse;
  // auto: on sm_90a the wgmma kernel (trtllm-gen) where it serves the head dims, else xqa (the
  // portable mma.sync kernel). trtllm-gen asked for where it cannot serve is an Error naming backend.
  Backend backend = Backend::kAuto;
};

void fused_infer_attention_score(const FiaArgs& args, Stream stream = nullptr, Runtime* runtime = nullptr);

// Compiles, or finds in the store, the kernel this call would launch on `arch`
// (empty: the current GPU's, also loading it there, so the call may then be
// captured). Shapes only: tensor data may be null. Returns the kernel's name.
std::string prewarm_fused_infer_attention_score(const FiaArgs& args, const std::string& arch = "",
                                                Runtime* runtime = nullptr);

}  // namespace attnjit
