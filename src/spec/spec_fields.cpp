// The KernelSpec field table and everything it drives: ==, the hash, JSON (and so
// the cache key, which hashes the canonical JSON), the readable name and its parser.
#include "spec/spec_fields.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "attnjit/error.hpp"
#include "util/bounded_input.hpp"

namespace attnjit::spec {

namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& what) { throw Error(ErrorCode::kInvalidArgument, what); }

constexpr OpFamily kFamilies[] = {
#define ATTNJIT_FAMILY(id, token, ns) OpFamily::id,
#include "spec/families.def"
#undef ATTNJIT_FAMILY
};
constexpr Backend kBackends[] = {Backend::kXqa, Backend::kTrtllmGen};
constexpr KvLayout kLayouts[] = {KvLayout::kNHD, KvLayout::kHND};
constexpr MaskMode kMasks[] = {MaskMode::kNone, MaskMode::kCausal, MaskMode::kCustom};
constexpr PosEncoding kPos[] = {PosEncoding::kNone, PosEncoding::kRopeLlama, PosEncoding::kAlibi};

template <class E, size_t N>
E parse_enum(const char* field, const std::string& text, const E (&values)[N]) {
  for (E v : values)
    if (text == to_string(v)) return v;
  bad(fmt::format("spec field '{}': unknown value '{}'", field, text));
}

std::string get_str(const json& j, const char* k) {
  if (!j.contains(k) || !j[k].is_string()) bad(fmt::format("spec field '{}' missing or not a string", k));
  return j[k].get<std::string>();
}

constexpr int64_t kMaxNameNumber = 999999;

int get_int(const json& j, const char* k) {
  if (!j.contains(k) || !j[k].is_number_integer()) bad(fmt::format("spec field '{}' missing or not an integer", k));
  // get<int>() would truncate 4294967424 to 128: a different kernel than asked for.
  const bool fits = j[k].is_number_unsigned()
                        ? j[k].get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int>::max())
                        : j[k].get<int64_t>() >= std::numeric_limits<int>::min() &&
                              j[k].get<int64_t>() <= std::numeric_limits<int>::max();
  // The range a readable name carries (six digits), so every spec's name parses back.
  if (!fits || j[k].get<int64_t>() < 0 || j[k].get<int64_t>() > kMaxNameNumber)
    bad(fmt::format("spec field '{}': {} is out of range (expected 0 to {})", k, j[k].dump(), kMaxNameNumber));
  return j[k].get<int>();
}

// A number token after a prefix: "hd128" -> 128. Six digits at most (no stoi overflow).
bool read_number(const std::string& tok, const char* prefix, int* out) {
  const size_t n = std::char_traits<char>::length(prefix);
  if (tok.compare(0, n, prefix) != 0) return false;
  const std::string digits = tok.substr(n);
  if (digits.empty() || digits.size() > 6 || digits.find_first_not_of("0123456789") != std::string::npos)
    return false;
  *out = std::stoi(digits);
  return true;
}

bool read_dtype(const std::string& text, DType* out) {
  try {
    *out = parse_dtype(text);
    return true;
  } catch (const Error&) {
    return false;
  }
}

std::string arch_token(const Arch& a) { return fmt::format("sm{}{}", a.sm, a.arch_specific ? "a" : ""); }

