// Strict parsing of integer tuning variables (see env_knob.hpp).
#include "util/env_knob.hpp"

#include <fmt/format.h>

#include <cstdlib>

#include "attnjit/error.hpp"
#include "util/bounded_input.hpp"

namespace attnjit::util {

int parse_knob(const char* name, const std::string& value, int lo, int hi, std::string_view expected) {
  // Digits only (no sign, spaces, hex or exponent), and few enough that the
  // value cannot overflow before the range check.
  const bool digits = !value.empty() && value.size() <= 9 && value.find_first_not_of("0123456789") == std::string::npos;
  const long v = digits ? std::strtol(value.c_str(), nullptr, 10) : -1;
  if (!digits || v < lo || v > hi)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{}='{}': expected {}; unset it for the default", name, quote_input(value, 40),
                            expected.empty() ? fmt::format("an integer from {} to {}", lo, hi) : expected));
  return static_cast<int>(v);
}

std::optional<int> env_knob(const char* name, int lo, int hi, std::string_view expected) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return parse_knob(name, v, lo, hi, expected);
}

}  // namespace attnjit::util
