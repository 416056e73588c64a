// KernelSpec: everything that selects one compiled kernel variant, with its
// canonical JSON, readable name and cache key. Pure values, no I/O.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "attnjit/tensor.hpp"

namespace attnjit::spec {

enum class OpFamily : uint8_t {
#define ATTNJIT_FAMILY(id, token, ns) id,
#include "spec/families.def"
#undef ATTNJIT_FAMILY
};
enum class Backend : uint8_t { kXqa, kTrtllmGen };
enum class KvLayout : uint8_t { kNHD, kHND };
enum class MaskMode : uint8_t { kNone, kCausal, kCustom };
enum class PosEncoding : uint8_t { kNone, kRopeLlama, kAlibi };

// Feature flags: each one changes the generated code.
namespace feature {
constexpr uint32_t kSoftCap = 1u << 0;        // logits = cap * tanh(logits / cap)
constexpr uint32_t kSlidingWindow = 1u << 1;  // only the last `window` keys are visible
constexpr uint32_t kSinks = 1u << 2;          // per-head sink added to the denominator
constexpr uint32_t kReturnLse = 1u << 3;      // write log-sum-exp per query row
constexpr uint32_t kScalePointers = 1u << 4;  // q/kv scales read from device memory
// 1u << 5 was the CUDA-core (FFMA) decode tile, removed: tensor cores were faster everywhere.
constexpr uint32_t kRaggedQ = 1u << 6;        // spec-decode with cumulative q lengths
constexpr uint32_t kPse = 1u << 7;            // FIA pse_shift added to the scaled scores
constexpr uint32_t kSplitRope = 1u << 8;      // mla: FIA's query_rope/key_rope (nope and rope tensors apart)
constexpr uint32_t kLeftPad = 1u << 9;        // FIA query/kv_padding_size read on device
constexpr uint32_t kSharedPrefix = 1u << 10;  // FIA key/value_shared_prefix before each batch's KV
constexpr uint32_t kKTokenScale = 1u << 11;   // int8 K dequantised per token (FIA antiquant on the decode kernel)
constexpr uint32_t kVTokenScale = 1u << 12;   // int8 V dequantised per token (likewise)
constexpr uint32_t kDequantPass = 1u << 13;   // prefill: the pass that dequantises int8 K/V into 16-bit copies
constexpr uint32_t kKvPair = 1u << 14;        // decode: one CTA serves two adjacent KV heads (int4 K/V, group <= 4)
constexpr uint32_t kTokHead = 1u << 15;       // decode kvpair: per-token scales that differ by head, both heads' a stage
constexpr uint32_t kNarrowTile = 1u << 16;    // mla wgmma: <= 16 query rows a CTA, in wgmma's N (tokens in M)
constexpr uint32_t kNarrow32 = 1u << 17;      // mla wgmma: the narrow tile with 32 rows in N (16-bit KV)
constexpr uint32_t kTile32 = 1u << 18;        // mla wgmma: the wide tile in 32-token tiles, four KV buffers;
                                              // xqa / decode: batch 1's kernel of 32-token warp tiles
constexpr uint32_t kFlat = 1u << 19;          // mla wgmma: the wide tile's balanced schedule (parts across requests)
constexpr uint32_t kAll = ((1u << 20) - 1) & ~(1u << 5);

// Each flag's token in names and JSON, in the order KernelSpec::name() writes them.
struct Name {
  uint32_t bit;
  const char* token;
};
inline constexpr Name kNames[] = {
    {kSoftCap, "softcap"},   {kSlidingWindow, "window"}, {kSinks, "sinks"},     {kReturnLse, "lse"},
    {kScalePointers, "scaleptr"}, {kRaggedQ, "raggedq"},
    {kPse, "pse"},           {kSplitRope, "splitrope"}, {kLeftPad, "leftpad"}, {kSharedPrefix, "prefix"},
    {kKTokenScale, "ktokscale"}, {kVTokenScale, "vtokscale"}, {kDequantPass, "dqpass"}, {kKvPair, "kvpair"},
    {kTokHead, "tokhead"},   {kNarrowTile, "narrow"}, {kNarrow32, "narrow32"}, {kTile32, "tile32"},
    {kFlat, "flat"},
};
}  // namespace feature

// A compile target: "sm_90a" is {90, true}.
struct Arch {
  int sm = 90;
  bool arch_specific = false;
  std::string str() const;
  static Arch parse(const std::string& text);  // throws Error(kInvalidArgument)
  bool operator==(const Arch& o) const { return sm == o.sm && arch_specific == o.arch_specific; }
};
// The arch we compile for on a device of compute capability major.minor (sm_90 -> sm_90a).
Arch arch_for_device(int major, int minor);

struct KernelSpec {
  OpFamily family = OpFamily::kDecode;
  Backend backend = Backend::kXqa;
  DType q_dtype = DType::kBFloat16;
  DType kv_dtype = DType::kBFloat16;
  DType out_dtype = DType::kBFloat16;
  int head_dim_qk = 128;  // Q and K head dim (MLA: 576 = 512 latent + 64 rope)
  int head_dim_vo = 128;  // V and output head dim (MLA: 512; FIA TND: 128 with qk 192)
  int group_size = 1;     // query heads per KV head
  int page_size = 0;      // 0: contiguous KV
  KvLayout layout = KvLayout::kNHD;
  MaskMode mask = MaskMode::kNone;
  PosEncoding pos_encoding = PosEncoding::kNone;
  uint32_t features = 0;
  Arch arch;

  bool has(uint32_t f) const { return (features & f) != 0; }
  void set_head_dim(int hd) { head_dim_qk = head_dim_vo = hd; }
  bool operator==(const KernelSpec& o) const;
  bool operator!=(const KernelSpec& o) const { return !(*this == o); }

  // All of these follow one field table (spec_fields.cpp): adding a field there
  // adds it to equality, the hash, the key, JSON, the name and the name parser.
  nlohmann::json to_json() const;                 // canonical: sorted keys, every field
  static KernelSpec from_json(const nlohmann::json& j);  // throws Error(kInvalidArgument)
  // "xqa.bf16.kve4m3.hd128.g8.p32.nhd.sm90a"; unequal head dims read "hd576x512".
  std::string name() const;
  // The inverse of name(): tokens in name()'s order, the arch suffix optional
  // (`*had_arch` says whether it was there). Throws Error(kInvalidArgument) naming
  // the token it could not read, or the canonical spelling of a name out of order.
  static KernelSpec from_name(const std::string& name, bool* had_arch = nullptr);
};

// The JSON keys a spec may have (to_json writes "head_dim" when the two head dims
// are equal, else "head_dim_qk" and "head_dim_vo").
const std::vector<std::string>& json_keys();

struct KernelSpecHash {
  size_t operator()(const KernelSpec& s) const noexcept;
};

// Inputs of the cache key besides the spec; each one can change the cubin.
struct KeyInputs {
  std::string library_version;
  std::string template_hash;
  std::string rendered_source;
  std::string nvrtc_version;
  std::string options;  // the NVRTC options, joined
};
// Hash over a length-prefixed canonical encoding of the spec and every input.
std::string cache_key(const KernelSpec& spec, const KeyInputs& inputs);

const char* to_string(OpFamily f);
const char* to_string(Backend b);
const char* to_string(KvLayout l);
const char* to_string(MaskMode m);
const char* to_string(PosEncoding p);
DType parse_dtype(const std::string& s);  // "bf16", "fp16", "fp8_e4m3", ...

}  // namespace attnjit::spec
