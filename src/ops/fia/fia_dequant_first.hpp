// int8 K/V at Q_S > 1, dequantised first: a pass writes dense 16-bit copies of K and V
// into the stream's runtime scratch, then the 16-bit attention kernel (either backend)
// reads them. Prefill reuses each K/V row for every query row of its KV head, so once
// those rows fill a wgmma tile the pass's extra bytes cost a few percent of the call,
// while dequantising inside the attention loop costs issue slots on every tile of every
// row block (PERFORMANCE.md: 0.29x of the 16-bit kernel on the H200).
// The full int8 path (int8 query, key and value; dequant_scale1, quant_scale1,
// dequant_scale2) always takes it: the pass copies Q too, and folds the per-tensor scales
// into the fp16 copies (sqrt(dequant_scale1) into Q and K, quant_scale1 * dequant_scale2
// into V), so the fp16 attention computes dequant_scale2 * quant_scale1 *
// softmax(scale * dequant_scale1 * q k^T) v. Ascend rounds P to int8 by quant_scale1
// before BMM2; here P stays 16-bit, which only removes that rounding.
#pragma once

#include "ops/common/launch.hpp"
#include "ops/fia/fia_plan.hpp"

namespace attnjit::ops {

// Query rows per KV head (the longest query x group) from which the pass is the default:
// one wgmma row tile.
constexpr int kDequantFirstRows = 128;
// Copies larger than this take the in-kernel dequantisation instead of the scratch.
constexpr size_t kDequantFirstMaxBytes = size_t(4) << 30;

// Decides the path (ATTNJIT_FIA_DEQUANT_FIRST: 0 never, 1 wherever the pass serves;
// unset: from kDequantFirstRows rows; an int8 query: always). When taken, sets plan.dequant_first and turns
// plan.spec into the 16-bit attention's spec; called before the backend is chosen.
void fia_plan_dequant_first(const FiaArgs& a, const FiaDims& d, FiaPlan& plan);

// The two launches' Params, with the copies at `copies` (k_bytes + v_bytes of scratch):
// the pass reads the plan's int8 K/V and writes the copies; the attention reads them.
void fia_dequant_params(const FiaPlan& plan, void* copies, PrefillParams& pass, PrefillParams& attention);

// The pass's grid over the batches of p's work list: 64-token tiles of the longest KV,
// the KV heads, the batches.
Grid fia_dequant_grid(const FiaPlan& plan, const PrefillParams& p);

}  // namespace attnjit::ops
