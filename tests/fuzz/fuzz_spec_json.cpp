// libFuzzer target: spec JSON, as KernelSpec::from_json reads it and as the CLI reads
// it inline and from a .json file (cli::spec_from_text). Any input parses to a spec
// that survives the JSON and name round trips, or throws Error(kInvalidArgument).
// Run with -max_len=4096 until the deep-nesting fix lands (see docs/FUZZING.md).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "attnjit/error.hpp"
#include "cli/spec_parse.hpp"
#include "fuzz/fuzz_check.hpp"
#include "fuzz/fuzz_temp.hpp"

namespace {

using attnjit::ErrorCode;
using attnjit::spec::KernelSpec;
namespace fz = attnjit::fuzz;

void check_round_trips(const KernelSpec& spec) {
  const std::string name = spec.name();
  fz::check(KernelSpec::from_json(spec.to_json()) == spec, "to_json/from_json round trip", name);
  fz::check(attnjit::cli::spec_from_json_text(spec.to_json().dump()) == spec, "CLI JSON round trip", name);
  try {
    fz::check(attnjit::cli::spec_from_name(name) == spec, "name round trip", name);
  } catch (const attnjit::Error& e) {
    fz::fail("an accepted spec's name does not parse", e.what());
  }
}

// Some parse of `text`; a refusal must be Error(kInvalidArgument).
template <class F>
std::optional<KernelSpec> parse(F&& f) {
  try {
    return f();
  } catch (const attnjit::Error& e) {
    fz::require_code(e, {ErrorCode::kInvalidArgument});
  }
  return std::nullopt;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);

  // The library's reader, over whatever JSON the text is.
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_discarded())
    if (auto s = parse([&] { return KernelSpec::from_json(j); })) check_round_trips(*s);

  // The CLI's readers: inline text, and the same text as a spec file.
  const auto inline_spec = parse([&] { return attnjit::cli::spec_from_json_text(text); });
  if (inline_spec) check_round_trips(*inline_spec);
  static const std::string file = fz::private_dir() + "/spec.json";
  fz::write_file(file, data, size);
  const auto file_spec = parse([&] { return attnjit::cli::spec_from_text(file); });
  fz::check(file_spec.has_value() == inline_spec.has_value() && (!file_spec || *file_spec == *inline_spec),
            "a spec file reads as its text does");
  return 0;
}