// The rows. Lambdas without captures convert to the function pointers of Field.
const Field kFields[] = {
    {"family", [](const KernelSpec& s) -> uint64_t { return static_cast<uint64_t>(s.family); },
     [](const KernelSpec& s, json& j) { j["family"] = to_string(s.family); },
     [](KernelSpec& s, const json& j) { s.family = parse_enum("family", get_str(j, "family"), kFamilies); },
     [](const KernelSpec& s) { return std::string(to_string(s.family)); },
     [](KernelSpec& s, const std::string& t) {
       for (OpFamily f : kFamilies)
         if (t == to_string(f)) return s.family = f, true;
       return false;
     },
     true, false, "the op family"},
    {"q_dtype", [](const KernelSpec& s) -> uint64_t { return static_cast<uint64_t>(s.q_dtype); },
     [](const KernelSpec& s, json& j) { j["q_dtype"] = dtype_name(s.q_dtype); },
     [](KernelSpec& s, const json& j) { s.q_dtype = parse_dtype(get_str(j, "q_dtype")); },
     [](const KernelSpec& s) { return short_dtype_name(s.q_dtype); },
     [](KernelSpec& s, const std::string& t) {
       // K/V and the output default to q's dtype; their tokens appear only when they differ.
       if (!read_dtype(t, &s.q_dtype)) return false;
       s.kv_dtype = s.out_dtype = s.q_dtype;
       return true;
     },
     true, false, "the q dtype"},
    {"kv_dtype", [](const KernelSpec& s) -> uint64_t { return static_cast<uint64_t>(s.kv_dtype); },
     [](const KernelSpec& s, json& j) { j["kv_dtype"] = dtype_name(s.kv_dtype); },
     [](KernelSpec& s, const json& j) { s.kv_dtype = parse_dtype(get_str(j, "kv_dtype")); },
     [](const KernelSpec& s) { return s.kv_dtype == s.q_dtype ? std::string() : "kv" + short_dtype_name(s.kv_dtype); },
     [](KernelSpec& s, const std::string& t) { return t.rfind("kv", 0) == 0 && read_dtype(t.substr(2), &s.kv_dtype); },
     false, false, "kv<dtype>"},
    {"out_dtype", [](const KernelSpec& s) -> uint64_t { return static_cast<uint64_t>(s.out_dtype); },
     [](const KernelSpec& s, json& j) { j["out_dtype"] = dtype_name(s.out_dtype); },
     [](KernelSpec& s, const json& j) { s.out_dtype = parse_dtype(get_str(j, "out_dtype")); },
     [](const KernelSpec& s) { return s.out_dtype == s.q_dtype ? std::string() : "o" + short_dtype_name(s.out_dtype); },
     [](KernelSpec& s, const std::string& t) { return t.size() > 1 && t[0] == 'o' && read_dtype(t.substr(1), &s.out_dtype); },
     false, false, "o<dtype>"},
    // The two head dims are one row: equal, they read "head_dim" / "hd128" as they
    // always did (so decode names, JSON and keys are unchanged); apart, they read
    // "head_dim_qk" + "head_dim_vo" / "hd576x512".
    {"head_dim",
     [](const KernelSpec& s) -> uint64_t {
       return (static_cast<uint64_t>(static_cast<uint32_t>(s.head_dim_qk)) << 32) | static_cast<uint32_t>(s.head_dim_vo);
     },
     [](const KernelSpec& s, json& j) {
       if (s.head_dim_qk == s.head_dim_vo) {
         j["head_dim"] = s.head_dim_qk;
       } else {
         j["head_dim_qk"] = s.head_dim_qk;
         j["head_dim_vo"] = s.head_dim_vo;
       }
     },
     [](KernelSpec& s, const json& j) {
       const bool one = j.contains("head_dim"), qk = j.contains("head_dim_qk"), vo = j.contains("head_dim_vo");
       if (one && (qk || vo)) bad("spec field 'head_dim': give either head_dim or head_dim_qk and head_dim_vo, not both");
       if (qk != vo) bad(fmt::format("spec field '{}' missing: head_dim_qk and head_dim_vo go together",
                                     qk ? "head_dim_vo" : "head_dim_qk"));
       if (qk) {
         s.head_dim_qk = get_int(j, "head_dim_qk");
         s.head_dim_vo = get_int(j, "head_dim_vo");
       } else {
         s.set_head_dim(get_int(j, "head_dim"));
       }
     },
     [](const KernelSpec& s) {
       return s.head_dim_qk == s.head_dim_vo ? fmt::format("hd{}", s.head_dim_qk)
                                             : fmt::format("hd{}x{}", s.head_dim_qk, s.head_dim_vo);
     },
     [](KernelSpec& s, const std::string& t) {
       const size_t x = t.find('x');
       if (x == std::string::npos) {
         int hd = 0;
         if (!read_number(t, "hd", &hd)) return false;
         s.set_head_dim(hd);
         return true;
       }
       return read_number(t.substr(0, x), "hd", &s.head_dim_qk) && read_number(t.substr(x), "x", &s.head_dim_vo);
     },
     true, false, "hd<head_dim> or hd<qk>x<vo>"},
    {"group_size", [](const KernelSpec& s) -> uint64_t { return static_cast<uint32_t>(s.group_size); },
     [](const KernelSpec& s, json& j) { j["group_size"] = s.group_size; },
     [](KernelSpec& s, const json& j) { s.group_size = get_int(j, "group_size"); },
     [](const KernelSpec& s) { return fmt::format("g{}", s.group_size); },
     [](KernelSpec& s, const std::string& t) { return read_number(t, "g", &s.group_size); },
     true, false, "g<group_size>"},
    {"page_size", [](const KernelSpec& s) -> uint64_t { return static_cast<uint32_t>(s.page_size); },
     [](const KernelSpec& s, json& j) { j["page_size"] = s.page_size; },
     [](KernelSpec& s, const json& j) { s.page_size = get_int(j, "page_size"); },
     [](const KernelSpec& s) { return s.page_size ? fmt::format("p{}", s.page_size) : std::string("contig"); },
     [](KernelSpec& s, const std::string& t) {
       if (t == "contig") return s.page_size = 0, true;
       return read_number(t, "p", &s.page_size);
     },
     true, false, "p<page_size> or contig"},
    {"layout", [](const KernelSpec& s) -> uint64_t { return static_cast<uint64_t>(s.layout); },
     [](const KernelSpec& s, json& j) { j["layout"] = to_string(s.layout); },
     [](KernelSpec& s, const json& j) { s.layout = parse_enum("layout", get_str(j, "layout"), kLayouts); },
     [](const KernelSpec& s) { return std::string(s.layout == KvLayout::kNHD ? "nhd" : "hnd"); },
     [](KernelSpec& s, const std::string& t) {
       if (t != "nhd" && t != "hnd") return false;
       s.layout = t == "nhd" ? KvLayout::kNHD : KvLayout::kHND;
       return true;
     },
     true, false, "the layout nhd or hnd"},
    {"mask", [](const KernelSpec& s) -> uint64_t { return static_cast<uint64_t>(s.mask); },
     [](const KernelSpec& s, json& j) { j["mask"] = to_string(s.mask); },
     [](KernelSpec& s, const json& j) { s.mask = parse_enum("mask", get_str(j, "mask"), kMasks); },
     [](const KernelSpec& s) { return s.mask == MaskMode::kNone ? std::string() : std::string(to_string(s.mask)); },
     [](KernelSpec& s, const std::string& t) {
       for (MaskMode m : kMasks)
         if (m != MaskMode::kNone && t == to_string(m)) return s.mask = m, true;
       return false;
     },
     false, false, "causal or custom"},
    {"pos_encoding", [](const KernelSpec& s) -> uint64_t { return static_cast<uint64_t>(s.pos_encoding); },
     [](const KernelSpec& s, json& j) { j["pos_encoding"] = to_string(s.pos_encoding); },
     [](KernelSpec& s, const json& j) { s.pos_encoding = parse_enum("pos_encoding", get_str(j, "pos_encoding"), kPos); },
     [](const KernelSpec& s) {
       return s.pos_encoding == PosEncoding::kNone ? std::string() : std::string(to_string(s.pos_encoding));
     },
     [](KernelSpec& s, const std::string& t) {
       for (PosEncoding p : kPos)
         if (p != PosEncoding::kNone && t == to_string(p)) return s.pos_encoding = p, true;
       return false;
     },
     false, false, "rope_llama or alibi"},
    {"features", [](const KernelSpec& s) -> uint64_t { return s.features; },
     [](const KernelSpec& s, json& j) {
       json list = json::array();
       for (const auto& f : feature::kNames)
         if (s.has(f.bit)) list.push_back(f.token);
       j["features"] = list;
     },
     [](KernelSpec& s, const json& j) {
       if (!j.contains("features") || !j["features"].is_array()) bad("spec field 'features' must be an array");
       s.features = 0;
       for (const auto& f : j["features"]) {
         bool known = false;
         for (const auto& fn : feature::kNames)
           if (f.is_string() && f.get<std::string>() == fn.token) {
             s.features |= fn.bit;
             known = true;
           }
         if (!known) bad(fmt::format("spec field 'features': unknown feature {}", f.dump()));
       }
     },
     [](const KernelSpec& s) {
       std::string out;
       for (const auto& f : feature::kNames)
         if (s.has(f.bit)) out += (out.empty() ? "" : ".") + std::string(f.token);
       return out;
     },
     [](KernelSpec& s, const std::string& t) {
       for (const auto& f : feature::kNames)
         if (t == f.token) return s.features |= f.bit, true;
       return false;
     },
     false, true, "a feature (softcap, window, sinks, lse, scaleptr, raggedq, pse, splitrope, leftpad, prefix, ktokscale, vtokscale, dqpass, kvpair, tokhead)"},
    {"backend", [](const KernelSpec& s) -> uint64_t { return static_cast<uint64_t>(s.backend); },
     [](const KernelSpec& s, json& j) { j["backend"] = to_string(s.backend); },
     [](KernelSpec& s, const json& j) { s.backend = parse_enum("backend", get_str(j, "backend"), kBackends); },
     [](const KernelSpec& s) { return s.backend == Backend::kXqa ? std::string() : std::string("trtllmgen"); },
     [](KernelSpec& s, const std::string& t) { return t == "trtllmgen" && (s.backend = Backend::kTrtllmGen, true); },
     false, false, "trtllmgen"},
    {"arch", [](const KernelSpec& s) -> uint64_t { return static_cast<uint64_t>(s.arch.sm) * 2 + s.arch.arch_specific; },
     [](const KernelSpec& s, json& j) { j["arch"] = s.arch.str(); },
     [](KernelSpec& s, const json& j) { s.arch = Arch::parse(get_str(j, "arch")); },
     [](const KernelSpec& s) { return arch_token(s.arch); },
     [](KernelSpec& s, const std::string& t) {
       const bool looks = t.size() > 2 && t.compare(0, 2, "sm") == 0 && t.find('_') == std::string::npos &&
                          std::isdigit(static_cast<unsigned char>(t[2]));
       if (!looks) return false;
       s.arch = Arch::parse("sm_" + t.substr(2));  // an arch it refuses (sm70) is an error, not another token
       return true;
     },
     false, false, "the arch (sm90a, sm80, ...)"},
};

