// Readable-name and JSON parsing of KernelSpecs for the CLI (see spec_parse.hpp).
#include "cli/spec_parse.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <vector>

#include "attnjit/error.hpp"
#include "util/bounded_input.hpp"

namespace attnjit::cli {

namespace {

// Longer than any real name (about 60 characters), short enough to quote whole.
constexpr size_t kMaxNameChars = 200;

// `--arch` and the text name one arch each: a quiet override would build a
// kernel other than the one named.
void check_arch_agrees(const std::string& what, const spec::Arch& named, const std::optional<spec::Arch>& arch) {
  if (arch && !(*arch == named))
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{} names {} but --arch asks for {}; give the arch once", what, named.str(), arch->str()));
}

}  // namespace

spec::KernelSpec spec_from_name(const std::string& name, const std::optional<spec::Arch>& arch,
                                const spec::Arch& fallback) {
  // The grammar is the spec's field table (src/spec/spec_fields.cpp): one copy.
  if (name.size() > kMaxNameChars)
    throw Error(ErrorCode::kInvalidArgument, fmt::format("kernel name '{}': longer than {} characters",
                                                         util::quote_input(name), kMaxNameChars));
  bool had_arch = false;
  spec::KernelSpec s = spec::KernelSpec::from_name(name, &had_arch);
  if (had_arch) check_arch_agrees(fmt::format("kernel name '{}'", name), s.arch, arch);
  if (arch) s.arch = *arch;
  else if (!had_arch) s.arch = fallback;
  return s;
}

spec::KernelSpec spec_from_json_text(const std::string& text, const std::optional<spec::Arch>& arch,
                                     const spec::Arch& fallback) {
  const nlohmann::json user = util::parse_json_bounded(text, "spec JSON");
  if (!user.is_object())
    throw Error(ErrorCode::kInvalidArgument, fmt::format("spec JSON: expected a JSON object, got {} {}",
                                                         user.type_name(), util::quote_input(user.dump())));
  nlohmann::json j = spec::KernelSpec{}.to_json();
  // Two head dims given apart replace the default's single "head_dim".
  if (user.contains("head_dim_qk") || user.contains("head_dim_vo")) j.erase("head_dim");
  if (user.contains("q_dtype")) {
    if (!user.contains("kv_dtype")) j["kv_dtype"] = user.at("q_dtype");
    if (!user.contains("out_dtype")) j["out_dtype"] = user.at("q_dtype");
  }
  const auto& known = spec::json_keys();
  for (auto it = user.begin(); it != user.end(); ++it) {
    if (std::find(known.begin(), known.end(), it.key()) == known.end())
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("spec JSON: unknown field '{}' (fields: {})", util::quote_input(it.key()), [&] {
                    std::string keys;
                    for (const auto& k : known) keys += (keys.empty() ? "" : ", ") + k;
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
