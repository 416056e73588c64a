// The model configs built into the CLI (tools/configs/*.json), plus the folders on disk that add or override them.
#pragma once

#include <string>
#include <vector>

namespace attnjit::cli {

struct BundledConfig {
  const char* name;     // "llama-3-8b" (the file name without .json)
  const char* content;  // the JSON text
};

// Generated at build time by cmake/embed_configs.cmake.
const std::vector<BundledConfig>& embedded_configs();

// Folders searched before the embedded set, first match wins:
// $ATTNJIT_CONFIG_DIR, then <prefix>/share/attnjit/configs next to the installed binary.
std::vector<std::string> config_override_dirs();

// The name of an embedded config as resolve_config_path() returns it ("bundled:llama-3-8b"),
// and its inverse: the embedded JSON text of such a name, or nullptr.
std::string bundled_path(const std::string& name);
const char* bundled_content(const std::string& path);

}  // namespace attnjit::cli
