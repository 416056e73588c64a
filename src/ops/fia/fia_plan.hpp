// fused_infer_attention_score planning: argument validation (the seed's
// constraints), the KernelSpec, the Params and the host-planned work list. Kept
// apart from the launch so the CPU tests exercise all of it without a GPU.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "attnjit/fia.hpp"
#include "prefill/prefill_params.cuh"
#include "spec/kernel_spec.hpp"

namespace attnjit::ops {

constexpr int kPrefillRows = 64;  // rows (token x group head) per CTA of the portable kernel: PrefillTraits::kRows

enum class FiaLayout { kBSH, kBSND, kBNSD, kBNSD_BSND, kTND };

// int8 K/V at Q_S > 1 where the query rows per KV head fill a wgmma tile, and every
// int8 query (the full int8 path): a pass dequantises K/V (and the int8 query) once into
// dense 16-bit copies in the stream's runtime scratch, and FiaPlan::spec is then the
// 16-bit attention over them (fia_dequant_first.cpp).
struct FiaDequantFirst {
  spec::KernelSpec pass;        // the prefill family's dqpass kernel
  PrefillDequantOut out{};      // the copies' strides and the int8 path's scales (pointers to copies set at launch)
  size_t k_bytes = 0, v_bytes = 0, q_bytes = 0;  // q_bytes: the int8 query's copy (0 otherwise)
};

struct FiaPlan {
  spec::KernelSpec spec;
  PrefillParams params{};  // everything but the work list (batches, num_batches, first_batch)
  FiaLayout layout = FiaLayout::kBSH;
  int batch = 0;
  int num_heads = 0, num_kv_heads = 0;
  int q_seq = 0, kv_seq = 0;  // the tensors' S (TND: 0)
  bool decode = false;        // Q_S == 1 (not TND)
  int rows_per_cta = kPrefillRows;  // the chosen kernel's (prefill_grid_shape): a work-list tile
  int dv_chunks = 1;                // CTAs along z splitting the value dims (prefill_grid_shape)
  bool lse_placeholder = false;  // flag off, softmax_lse given: write 0 into it
  std::optional<FiaDequantFirst> dequant_first;  // set: params' K/V are the int8 source of the pass
};

// Validates `a` against the seed's constraints and builds the plan; every
// refusal is Error(kInvalidArgument) naming the argument, or Error(kUnsupported)
// for a legal feature this op does not serve yet.
FiaPlan plan_fia(const FiaArgs& a, const spec::Arch& arch);

// The actual lengths of batch b under the seed's rules (plan_fia checked them).
struct FiaLengths {
  int q_len, kv_len, q_tok0, kv_tok0;
};
FiaLengths fia_lengths(const FiaPlan& plan, const FiaArgs& a, int b);

// Fills the work list of the launch covering batches [first, first + count) (count
// <= kPrefillMaxBatches) into p; returns its CTAs (gridDim.x). Pure and allocation-free.
int fia_fill_work(const FiaPlan& plan, const FiaArgs& a, int first, int count, PrefillParams& p);

// The rarer arguments (fia_plan_extras.cpp): left padding, the shared prefix, int8
// output. plan_fia calls these with the shapes it derived.
struct FiaDims {
  FiaLayout layout;
  int64_t B, N, KN, QS, KS, D, DV;  // KS: the key tensor's S (paged: max_blocks * block_size)
  bool decode, paged, has_mask;
  int64_t sparse;
  int64_t kv_pack = 1;  // K/V values per element of the key tensor: 8 for int4 packed in int32, else 1
};
// Combinations checked before the shapes: the int8-input scales with a float query (or
// missing with an int8 one), quant_offset2 alone, one prefix tensor alone.
void fia_check_quant_combination(const FiaArgs& a);
// The full int8 path (an int8 query): the seed's rules once Q_S (decode), paging, TND
// and MLA are known: int8 key/value, Q_S > 1, no page attention, no shared prefix, no
// antiquant parameters, per-tensor fp32 dequant_scale1, quant_scale1, dequant_scale2.
void fia_check_int8_query(const FiaArgs& a, bool decode, bool paged, bool tnd, bool mla);
// The shared prefix's S (0 without one): mask and pse columns cover it and the key's S.
int64_t fia_prefix_seq(const FiaArgs& a, FiaLayout layout);
// Left padding applies (a padding tensor with its actual lengths; the query's only at
// Q_S > 1): sparse_mode 0 with a mask then ignores pre/next_tokens (the seed).
bool fia_left_padded(const FiaArgs& a, bool decode);
// Validates them against the shapes; sets the spec's feature bits and out dtype and
// their Params fields.
void fia_plan_extras(const FiaArgs& a, const FiaDims& d, FiaPlan& plan);

// Quantised K/V (fia_plan_antiquant.cpp): int8, or int4 packed eight to an int32.
// The ranges of antiquant_mode and key_/value_antiquant_mode (checked with or without tensors).
void fia_check_antiquant_modes(const FiaArgs& a);
// The key's dtype against the layout, MLA and the value's; returns the values per key
// element (8: int4 in int32, whose last dim or H is D / 8 (the seed); else 1).
int fia_kv_pack(const FiaArgs& a, bool tnd, bool mla);
// Validates antiquant_scale/offset and key_/value_antiquant_scale/offset against the
// shapes (refuses them with fp16/bf16 K/V); sets spec.kv_dtype and params.k_dq / v_dq.
void fia_plan_antiquant(const FiaArgs& a, const FiaDims& d, FiaPlan& plan);

// The seed's empty inputs, before any other check: an empty query returns at once
// (kNothing); with a query, key and value whose S (S2; TND: T) is 0 and no block table
// give attention_out all zeros (kZeroOutput: attention_out contiguous, and softmax_lse,
// with its flag, +inf: no key seen). Anything else (kNone) goes to plan_fia, which names
// a zero size anywhere else.
enum class FiaEmpty { kNone, kNothing, kZeroOutput };
FiaEmpty fia_empty_inputs(const FiaArgs& a);

// The spec a call with these arguments launches on `arch`, from shapes alone.
spec::KernelSpec fia_prewarm_spec(const FiaArgs& a, const spec::Arch& arch);
// Every kernel the call launches, in launch order (the dequantising pass, then the attention).
std::vector<spec::KernelSpec> fia_prewarm_specs(const FiaArgs& a, const spec::Arch& arch);

}  // namespace attnjit::ops