constexpr size_t kArchRow = sizeof(kFields) / sizeof(kFields[0]) - 1;

[[noreturn]] void bad_name(const std::string& name, const std::string& why) {
  bad(fmt::format("kernel name '{}': {} (expected e.g. decode.bf16.hd128.g4.contig.nhd.sm90a "
                  "or xqa.bf16.kve4m3.hd128.g8.p32.nhd.sm90a; `attnjit cache ls` lists stored names)",
                  name, why));
}

std::vector<std::string> split_dots(const std::string& s) {
  std::vector<std::string> parts;
  for (size_t start = 0;;) {
    const size_t dot = s.find('.', start);
    parts.push_back(s.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) return parts;
    start = dot + 1;
  }
}

}  // namespace

const Field* fields_begin() { return std::begin(kFields); }
const Field* fields_end() { return std::end(kFields); }

std::string short_dtype_name(DType d) {
  switch (d) {
    case DType::kFloat8E4M3: return "e4m3";
    case DType::kFloat8E5M2: return "e5m2";
    default: return dtype_name(d);
  }
}

const std::vector<std::string>& json_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k;
    for (const Field& f : kFields) k.push_back(f.key);
    k.push_back("head_dim_qk");
    k.push_back("head_dim_vo");
    std::sort(k.begin(), k.end());
    return k;
  }();
  return keys;
}

