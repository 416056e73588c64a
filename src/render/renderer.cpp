#include "render/renderer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <list>
#include <regex>
#include <set>
#include <sstream>

#include "attnjit/error.hpp"
#include "render/embedded_templates.hpp"
#include "render/family.hpp"
#include "util/hash.hpp"

namespace attnjit::render {

namespace {

// <cuda/...> and <nv/...> are CCCL's libcu++: NVRTC finds them only through a unit's
// include_dirs (no -I, no search path), and the key hashes those folders' content.
bool is_cccl_include(const std::string& bracket, const std::string& name) {
  return bracket == "<" && (name.rfind("cuda/", 0) == 0 || name.rfind("nv/", 0) == 0);
}

// NVRTC reads an include it was not handed from disk (relative to the working
// directory), where the template hash cannot see it; and the host fills the params
// struct as it was built. So an override must be self-contained and keep that struct.
void check_template_set(const std::vector<TemplateFile>& files, const std::string& dir) {
  std::set<std::string, std::less<>> names;
  for (const auto& f : files) names.emplace(f.path);
  static const std::regex include_line(R"(^\s*#\s*include\s*([<"])([^">]*)[">])");
  for (const auto& f : files) {
    std::istringstream lines{std::string(f.content)};
    std::string line;
    std::smatch m;
    while (std::getline(lines, line))
      if (std::regex_search(line, m, include_line) && !is_cccl_include(m[1], m[2]) &&
          (m[1] == "<" || !names.count(m[2].str())))
        throw Error(ErrorCode::kInvalidArgument,
                    fmt::format("ATTNJIT_TEMPLATE_DIR='{}': {} includes {}{}{}, which is not a .cuh file of that "
                                "folder; the cache key covers only those, so the templates must be self-contained",
                                dir, f.path, m[1].str(), m[2].str(), m[1] == "<" ? ">" : "\""));
  }
  for (auto fam = families_begin(); fam != families_end(); ++fam) {
    const std::string params = (*fam)->params_header;  // (a std::string: built.path is a char*)
    for (const auto& built : embedded_templates())
      if (built.path == params)
        for (const auto& f : files)
          if (f.path == params && f.content != built.content)
            throw Error(ErrorCode::kInvalidArgument,
                        fmt::format("ATTNJIT_TEMPLATE_DIR='{}': {} differs from the one this library was built "
                                    "with; the host fills that struct, so it cannot change without a rebuild",
                                    dir, params));
  }
}

// The text of an ATTNJIT_TEMPLATE_DIR set, which its views point into: kept for the
// process, as the embedded text is (a list, so that adding a file moves none).
struct LoadedText {
  std::list<std::string> paths, contents;
};

std::vector<TemplateFile> load_template_dir(const std::string& dir, LoadedText& text) {
  namespace fs = std::filesystem;
  std::vector<TemplateFile> files;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("ATTNJIT_TEMPLATE_DIR='{}' is not a directory", dir));
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file() || e.path().extension() != ".cuh") continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    text.paths.push_back(fs::relative(e.path(), dir).generic_string());
    text.contents.push_back(ss.str());
    files.push_back({text.paths.back(), text.contents.back()});
  }
  std::sort(files.begin(), files.end(),
            [](const TemplateFile& a, const TemplateFile& b) { return a.path < b.path; });
  check_template_set(files, dir);
  return files;
}

}  // namespace

namespace {
// $ATTNJIT_TEMPLATE_DIR, or null: read once, so that the set and its hash agree for the process's life.
const char* template_override_dir() {
  static const char* const dir = [] {
    const char* d = std::getenv("ATTNJIT_TEMPLATE_DIR");
    return d && *d ? d : nullptr;
  }();
  return dir;
}
}  // namespace

bool templates_overridden() { return template_override_dir() != nullptr; }

const std::shared_ptr<const std::vector<TemplateFile>>& template_set() {
  static const std::shared_ptr<const std::vector<TemplateFile>> files = [] {
    if (const char* dir = template_override_dir()) {
      static LoadedText text;
      return std::make_shared<const std::vector<TemplateFile>>(load_template_dir(dir, text));
    }
    std::vector<TemplateFile> v;
    for (const auto& f : embedded_templates()) v.push_back({f.path, f.content});
    return std::make_shared<const std::vector<TemplateFile>>(std::move(v));
  }();
  return files;
}

const std::vector<TemplateFile>& template_files() { return *template_set(); }

namespace {
std::string digest_of(const std::vector<TemplateFile>& files) {
  util::KeyEncoder e;
  for (const auto& f : files) e.field(f.path, f.content);
  return e.hex();
}
}  // namespace

const std::string& template_hash() {
  // The embedded set's was taken at build time; an override's once per process (~490 KB).
  static const std::string h =
      templates_overridden() ? digest_of(template_files()) : std::string(embedded_templates_digest());
  return h;
}

std::string headers_hash(const RenderedUnit& unit) {
  static const std::vector<TemplateFile> kNone;
  std::string set = unit.headers == template_set() ? template_hash() : digest_of(unit.headers ? *unit.headers : kNone);
  if (unit.include_dirs.empty()) return set;
  util::KeyEncoder e;
  e.field("templates", set);
  for (const auto& d : unit.include_dirs) e.field("include_dir", d.content_hash);
  return e.hex();
}

int max_smem_per_block(const spec::Arch& arch) {
  switch (arch.sm) {
    case 80:
    case 87: return 163 * 1024;
    case 90:
    case 100:
    case 101:
    case 103:
    case 110: return 227 * 1024;
    default: return 99 * 1024;  // sm_86, sm_89, sm_120, sm_121 and anything unknown
  }
}

RenderedUnit render(const spec::KernelSpec& s) {
  const Family* family = find_family(s.family);
  if (!family) throw Error(ErrorCode::kUnsupported, fmt::format("{}: no family registered for it", s.name()));
  // Every spec reaches the templates through here (ops, CLI names, JSON, model
  // configs), so here is where one the family cannot serve is refused.
  std::string why;
  if (!family->can_implement(s, s.arch, &why))
    throw Error(ErrorCode::kUnsupported, fmt::format("{}: {}", s.name(), why));
  RenderedUnit unit = family->generate(s);
  // Every unit carries the templates it may include, so compile() needs nothing else.
  if (!unit.headers) unit.headers = template_set();
  return unit;
}

const char* device_type(DType d, std::string_view family) {
  switch (d) {
    case DType::kFloat16: return "attnjit::half_t";
    case DType::kBFloat16: return "attnjit::bf16_t";
    case DType::kFloat8E4M3: return "attnjit::e4m3_t";
    case DType::kFloat8E5M2: return "attnjit::e5m2_t";
    case DType::kInt8: return "attnjit::i8_t";
    case DType::kInt32: return "attnjit::i4x8_t";
    default:
      throw Error(ErrorCode::kUnsupported,
                  fmt::format("dtype {} has no device type in the {} templates", dtype_name(d), family));
  }
}

}  // namespace attnjit::render
