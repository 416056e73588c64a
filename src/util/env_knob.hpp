// Strict parsing of integer tuning variables (ATTNJIT_DECODE_*): a bad value is an Error naming the variable.
#pragma once

#include <optional>
#include <string>

namespace attnjit::util {

// `value` as a decimal integer in [lo, hi]. Anything else ("abc", "-1", "12x",
// out of range) throws Error(kInvalidArgument) naming `name`, the value and
// `expected` (default: "an integer from lo to hi").
int parse_knob(const char* name, const std::string& value, int lo, int hi, const std::string& expected = "");

// The environment variable `name` through parse_knob; nullopt when unset or empty.
std::optional<int> env_knob(const char* name, int lo, int hi, const std::string& expected = "");

}  // namespace attnjit::util
