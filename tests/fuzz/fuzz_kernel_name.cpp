// libFuzzer target: the CLI's kernel-name parser (cli::spec_from_name). Any input
// either parses to a spec whose name() parses back to the same spec, or throws
// attnjit::Error(kInvalidArgument); anything else is a defect.
#include <cstddef>
#include <cstdint>
#include <string>

#include "attnjit/error.hpp"
#include "cli/spec_parse.hpp"
#include "fuzz/fuzz_check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  attnjit::spec::KernelSpec spec;
  try {
    spec = attnjit::cli::spec_from_name(text);
  } catch (const attnjit::Error& e) {
    attnjit::fuzz::require_code(e, {attnjit::ErrorCode::kInvalidArgument});
    return 0;
  }
  // A parsed name means exactly one spec: its canonical name reads back to it.
  const std::string name = spec.name();
  attnjit::fuzz::check(attnjit::cli::spec_from_name(name) == spec, "name round trip", name);
  attnjit::fuzz::check(attnjit::spec::KernelSpec::from_json(spec.to_json()) == spec, "json round trip",
                       name);
  return 0;
}
