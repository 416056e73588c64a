// CCCL discovery and header-tree hashing (see toolkit_headers.hpp).
#include "compile/toolkit_headers.hpp"

#include <dlfcn.h>
#include <fmt/format.h>
#include <nvrtc.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "attnjit/error.hpp"
#include "util/hash.hpp"

#ifndef ATTNJIT_CUDA_INCLUDE_DIR
#define ATTNJIT_CUDA_INCLUDE_DIR ""
#endif

namespace attnjit::compile {

namespace fs = std::filesystem;

namespace {

// All of CCCL, not only libcu++ (cuda/, nv/): with its folder on the include path, a unit
// can reach cub/ and thrust/ too, and whatever it can reach must be in the key.
const std::vector<std::string> kCcclDirs = {"cuda", "nv", "cub", "thrust"};

// The toolkit that NVRTC itself came from: its headers match its builtins best.
std::string next_to_nvrtc() {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&nvrtcVersion), &info) || !info.dli_fname) return "";
  std::error_code ec;
  const fs::path lib = fs::canonical(info.dli_fname, ec);
  return ec ? "" : (lib.parent_path().parent_path() / "include" / "cccl").string();
}

render::IncludeDir find_cccl() {
  std::vector<std::string> tried;
  if (const char* d = std::getenv("ATTNJIT_CCCL_DIR"); d && *d) tried.push_back(d);
  tried.push_back(next_to_nvrtc());
  if (*ATTNJIT_CUDA_INCLUDE_DIR) tried.push_back(std::string(ATTNJIT_CUDA_INCLUDE_DIR) + "/cccl");
  tried.push_back("/usr/local/cuda/include/cccl");
  std::string list;
  for (const auto& dir : tried) {
    if (dir.empty()) continue;
    std::error_code ec;
    if (fs::is_regular_file(fs::path(dir) / "cuda" / "ptx", ec)) return {dir, hash_header_tree(dir, kCcclDirs)};
    list += (list.empty() ? "" : ", ") + dir;
  }
  throw Error(ErrorCode::kUnsupported,
              fmt::format("CCCL headers (cuda/ptx) not found in: {}; set ATTNJIT_CCCL_DIR to the folder holding cuda/ptx",
                          list));
}

}  // namespace

std::string hash_header_tree(const std::string& root, const std::vector<std::string>& subdirs) {
  std::vector<std::string> files;
  for (const auto& sub : subdirs) {
    std::error_code ec;
    for (fs::recursive_directory_iterator it(fs::path(root) / sub, ec), end; !ec && it != end; it.increment(ec))
      if (it->is_regular_file()) files.push_back(fs::relative(it->path(), root).generic_string());
  }
  std::sort(files.begin(), files.end());
  util::KeyEncoder e;
  for (const auto& f : files) {
    std::ifstream in(fs::path(root) / f, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    e.field(f, ss.str());
  }
  return e.hex();
}

const render::IncludeDir& cccl_include_dir() {
  // Not a static initializer: a lookup that throws is retried by the next caller.
  static const render::IncludeDir dir = find_cccl();
  return dir;
}

void add_cccl(render::RenderedUnit& unit) {
  const render::IncludeDir& d = cccl_include_dir();
  for (const auto& have : unit.include_dirs)
    if (have.path == d.path) return;
  unit.include_dirs.push_back(d);
}

}  // namespace attnjit::compile
