// NVRTC wrapper: rendered source + templates -> cubin and PTX for one exact arch,
// with the compile log, time and per-kernel resource usage.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "render/renderer.hpp"
#include "spec/kernel_spec.hpp"

namespace attnjit::compile {

struct Resources {
  int registers = -1;
  int shared_bytes = -1;  // static shared memory
  int stack_bytes = -1;   // local memory (stack frame)
  int spill_stores = -1;
  int spill_loads = -1;
  nlohmann::json to_json() const;
  static Resources from_json(const nlohmann::json& j);
};

struct CompileResult {
  std::string cubin;
  std::string ptx;
  std::string log;
  std::string options;  // joined, as they were passed
  double compile_ms = 0;
  Resources resources;
};

// "13.0 (build-id 65be0d...)": the NVRTC version and an identity of the loaded
// library's content; part of the cache key.
const std::string& nvrtc_version();
// The file this process loaded NVRTC from (for doctor and tests; never in a key).
std::string nvrtc_library_path();
// The SM numbers (75, 80, ..., 121) the loaded NVRTC compiles for (nvrtcGetSupportedArchs).
const std::vector<int>& nvrtc_supported_sms();

// The options used for this arch (exposed so the cache key can cover them).
std::vector<std::string> nvrtc_options(const spec::Arch& arch);
std::string join_options(const std::vector<std::string>& options);

// Throws CompileError (log, options, source) on failure.
CompileResult compile(const std::string& kernel_name, const render::RenderedUnit& unit,
                      const spec::Arch& arch);

// Parses ptxas -v lines from an NVRTC log.
Resources parse_ptxas_log(const std::string& log);

}  // namespace attnjit::compile
