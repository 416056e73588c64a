#include "compile/nvrtc_compiler.hpp"

#include <dlfcn.h>
#include <fmt/format.h>
#include <nvrtc.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <memory>
#include <regex>

#include "attnjit/error.hpp"
#include "compile/library_identity.hpp"
#include "util/log.hpp"

namespace attnjit::compile {

namespace {

void check_nvrtc(nvrtcResult r, const char* what) {
  if (r != NVRTC_SUCCESS)
    throw Error(ErrorCode::kInternal, fmt::format("{}: {}", what, nvrtcGetErrorString(r)));
}

struct ProgramGuard {
  nvrtcProgram prog = nullptr;
  ~ProgramGuard() {
    if (prog) nvrtcDestroyProgram(&prog);
  }
};

}  // namespace

nlohmann::json Resources::to_json() const {
  return {{"registers", registers},       {"shared_bytes", shared_bytes},
          {"stack_bytes", stack_bytes},   {"spill_stores", spill_stores},
          {"spill_loads", spill_loads}};
}

Resources Resources::from_json(const nlohmann::json& j) {
  // Stored metadata may come from an imported bundle: a field of the wrong type
  // reads as unknown (-1) rather than throwing.
  auto field = [&](const char* name) {
    const auto it = j.is_object() ? j.find(name) : j.end();
    return it != j.end() && it->is_number_integer() ? it->get<int>() : -1;
  };
  Resources r;
  r.registers = field("registers");
  r.shared_bytes = field("shared_bytes");
  r.stack_bytes = field("stack_bytes");
  r.spill_stores = field("spill_stores");
  r.spill_loads = field("spill_loads");
  return r;
}

std::string nvrtc_library_path() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&nvrtcVersion), &info) && info.dli_fname) return info.dli_fname;
  return "";
}

const std::vector<int>& nvrtc_supported_sms() {
  static const std::vector<int> sms = [] {
    int n = 0;
    std::vector<int> v;
    if (nvrtcGetNumSupportedArchs(&n) == NVRTC_SUCCESS && n > 0) {
      v.resize(size_t(n));
      if (nvrtcGetSupportedArchs(v.data()) != NVRTC_SUCCESS) v.clear();
    }
    return v;
  }();
  return sms;
}

const std::string& nvrtc_version() {
  static const std::string v = [] {
    int major = 0, minor = 0;
    nvrtcVersion(&major, &minor);
    // nvrtcVersion() has no patch level: the identity of the loaded library's
    // content (its build-id) tells patch releases apart. Never its file name or
    // path, which differ between machines with the same toolkit (libnvrtc.so.13
    // here, libnvrtc.so.13.0.88 there) and would change every key.
    const std::string path = nvrtc_library_path();
    const std::string identity = path.empty() ? "" : library_identity(path);
    return fmt::format("{}.{} ({})", major, minor, identity.empty() ? "identity unknown" : identity);
  }();
  return v;
}

std::vector<std::string> nvrtc_options(const spec::Arch& arch) {
  return {"--gpu-architecture=" + arch.str(), "--std=c++17", "--ptxas-options=-v",
          "-DNDEBUG"};
}

std::string join_options(const std::vector<std::string>& options) {
  std::string s;
  for (const auto& o : options) s += (s.empty() ? "" : " ") + o;
  return s;
}

Resources parse_ptxas_log(const std::string& log) {
  Resources r;
  std::smatch m;
  static const std::regex regs(R"(Used (\d+) registers)");
  static const std::regex smem(R"((\d+) bytes smem)");
  static const std::regex frame(R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
  if (std::regex_search(log, m, regs)) r.registers = std::stoi(m[1]);
  if (std::regex_search(log, m, smem)) r.shared_bytes = std::stoi(m[1]);
  else if (r.registers >= 0) r.shared_bytes = 0;  // ptxas omits the smem note when it is 0
  if (std::regex_search(log, m, frame)) {
    r.stack_bytes = std::stoi(m[1]);
    r.spill_stores = std::stoi(m[2]);
    r.spill_loads = std::stoi(m[3]);
  }
  return r;
}

CompileResult compile(const std::string& kernel_name, const render::RenderedUnit& unit,
                      const spec::Arch& arch) {
  // Only what the unit carries: compile() is a pure function of (unit, arch), as the key assumes.
  // NVRTC reads NUL-terminated text; a unit's headers are views (of any text), so they are
  // copied here, where a compile's cost hides the copy.
  std::vector<std::string> header_text;
  header_text.reserve(unit.headers ? 2 * unit.headers->size() : 0);
  std::vector<const char*> header_src, header_names;
  if (unit.headers)
    for (const auto& t : *unit.headers) {
      header_src.push_back(header_text.emplace_back(t.content).c_str());
      header_names.push_back(header_text.emplace_back(t.path).c_str());
    }
  const std::vector<std::string> opts = nvrtc_options(arch);
  // Include dirs are passed but not recorded in `options`: their paths differ between machines,
  // and the key covers their content through render::headers_hash().
  std::vector<std::string> includes;
  for (const auto& d : unit.include_dirs) includes.push_back("-I" + d.path);
  std::vector<const char*> copts;
  for (const auto& o : opts) copts.push_back(o.c_str());
  for (const auto& o : includes) copts.push_back(o.c_str());

  auto t0 = std::chrono::steady_clock::now();
  ProgramGuard g;
  check_nvrtc(nvrtcCreateProgram(&g.prog, unit.source.c_str(), (kernel_name + ".cu").c_str(),
                                 static_cast<int>(header_src.size()), header_src.data(),
                                 header_names.data()),
              "nvrtcCreateProgram");
  nvrtcResult r = nvrtcCompileProgram(g.prog, static_cast<int>(copts.size()), copts.data());
  size_t log_size = 0;
  nvrtcGetProgramLogSize(g.prog, &log_size);
  std::string log(log_size, '\0');
  if (log_size) nvrtcGetProgramLog(g.prog, log.data());
  while (!log.empty() && log.back() == '\0') log.pop_back();
  CompileResult res;
  res.options = join_options(opts);
  if (r != NVRTC_SUCCESS) {
    // NVRTC writes no log for some failures (a bad option): say what it returned.
    std::string why = std::string(nvrtcGetErrorString(r)) + (log.empty() ? " (NVRTC wrote no log)" : "\n" + log);
    throw CompileError(kernel_name, why, res.options, unit.source);
  }

  size_t n = 0;
  check_nvrtc(nvrtcGetCUBINSize(g.prog, &n), "nvrtcGetCUBINSize");
  res.cubin.resize(n);
  check_nvrtc(nvrtcGetCUBIN(g.prog, res.cubin.data()), "nvrtcGetCUBIN");
  check_nvrtc(nvrtcGetPTXSize(g.prog, &n), "nvrtcGetPTXSize");
  res.ptx.resize(n);
  check_nvrtc(nvrtcGetPTX(g.prog, res.ptx.data()), "nvrtcGetPTX");
  while (!res.ptx.empty() && res.ptx.back() == '\0') res.ptx.pop_back();
  res.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  res.log = std::move(log);
  res.resources = parse_ptxas_log(res.log);
  util::log().info("compiled {} for {} in {:.0f} ms ({} registers, {} B stack, {} B spills)",
                   kernel_name, arch.str(), res.compile_ms, res.resources.registers,
                   res.resources.stack_bytes, res.resources.spill_stores);
  return res;
}

}  // namespace attnjit::compile
