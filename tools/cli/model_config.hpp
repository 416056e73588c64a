// Model configs (tools/configs/*.json): what a model serves, expanded into the
// list of KernelSpecs `attnjit prewarm` compiles. The schema is in README.md.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "spec/kernel_spec.hpp"

namespace attnjit::cli {

struct SkippedOp {
  std::string op;
  std::string reason;  // "family not implemented yet"
};

struct ModelPlan {
  std::string model;                    // the config's "name"
  std::string source;                   // the file it came from
  std::vector<spec::KernelSpec> specs;  // unique, in config order, archs innermost
  std::vector<SkippedOp> skipped;
};

// Op names that are part of the design but have no kernels yet: skipped with a note.
const std::vector<std::string>& planned_ops();

// Finds a config: an existing path, else "<dir>/<name>.json" in the bundled
// config folders (installed share/attnjit/configs, then the source tree).
// Throws Error(kInvalidArgument) listing the bundled names when none is found.
std::string resolve_config_path(const std::string& path_or_name);
// Names of the bundled configs ("llama-3-8b", ...), sorted.
std::vector<std::string> bundled_config_names();

nlohmann::json load_config(const std::string& path);  // throws Error(kInvalidArgument)

// Validates the config and expands it for every arch. Throws
// Error(kInvalidArgument) naming the field ("ops[1].page_sizes") that is wrong.
ModelPlan expand_model_config(const nlohmann::json& config, const std::vector<spec::Arch>& archs);

// resolve_config_path + load_config + expand_model_config, with source set. A file's
// schema errors name the file too ("config '/etc/x/llama.json': model config: ops[0]...")
// so an override in $ATTNJIT_CONFIG_DIR is found; a missing $ATTNJIT_CONFIG_DIR is an error.
ModelPlan load_model_plan(const std::string& path_or_name, const std::vector<spec::Arch>& archs);

}  // namespace attnjit::cli
