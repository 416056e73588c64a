#include "spec/kernel_spec.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <limits>
#include <tuple>

#include "attnjit/error.hpp"
#include "util/hash.hpp"

namespace attnjit::spec {

namespace {

[[noreturn]] void bad(const std::string& what) { throw Error(ErrorCode::kInvalidArgument, what); }

template <class E, size_t N>
E parse_enum(const std::string& field, const std::string& text, const E (&values)[N]) {
  for (E v : values)
    if (text == to_string(v)) return v;
  bad(fmt::format("spec field '{}': unknown value '{}'", field, text));
}

constexpr OpFamily kFamilies[] = {OpFamily::kDecode, OpFamily::kXqa};
constexpr Backend kBackends[] = {Backend::kXqa, Backend::kTrtllmGen};
constexpr KvLayout kLayouts[] = {KvLayout::kNHD, KvLayout::kHND};
constexpr MaskMode kMasks[] = {MaskMode::kNone, MaskMode::kCausal, MaskMode::kCustom};
constexpr PosEncoding kPos[] = {PosEncoding::kNone, PosEncoding::kRopeLlama, PosEncoding::kAlibi};
constexpr DType kDtypes[] = {DType::kFloat16,   DType::kBFloat16, DType::kFloat32,
                             DType::kFloat8E4M3, DType::kFloat8E5M2, DType::kInt8,
                             DType::kUInt8,     DType::kUInt16,   DType::kInt32,
                             DType::kUInt32,    DType::kInt64};


auto tie(const KernelSpec& s) {
  return std::tie(s.family, s.backend, s.q_dtype, s.kv_dtype, s.out_dtype, s.head_dim,
                  s.group_size, s.page_size, s.layout, s.mask, s.pos_encoding, s.features,
                  s.arch.sm, s.arch.arch_specific);
}

std::string short_dtype(DType d) {
  switch (d) {
    case DType::kFloat8E4M3: return "e4m3";
    case DType::kFloat8E5M2: return "e5m2";
    default: return dtype_name(d);
  }
}

}  // namespace

const char* to_string(OpFamily f) {
  switch (f) {
    case OpFamily::kDecode: return "decode";
    case OpFamily::kXqa: return "xqa";
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
    if (s == dtype_name(d) || s == short_dtype(d)) return d;
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

bool KernelSpec::operator==(const KernelSpec& o) const { return tie(*this) == tie(o); }

size_t KernelSpecHash::operator()(const KernelSpec& s) const noexcept {
  // Field-wise mixing; no allocation (this runs on the launch path).
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
  mix(static_cast<uint64_t>(s.family));
  mix(static_cast<uint64_t>(s.backend));
  mix(static_cast<uint64_t>(s.q_dtype));
  mix(static_cast<uint64_t>(s.kv_dtype));
  mix(static_cast<uint64_t>(s.out_dtype));
  mix(static_cast<uint64_t>(s.head_dim));
  mix(static_cast<uint64_t>(s.group_size));
  mix(static_cast<uint64_t>(s.page_size));
  mix(static_cast<uint64_t>(s.layout));
  mix(static_cast<uint64_t>(s.mask));
  mix(static_cast<uint64_t>(s.pos_encoding));
  mix(s.features);
  mix(static_cast<uint64_t>(s.arch.sm) * 2 + s.arch.arch_specific);
  return static_cast<size_t>(h);
}

nlohmann::json KernelSpec::to_json() const {
  nlohmann::json features_json = nlohmann::json::array();
  for (const auto& f : feature::kNames)
    if (has(f.bit)) features_json.push_back(f.token);
  return nlohmann::json{{"family", to_string(family)},
                        {"backend", to_string(backend)},
                        {"q_dtype", dtype_name(q_dtype)},
                        {"kv_dtype", dtype_name(kv_dtype)},
                        {"out_dtype", dtype_name(out_dtype)},
                        {"head_dim", head_dim},
                        {"group_size", group_size},
                        {"page_size", page_size},
                        {"layout", to_string(layout)},
                        {"mask", to_string(mask)},
                        {"pos_encoding", to_string(pos_encoding)},
                        {"features", features_json},
                        {"arch", arch.str()}};
}

KernelSpec KernelSpec::from_json(const nlohmann::json& j) {
  if (!j.is_object()) bad("spec JSON must be an object");
  KernelSpec s;
  auto str = [&](const char* k) -> std::string {
    if (!j.contains(k) || !j[k].is_string()) bad(fmt::format("spec field '{}' missing or not a string", k));
    return j[k].get<std::string>();
  };
  auto num = [&](const char* k) -> int {
    if (!j.contains(k) || !j[k].is_number_integer())
      bad(fmt::format("spec field '{}' missing or not an integer", k));
    // get<int>() would truncate 4294967424 to 128: a different kernel than asked for.
    const bool fits = j[k].is_number_unsigned()
                          ? j[k].get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int>::max())
                          : j[k].get<int64_t>() >= std::numeric_limits<int>::min() &&
                                j[k].get<int64_t>() <= std::numeric_limits<int>::max();
    if (!fits) bad(fmt::format("spec field '{}': {} is out of range (expected a 32-bit integer)", k, j[k].dump()));
    return j[k].get<int>();
  };
  s.family = parse_enum("family", str("family"), kFamilies);
  s.backend = parse_enum("backend", str("backend"), kBackends);
  s.q_dtype = parse_dtype(str("q_dtype"));
  s.kv_dtype = parse_dtype(str("kv_dtype"));
  s.out_dtype = parse_dtype(str("out_dtype"));
  s.head_dim = num("head_dim");
  s.group_size = num("group_size");
  s.page_size = num("page_size");
  s.layout = parse_enum("layout", str("layout"), kLayouts);
  s.mask = parse_enum("mask", str("mask"), kMasks);
  s.pos_encoding = parse_enum("pos_encoding", str("pos_encoding"), kPos);
  if (!j.contains("features") || !j["features"].is_array()) bad("spec field 'features' must be an array");
  for (const auto& f : j["features"]) {
    bool known = false;
    for (const auto& fn : feature::kNames)
      if (f.is_string() && f.get<std::string>() == fn.token) {
        s.features |= fn.bit;
        known = true;
      }
    if (!known) bad(fmt::format("spec field 'features': unknown feature {}", f.dump()));
  }
  s.arch = Arch::parse(str("arch"));
  return s;
}

std::string KernelSpec::name() const {
  std::string n = fmt::format("{}.{}", to_string(family), short_dtype(q_dtype));
  if (kv_dtype != q_dtype) n += ".kv" + short_dtype(kv_dtype);
  if (out_dtype != q_dtype) n += ".o" + short_dtype(out_dtype);
  n += fmt::format(".hd{}.g{}", head_dim, group_size);
  n += page_size ? fmt::format(".p{}", page_size) : std::string(".contig");
  n += layout == KvLayout::kNHD ? ".nhd" : ".hnd";
  if (mask != MaskMode::kNone) n += std::string(".") + to_string(mask);
  if (pos_encoding != PosEncoding::kNone) n += std::string(".") + to_string(pos_encoding);
  for (const auto& f : feature::kNames)
    if (has(f.bit)) n += std::string(".") + f.token;
  if (backend != Backend::kXqa) n += ".trtllmgen";
  return n + "." + fmt::format("sm{}{}", arch.sm, arch.arch_specific ? "a" : "");
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
