// Compiling a list of KernelSpecs into the store with worker threads and a
// progress display: the engine of `attnjit prewarm` and `attnjit demo`.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "attnjit/runtime.hpp"
#include "cli/model_config.hpp"
#include "spec/kernel_spec.hpp"

namespace attnjit::cli {

struct PrewarmItem {
  std::string name;
  std::string key;
  std::string origin;  // "compiled", "present" or "failed"
  double compile_ms = 0;
  std::string error;   // when failed
};

struct PrewarmResult {
  int compiled = 0, present = 0, failed = 0;
  double seconds = 0;
  std::vector<PrewarmItem> items;  // in spec order
};

enum class Progress { kNone, kLines, kBar };
// kBar on a terminal (stderr), plain lines otherwise; kNone when quiet.
Progress progress_mode(bool quiet);

// Compiles or fetches every spec through rt.registry().artifact() on `jobs`
// threads (0: hardware concurrency). Never throws for a failing spec: it is
// counted and its message kept.
PrewarmResult prewarm_specs(Runtime& rt, const std::vector<spec::KernelSpec>& specs, int jobs,
                            Progress progress);

// The human summary (stdout) and the JSON form.
void print_prewarm_summary(const ModelPlan& plan, const PrewarmResult& r);
nlohmann::json prewarm_json(const ModelPlan& plan, const PrewarmResult& r, const std::vector<spec::Arch>& archs);

}  // namespace attnjit::cli
