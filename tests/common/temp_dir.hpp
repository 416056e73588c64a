// A private temporary folder (0700, from mkdtemp) removed with its contents,
// even read-only ones, when it goes out of scope.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>

namespace attnjit::testing {

class TempDir {
 public:
  explicit TempDir(const std::string& tag = "test") {
    std::string tmpl = "/tmp/attnjit-" + tag + "-XXXXXX";
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    namespace fs = std::filesystem;
    std::error_code ec;
    for (auto& p : fs::recursive_directory_iterator(path_, ec))
      fs::permissions(p.path(), fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace attnjit::testing
