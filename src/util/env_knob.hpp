// Strict parsing of integer tuning variables (ATTNJIT_DECODE_*): a bad value is an Error naming the variable.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace attnjit::util {

// `value` as a decimal integer in [lo, hi]. Anything else ("abc", "-1", "12x",
// out of range) throws Error(kInvalidArgument) naming `name`, the value and
// `expected` (default: "an integer from lo to hi").
int parse_knob(const char* name, const std::string& value, int lo, int hi, std::string_view expected = "");

// The environment variable `name` through parse_knob; nullopt when unset or empty.
// Allocates nothing unless the variable is set (decode_tiling runs on every launch).
std::optional<int> env_knob(const char* name, int lo, int hi, std::string_view expected = "");

}  // namespace attnjit::util
