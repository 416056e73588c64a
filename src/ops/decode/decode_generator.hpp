// The decode family's plug-in pieces: can_implement, the generator (spec ->
// GqaDecode<Traits> TU and launch metadata) and the tiling both share.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "render/family.hpp"
#include "spec/kernel_spec.hpp"

namespace attnjit::ops {

// Tuning derived from the spec (mirrors DecodeTraits; the TU static_asserts it).
struct DecodeTiling {
  int warps = 4;
  int stages = 3;
  int smem_bytes = 0;  // dynamic shared memory per CTA (mirrors DecodeTraits::kSmemBytes)
  int smem_limit = 0;  // the arch's opt-in maximum per block
  int tile = 16;       // tokens per warp tile
  bool lazy_rescale = false;
  int min_blocks = 1;  // mirrors DecodeTraits::kMinBlocks (__launch_bounds__)
  int split_m_stages = 0;  // > 0: the kernel has split-M (64 rows per CTA) with this ring
  bool dual_m = false;     // the kernel also has dual-M (32 rows per CTA; needs split-M's kernel)
  // Tokens in the MMA's M, the group's heads in N (mirrors DecodeTraits::kTransposed):
  // int8 / int4 K/V at group <= 8, launched with one query row per head only.
  bool transposed = false;
  // L2 prefetch size of the K/V copies (0, 64, 128 or 256 bytes; ATTNJIT_DECODE_L2_PREFETCH).
  int l2_prefetch = 0;
};
DecodeTiling decode_tiling(const spec::KernelSpec& spec);
// Query rows per CTA for a launch of spec with q_seq_len (max draft) tokens per
// request: where a request has more than 16 rows (group x q_seq_len),
// kDecodeDualMRows up to 32 rows where the kernel has dual-M, kDecodeSplitMRows past
// 32 where it has split-M; else 16. The one place that decides it.
int decode_rows_per_cta(const spec::KernelSpec& spec, int q_seq_len);
// Whether batch 1 has a kernel of 32-token warp tiles (spec::feature::kTile32) for spec, where
// decode_tiling keeps 16: xqa's paged and single_decode's contiguous 16-bit K/V at head_dim 128
// and past 256 (split-D), where the 32-token ring holds one CTA an SM (split-D: three stages;
// single_decode hd512, H100: L32K 193.5 -> 186.6 us, L128K 705.5 -> 697.7). Batches keep 16:
// the split plan, which sizes splits to the CTAs an SM, would then leave a ragged batch's long
// request to half the CTAs (lens 300..12000, B8: 57.4 -> 68.8 us, H100). One request cannot be
// ragged. decode_batch1_takes_tile32 (decode_launch.hpp) says which batch-1 calls take it.
// Returns that kernel's tiling, or none.
std::optional<DecodeTiling> decode_batch1_tile32(const spec::KernelSpec& spec);
// KV heads one CTA serves: 2 with the kvpair feature (Traits::kKvPack), else 1.
inline int decode_kv_heads_per_cta(const spec::KernelSpec& spec) { return spec.has(spec::feature::kKvPair) ? 2 : 1; }

// The head dims the decode kernels serve: multiples of 16 up to 256 (the warps
// split the tokens), and 384 and 512 (the warps split the output dims; there,
// as in FlashInfer, groups of at most 16 and no speculative decoding).
constexpr const char* kDecodeHeadDims = "a multiple of 16 in [16, 256], or 384 or 512";
constexpr int kMaxGroupSplitD = 16;
constexpr int kMaxDecodeGroup = 256;  // q heads per KV head the decode kernels take (can_implement)
constexpr bool decode_head_dim_ok(int64_t hd) { return (hd % 16 == 0 && hd >= 16 && hd <= 256) || hd == 384 || hd == 512; }

bool decode_can_implement(const spec::KernelSpec& spec, const spec::Arch& arch, std::string* why);
render::RenderedUnit decode_generate(const spec::KernelSpec& spec);
// The decode kernels' backend table (the xqa family renders the same kernel).
const render::BackendTable& decode_backend_table();

}  // namespace attnjit::ops
