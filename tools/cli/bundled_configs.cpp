// Embedded model configs and the on-disk folders that may add to or override them.
#include "cli/bundled_configs.hpp"

#include <cstdlib>
#include <filesystem>
#include <system_error>

#ifndef ATTNJIT_INSTALL_CONFIG_DIR
#define ATTNJIT_INSTALL_CONFIG_DIR "share/attnjit/configs"
#endif

namespace attnjit::cli {

namespace {
constexpr const char* kBundledPrefix = "bundled:";
}

std::vector<std::string> config_override_dirs() {
  namespace fs = std::filesystem;
  std::vector<std::string> dirs;
  if (const char* d = std::getenv("ATTNJIT_CONFIG_DIR"); d && *d) dirs.push_back(d);
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) dirs.push_back((exe.parent_path().parent_path() / ATTNJIT_INSTALL_CONFIG_DIR).string());
  return dirs;
}

std::string bundled_path(const std::string& name) { return kBundledPrefix + name; }

const char* bundled_content(const std::string& path) {
  const std::string prefix = kBundledPrefix;
  if (path.compare(0, prefix.size(), prefix) != 0) return nullptr;
  const std::string name = path.substr(prefix.size());
  for (const auto& c : embedded_configs())
    if (name == c.name) return c.content;
  return nullptr;
}

}  // namespace attnjit::cli
