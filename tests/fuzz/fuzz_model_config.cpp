// libFuzzer target: model configs (`prewarm --config`), read from a file by
// cli::load_config and expanded by cli::expand_model_config for two archs. Any input
// expands to specs whose names parse back to them, or throws Error(kInvalidArgument)
// (kUnsupported when no backend serves a spec). Run with -max_len=4096 until the
// deep-nesting fix lands (see docs/FUZZING.md).
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

#include "attnjit/error.hpp"
#include "cli/model_config.hpp"
#include "cli/spec_parse.hpp"
#include "fuzz/fuzz_check.hpp"
#include "fuzz/fuzz_temp.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fz = attnjit::fuzz;
  using attnjit::ErrorCode;
  static const std::string file = fz::private_dir() + "/config.json";
  static const std::vector<attnjit::spec::Arch> archs = {attnjit::spec::Arch::parse("sm_90a"),
                                                         attnjit::spec::Arch::parse("sm_100a")};
  fz::write_file(file, data, size);
  attnjit::cli::ModelPlan plan;
  try {
    plan = attnjit::cli::expand_model_config(attnjit::cli::load_config(file), archs);
  } catch (const attnjit::Error& e) {
    fz::require_code(e, {ErrorCode::kInvalidArgument, ErrorCode::kUnsupported});
    return 0;
  }
  fz::check(!plan.specs.empty() || !plan.skipped.empty(), "an accepted config plans nothing");
  std::set<std::string> names;
  for (const auto& s : plan.specs) {
    const std::string name = s.name();
    fz::check(attnjit::cli::spec_from_name(name) == s, "planned spec's name round trip", name);
    fz::check(names.insert(s.to_json().dump()).second, "a spec planned twice", name);
  }
  return 0;
}
