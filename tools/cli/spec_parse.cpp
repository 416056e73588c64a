// Readable-name and JSON parsing of KernelSpecs for the CLI (see spec_parse.hpp).
#include "cli/spec_parse.hpp"

#include <fmt/format.h>

#include <vector>

#include "attnjit/error.hpp"
#include "util/bounded_input.hpp"

namespace attnjit::cli {

namespace {

// Longer than any real name (about 60 characters), short enough to quote whole.
constexpr size_t kMaxNameChars = 200;

[[noreturn]] void bad_name(const std::string& name, const std::string& why) {
  throw Error(ErrorCode::kInvalidArgument,
              fmt::format("kernel name '{}': {} (expected e.g. decode.bf16.hd128.g4.contig.nhd.sm90a "
                          "or xqa.bf16.kve4m3.hd128.g8.p32.nhd.sm90a; `attnjit cache ls` lists stored names)",
                          util::quote_input(name), why));
}

// `--arch` and the text name one arch each: a quiet override would build a
// kernel other than the one named.
void check_arch_agrees(const std::string& what, const spec::Arch& named, const std::optional<spec::Arch>& arch) {
  if (arch && !(*arch == named))
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{} names {} but --arch asks for {}; give the arch once", what, named.str(), arch->str()));
}

std::vector<std::string> split_dots(const std::string& s) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t dot = s.find('.', start);
    parts.push_back(s.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return parts;
}

bool parse_int(const std::string& s, int* out) {
  if (s.empty() || s.size() > 6 || s.find_first_not_of("0123456789") != std::string::npos) return false;
  *out = std::stoi(s);
  return true;
}


bool looks_like_arch(const std::string& t) {
  return t.size() > 2 && t.compare(0, 2, "sm") == 0 && t.find('_') == std::string::npos &&
         std::isdigit(static_cast<unsigned char>(t[2]));
}

}  // namespace

spec::KernelSpec spec_from_name(const std::string& name, const std::optional<spec::Arch>& arch,
                                const spec::Arch& fallback) {
  if (name.empty()) bad_name(name, "empty");
  if (name.size() > kMaxNameChars) bad_name(name, fmt::format("longer than {} characters", kMaxNameChars));
  std::vector<std::string> t = split_dots(name);
  size_t i = 0;
  auto at_end = [&] { return i >= t.size(); };
  spec::KernelSpec s;

  // family
  if (t[i] == "decode") s.family = spec::OpFamily::kDecode;
  else if (t[i] == "xqa") s.family = spec::OpFamily::kXqa;
  else bad_name(name, fmt::format("unknown op family '{}' (known: decode, xqa)", util::quote_input(t[i], 40)));
  ++i;
  // q dtype, then optional kv/out dtypes
  if (at_end()) bad_name(name, "missing the q dtype after the family");
  try {
    s.q_dtype = spec::parse_dtype(t[i]);
  } catch (const Error&) {
    bad_name(name, fmt::format("unknown q dtype '{}'", t[i]));
  }
  ++i;
  s.kv_dtype = s.out_dtype = s.q_dtype;
  if (!at_end() && t[i].rfind("kv", 0) == 0) {
    try {
      s.kv_dtype = spec::parse_dtype(t[i].substr(2));
    } catch (const Error&) {
      bad_name(name, fmt::format("unknown kv dtype in '{}'", t[i]));
    }
    ++i;
  }
  if (!at_end() && t[i].size() > 1 && t[i][0] == 'o') {
    try {
      s.out_dtype = spec::parse_dtype(t[i].substr(1));
    } catch (const Error&) {
      bad_name(name, fmt::format("unknown output dtype in '{}'", t[i]));
    }
    ++i;
  }
  // hdN, gN
  if (at_end() || t[i].rfind("hd", 0) != 0 || !parse_int(t[i].substr(2), &s.head_dim))
    bad_name(name, fmt::format("expected hd<head_dim> at '{}'", at_end() ? "" : t[i]));
  ++i;
  if (at_end() || t[i].rfind("g", 0) != 0 || !parse_int(t[i].substr(1), &s.group_size))
    bad_name(name, fmt::format("expected g<group_size> at '{}'", at_end() ? "" : t[i]));
  ++i;
  // pN | contig
  if (at_end()) bad_name(name, "missing p<page_size> or contig");
  if (t[i] == "contig") s.page_size = 0;
  else if (t[i].rfind("p", 0) != 0 || !parse_int(t[i].substr(1), &s.page_size))
    bad_name(name, fmt::format("expected p<page_size> or contig at '{}'", t[i]));
  ++i;
  // layout
  if (at_end() || (t[i] != "nhd" && t[i] != "hnd"))
    bad_name(name, fmt::format("expected the layout nhd or hnd at '{}'", at_end() ? "" : t[i]));
  s.layout = t[i] == "nhd" ? spec::KvLayout::kNHD : spec::KvLayout::kHND;
  ++i;
  // optional tokens: mask, pos encoding, features, backend, then the arch
  bool have_arch = false;
  for (; !at_end(); ++i) {
    const std::string& tok = t[i];
    if (tok == "causal") s.mask = spec::MaskMode::kCausal;
    else if (tok == "custom") s.mask = spec::MaskMode::kCustom;
    else if (tok == "rope_llama") s.pos_encoding = spec::PosEncoding::kRopeLlama;
    else if (tok == "alibi") s.pos_encoding = spec::PosEncoding::kAlibi;
    else if (tok == "trtllmgen") s.backend = spec::Backend::kTrtllmGen;
    else if (looks_like_arch(tok)) {
      if (i + 1 != t.size()) bad_name(name, fmt::format("the arch '{}' must be the last token", tok));
      try {
        s.arch = spec::Arch::parse("sm_" + tok.substr(2));
      } catch (const Error& e) {
        bad_name(name, util::bare_message(e));
      }
      have_arch = true;
    } else {
      bool known = false;
      for (const auto& f : spec::feature::kNames)
        if (tok == f.token) {
          s.features |= f.bit;
          known = true;
        }
      if (!known)
        bad_name(name, fmt::format("unknown token '{}' (masks: causal, custom; pos: rope_llama, alibi; "
                                   "features: softcap, window, sinks, lse, scaleptr, cudacore, raggedq; "
                                   "backend: trtllmgen; arch: sm90a, sm80, ...)", tok));
    }
  }
  // Tokens out of order or repeated would give a different name: reject them,
  // so a name always means exactly one spec.
  std::string canonical = s.name();
  if (!have_arch) canonical.erase(canonical.rfind('.'));  // drop the default arch suffix
  if (canonical != name) bad_name(name, fmt::format("not in canonical form; did you mean '{}'?", canonical));
  if (have_arch) check_arch_agrees(fmt::format("kernel name '{}'", name), s.arch, arch);
  if (arch) s.arch = *arch;
  else if (!have_arch) s.arch = fallback;
  return s;
}

spec::KernelSpec spec_from_json_text(const std::string& text, const std::optional<spec::Arch>& arch,
                                     const spec::Arch& fallback) {
  const nlohmann::json user = util::parse_json_bounded(text, "spec JSON");
  if (!user.is_object())
    throw Error(ErrorCode::kInvalidArgument, fmt::format("spec JSON: expected a JSON object, got {} {}",
                                                         user.type_name(), util::quote_input(user.dump())));
  nlohmann::json j = spec::KernelSpec{}.to_json();
  if (user.contains("q_dtype")) {
    if (!user.contains("kv_dtype")) j["kv_dtype"] = user.at("q_dtype");
    if (!user.contains("out_dtype")) j["out_dtype"] = user.at("q_dtype");
  }
  for (auto it = user.begin(); it != user.end(); ++it) {
    if (!j.contains(it.key()))
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("spec JSON: unknown field '{}' (fields: {})", util::quote_input(it.key()), [&] {
                    std::string keys;
                    for (auto k = j.begin(); k != j.end(); ++k) keys += (keys.empty() ? "" : ", ") + k.key();
                    return keys;
                  }()));
    j[it.key()] = it.value();
  }
  if (!user.contains("arch")) j["arch"] = arch ? arch->str() : fallback.str();
  spec::KernelSpec s;
  try {
    s = spec::KernelSpec::from_json(j);
  } catch (const Error& e) {
    // Its messages may quote a field's value whole.
    throw Error(e.code(), util::quote_input(util::bare_message(e), 2 * util::kMaxQuotedChars));
  }
  if (user.contains("arch")) check_arch_agrees("spec JSON", s.arch, arch);
  return s;
}

spec::KernelSpec spec_from_text(const std::string& text, const std::optional<spec::Arch>& arch,
                                const spec::Arch& fallback) {
  size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '{') return spec_from_json_text(text, arch, fallback);
  if (text.size() > 5 && text.compare(text.size() - 5, 5, ".json") == 0) {
    return spec_from_json_text(util::read_regular_file(text, "spec file"), arch, fallback);
  }
  return spec_from_name(text, arch, fallback);
}

}  // namespace attnjit::cli