bool KernelSpec::operator==(const KernelSpec& o) const {
  // Member by member: every launch compares specs (its backend memo, its kernel), and the
  // field table's indirect reads took ~40 ns a comparison. A member added to KernelSpec
  // changes its size and stops the build here until it joins this list (and the table;
  // the SpecEquality test checks the two agree field by field).
  static_assert(sizeof(KernelSpec) == 40, "a new KernelSpec member: compare it here and add it to kFields");
  return family == o.family && backend == o.backend && q_dtype == o.q_dtype && kv_dtype == o.kv_dtype &&
         out_dtype == o.out_dtype && head_dim_qk == o.head_dim_qk && head_dim_vo == o.head_dim_vo &&
         group_size == o.group_size && page_size == o.page_size && layout == o.layout && mask == o.mask &&
         pos_encoding == o.pos_encoding && features == o.features && arch == o.arch;
}

size_t KernelSpecHash::operator()(const KernelSpec& s) const noexcept {
  // Field-wise FNV mixing; no allocation (this runs on the launch path).
  uint64_t h = 1469598103934665603ull;
  for (const Field& f : kFields) h = (h ^ f.value(s)) * 1099511628211ull;
  return static_cast<size_t>(h);
}

nlohmann::json KernelSpec::to_json() const {
  json j = json::object();  // nlohmann's object is a sorted map: canonical key order
  for (const Field& f : kFields) f.write_json(*this, j);
  return j;
}

