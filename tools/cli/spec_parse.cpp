// Readable-name and JSON parsing of KernelSpecs for the CLI (see spec_parse.hpp).
#include "cli/spec_parse.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "attnjit/error.hpp"

namespace attnjit::cli {

spec::KernelSpec spec_from_name(const std::string& name, const std::optional<spec::Arch>& arch,
                                const spec::Arch& fallback) {
  // The grammar is the spec's field table (src/spec/spec_fields.cpp): one copy.
  bool had_arch = false;
  spec::KernelSpec s = spec::KernelSpec::from_name(name, &had_arch);
  if (arch) s.arch = *arch;
  else if (!had_arch) s.arch = fallback;
  return s;
}

spec::KernelSpec spec_from_json_text(const std::string& text, const std::optional<spec::Arch>& arch,
                                     const spec::Arch& fallback) {
  nlohmann::json user = nlohmann::json::parse(text, nullptr, false);
  if (user.is_discarded() || !user.is_object())
    throw Error(ErrorCode::kInvalidArgument, fmt::format("spec JSON: not a JSON object: {}", text));
  nlohmann::json j = spec::KernelSpec{}.to_json();
  // Two head dims given apart replace the default's single "head_dim".
  if (user.contains("head_dim_qk") || user.contains("head_dim_vo")) j.erase("head_dim");
  if (user.contains("q_dtype")) {
    if (!user.contains("kv_dtype")) j["kv_dtype"] = user["q_dtype"];
    if (!user.contains("out_dtype")) j["out_dtype"] = user["q_dtype"];
  }
  const auto& known = spec::json_keys();
  for (auto it = user.begin(); it != user.end(); ++it) {
    if (std::find(known.begin(), known.end(), it.key()) == known.end())
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("spec JSON: unknown field '{}' (fields: {})", it.key(), [&] {
                    std::string keys;
                    for (const auto& k : known) keys += (keys.empty() ? "" : ", ") + k;
                    return keys;
                  }()));
    j[it.key()] = it.value();
  }
  if (arch) j["arch"] = arch->str();
  else if (!user.contains("arch")) j["arch"] = fallback.str();
  return spec::KernelSpec::from_json(j);
}

spec::KernelSpec spec_from_text(const std::string& text, const std::optional<spec::Arch>& arch,
                                const spec::Arch& fallback) {
  size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '{') return spec_from_json_text(text, arch, fallback);
  if (text.size() > 5 && text.compare(text.size() - 5, 5, ".json") == 0) {
    std::ifstream in(text);
    if (!in)
      throw Error(ErrorCode::kInvalidArgument, fmt::format("spec file '{}': cannot be read", text));
    std::stringstream ss;
    ss << in.rdbuf();
    return spec_from_json_text(ss.str(), arch, fallback);
  }
  return spec_from_name(text, arch, fallback);
}

}  // namespace attnjit::cli
