// Bounded reading of operator input (spec files, model configs, names): size, depth and file-type limits, and quoting of input in messages.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <string_view>

namespace attnjit::util {

constexpr size_t kMaxJsonBytes = 1 << 20;  // a spec or model config is a few KB
constexpr int kMaxJsonDepth = 32;          // a model config nests 3 levels
constexpr size_t kMaxQuotedChars = 200;    // input quoted in an error message

// `s` for an error message: control characters escaped (\n, \x1b, \x00), at most
// `max_chars` bytes of it, then "... (N bytes)".
std::string quote_input(std::string_view s, size_t max_chars = kMaxQuotedChars);

// Control characters other than newline and tab escaped: what a message may print.
std::string escape_controls(std::string_view s);

// The message of an attnjit::Error's what() without its "attnjit: <kind>: " prefix,
// so that wrapping it in another Error does not repeat the prefix.
std::string bare_message(const std::exception& e);

// Reads the regular file `path` (symlinks followed) of at most `max_bytes`.
// Throws Error(kInvalidArgument) "<what> '<path>': <the true reason>" for a
// missing file, a directory, FIFO, device or socket (never opened blocking) or
// a file over the limit.
std::string read_regular_file(const std::string& path, const std::string& what, size_t max_bytes = kMaxJsonBytes);

// Parses JSON text of at most kMaxJsonBytes and kMaxJsonDepth nested
// containers (no deeper value is ever built, so nothing recurses deeply).
// Duplicate keys and strings holding control characters (other than newline
// and tab) are errors. Throws Error(kInvalidArgument) "<what>: ...", quoting
// at most kMaxQuotedChars of the input.
nlohmann::json parse_json_bounded(std::string_view text, const std::string& what, bool allow_comments = false);

}  // namespace attnjit::util
