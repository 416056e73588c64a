#include "spec/kernel_spec.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

#include "attnjit/error.hpp"
#include "spec/spec_fields.hpp"
#include "util/hash.hpp"

namespace attnjit::spec {

namespace {

[[noreturn]] void bad(const std::string& what) { throw Error(ErrorCode::kInvalidArgument, what); }

constexpr DType kDtypes[] = {DType::kFloat16,   DType::kBFloat16, DType::kFloat32,
                             DType::kFloat8E4M3, DType::kFloat8E5M2, DType::kInt8,
                             DType::kUInt8,     DType::kUInt16,   DType::kInt32,
                             DType::kUInt32,    DType::kInt64};

}  // namespace

const char* to_string(OpFamily f) {
  switch (f) {
#define ATTNJIT_FAMILY(id, token, ns) \
  case OpFamily::id: return token;
#include "spec/families.def"
#undef ATTNJIT_FAMILY
  }
  return "?";
}
const char* to_string(Backend b) { return b == Backend::kXqa ? "xqa" : "trtllm-gen"; }
const char* to_string(KvLayout l) { return l == KvLayout::kNHD ? "NHD" : "HND"; }
const char* to_string(MaskMode m) {
  switch (m) {
    case MaskMode::kNone: return "none";
    case MaskMode::kCausal: return "causal";
    case MaskMode::kCustom: return "custom";
  }
  return "?";
}
const char* to_string(PosEncoding p) {
  switch (p) {
    case PosEncoding::kNone: return "none";
    case PosEncoding::kRopeLlama: return "rope_llama";
    case PosEncoding::kAlibi: return "alibi";
  }
  return "?";
}

DType parse_dtype(const std::string& s) {
  for (DType d : kDtypes)
    if (s == dtype_name(d) || s == short_dtype_name(d)) return d;
  if (s == "float16" || s == "half") return DType::kFloat16;
  if (s == "bfloat16") return DType::kBFloat16;
  if (s == "fp8") return DType::kFloat8E4M3;
  bad(fmt::format("unknown dtype '{}' (expected fp16, bf16, fp8_e4m3, fp8_e5m2, ...)", s));
}

std::string Arch::str() const { return fmt::format("sm_{}{}", sm, arch_specific ? "a" : ""); }

Arch Arch::parse(const std::string& text) {
  Arch a;
  std::string t = text;
  if (t.rfind("sm_", 0) == 0) t = t.substr(3);
  if (!t.empty() && t.back() == 'a') {
    a.arch_specific = true;
    t.pop_back();
  }
  if (t.empty() || t.find_first_not_of("0123456789") != std::string::npos)
    bad(fmt::format("arch '{}': expected sm_XY or sm_XYa, e.g. sm_90a", text));
  if (t.size() > 4) bad(fmt::format("arch '{}': expected sm_XY or sm_XYa, e.g. sm_90a", text));
  a.sm = std::stoi(t);
  // Arch-specific targets exist only where the hardware has arch-specific features.
  static constexpr int kArchSpecific[] = {90, 100, 101, 103, 110, 120, 121};
  if (a.arch_specific && std::find(std::begin(kArchSpecific), std::end(kArchSpecific), a.sm) == std::end(kArchSpecific))
    bad(fmt::format("arch '{}': sm_{} has no arch-specific ('a') target; use sm_{}", text, a.sm, a.sm));
  if (a.sm < 80)
    bad(fmt::format("arch '{}': attnjit needs sm_80 or newer (mma.sync bf16, cp.async)", text));
  return a;
}

Arch arch_for_device(int major, int minor) {
  Arch a;
  a.sm = major * 10 + minor;
  // Hopper and Blackwell datacenter parts have arch-specific features (wgmma, tcgen05).
  a.arch_specific = (a.sm == 90 || a.sm == 100 || a.sm == 103);
  return a;
}

std::string cache_key(const KernelSpec& spec, const KeyInputs& in) {
  util::KeyEncoder e;
  e.field("format", int64_t{1})
      .field("spec", spec.to_json().dump())
      .field("library_version", in.library_version)
      .field("template_hash", in.template_hash)
      .field("rendered_source", in.rendered_source)
      .field("nvrtc_version", in.nvrtc_version)
      .field("options", in.options)
      .field("arch", spec.arch.str());
  return e.hex();
}

}  // namespace attnjit::spec