KernelSpec KernelSpec::from_json(const nlohmann::json& j) {
  if (!j.is_object()) bad("spec JSON must be an object");
  KernelSpec s;
  for (const Field& f : kFields) f.read_json(s, j);
  return s;
}

std::string KernelSpec::name() const {
  std::string n;
  for (const Field& f : kFields) {
    const std::string t = f.token(*this);
    if (!t.empty()) n += (n.empty() ? "" : ".") + t;
  }
  return n;
}

KernelSpec KernelSpec::from_name(const std::string& name, bool* had_arch) {
  if (name.empty()) bad_name(name, "empty");
  const std::vector<std::string> tokens = split_dots(name);
  KernelSpec s;
  size_t row = 0;
  bool have_arch = false;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string& tok = tokens[i];
    bool taken = false;
    for (; row < std::size(kFields) && !taken;) {
      const Field& f = kFields[row];
      try {
        taken = f.read_token(s, tok);
      } catch (const Error& e) {
        bad_name(name, util::bare_message(e));
      }
      if (taken) {
        have_arch |= row == kArchRow;
        if (!f.repeats) ++row;
      } else if (f.required) {
        if (row == 0) bad_name(name, fmt::format("unknown op family '{}' (known: {})", tok, [] {
                                 std::string k;
                                 for (OpFamily fam : kFamilies) k += (k.empty() ? "" : ", ") + std::string(to_string(fam));
                                 return k;
                               }()));
        bad_name(name, fmt::format("expected {} at '{}'", f.expect, tok));
      } else {
        ++row;
      }
    }
    if (!taken) {
      if (have_arch) bad_name(name, fmt::format("the arch '{}' must be the last token", tokens[i - 1]));
      bad_name(name, fmt::format("unknown token '{}' (masks: causal, custom; pos: rope_llama, alibi; features: "
                                 "softcap, window, sinks, lse, scaleptr, raggedq, pse, splitrope, leftpad, prefix, ktokscale, vtokscale, dqpass, kvpair, tokhead; backend: trtllmgen; "
                                 "arch: sm90a, sm80, ...)",
                                 tok));
    }
  }
  for (; row < std::size(kFields); ++row)
    if (kFields[row].required) bad_name(name, fmt::format("missing {}", kFields[row].expect));
  // Tokens out of order or repeated would give a different name: a name must print
  // back unchanged, so that it means exactly one spec.
  std::string canonical = s.name();
  if (!have_arch) canonical.erase(canonical.rfind('.'));
  if (canonical != name) bad_name(name, fmt::format("not in canonical form; did you mean '{}'?", canonical));
  if (had_arch) *had_arch = have_arch;
  return s;
}

}  // namespace attnjit::spec
