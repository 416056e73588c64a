// Bounded reading of operator input (see bounded_input.hpp).
#include "util/bounded_input.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>
#include <vector>

#include "attnjit/error.hpp"

namespace attnjit::util {

namespace {

void escape_char(unsigned char c, std::string* out) {
  switch (c) {
    case '\n': *out += "\\n"; break;
    case '\t': *out += "\\t"; break;
    case '\r': *out += "\\r"; break;
    default: *out += fmt::format("\\x{:02x}", c);
  }
}

bool is_control(unsigned char c) { return c < 0x20 || c == 0x7f; }

[[noreturn]] void bad(const std::string& what, const std::string& why) {
  throw Error(ErrorCode::kInvalidArgument, fmt::format("{}: {}", what, why));
}

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Thrown from the parser callback: unwinds out of nlohmann's (iterative) parser
// before any deeper value is built.
struct Stop {
  std::string why;
};

}  // namespace

std::string quote_input(std::string_view s, size_t max_chars) {
  size_t n = std::min(s.size(), max_chars);
  // Do not cut a UTF-8 sequence in two.
  if (n < s.size())
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (is_control(c)) escape_char(c, &out);
    else out += static_cast<char>(c);
  }
  if (n < s.size()) out += fmt::format("... ({} bytes)", s.size());
  return out;
}

std::string escape_controls(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (is_control(c) && c != '\n' && c != '\t') escape_char(c, &out);
    else out += ch;
  }
  return out;
}

std::string bare_message(const std::exception& e) {
  std::string what = e.what();
  if (const auto* err = dynamic_cast<const Error*>(&e)) {
    const std::string prefix = std::string("attnjit: ") + to_string(err->code()) + ": ";
    if (what.rfind(prefix, 0) == 0) what.erase(0, prefix.size());
  }
  return what;
}

std::string read_regular_file(const std::string& path, const std::string& what, size_t max_bytes) {
  const std::string where = fmt::format("{} '{}'", what, quote_input(path));
  // O_NONBLOCK: opening a FIFO must not wait for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    bad(where, err == ENOENT ? "no such file" : fmt::format("cannot be opened: {}", std::strerror(err)));
  }
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (fstat(fd, &st) != 0) bad(where, fmt::format("cannot be read: {}", std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) bad(where, fmt::format("is {}, not a regular file", file_kind(st.st_mode)));
  if (static_cast<uint64_t>(st.st_size) > max_bytes)
    bad(where, fmt::format("is {} bytes, over the limit of {} bytes", st.st_size, max_bytes));
  std::string text;
  char buf[65536];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      bad(where, fmt::format("cannot be read: {}", std::strerror(errno)));
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    // The file may grow while it is read.
    if (text.size() > max_bytes) bad(where, fmt::format("is over the limit of {} bytes", max_bytes));
  }
  return text;
}

nlohmann::json parse_json_bounded(std::string_view text, const std::string& what, bool allow_comments) {
  using nlohmann::json;
  if (text.size() > kMaxJsonBytes)
    bad(what, fmt::format("{} bytes of JSON, over the limit of {} bytes", text.size(), kMaxJsonBytes));
  std::vector<std::set<std::string>> keys;  // the keys of each open object, innermost last
  auto check_string = [](const std::string& s, const char* role) {
    for (char c : s)
      if (is_control(static_cast<unsigned char>(c)) && c != '\n' && c != '\t')
        throw Stop{fmt::format("the {} \"{}\" holds a control character", role, quote_input(s))};
  };
  json::parser_callback_t cb = [&](int depth, json::parse_event_t event, json& parsed) -> bool {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (depth >= kMaxJsonDepth)
          throw Stop{fmt::format("nested deeper than {} levels", kMaxJsonDepth)};
        if (event == json::parse_event_t::object_start) keys.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!keys.empty()) keys.pop_back();
        break;
      case json::parse_event_t::key: {
        const std::string& k = parsed.get_ref<const std::string&>();
        check_string(k, "key");
        if (!keys.empty() && !keys.back().insert(k).second)
          throw Stop{fmt::format("duplicate key \"{}\"", quote_input(k))};
        break;
      }
      case json::parse_event_t::value:
        if (parsed.is_string()) check_string(parsed.get_ref<const std::string&>(), "string");
        break;
      default: break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), cb, /*allow_exceptions=*/true, allow_comments);
  } catch (const Stop& s) {
    bad(what, s.why);
  } catch (const json::parse_error& e) {
    // nlohmann's message quotes the last token read, which may be the whole input.
    std::string why = e.what();
    const size_t colon = why.find(": ", why.find("parse error"));
    if (colon != std::string::npos) why.erase(0, colon + 2);
    bad(what, fmt::format("not valid JSON at byte {}: {}", e.byte, quote_input(why)));
  } catch (const json::exception& e) {
    // out_of_range: a number past double's range (3e990); found by fuzz_spec_json.
    bad(what, fmt::format("not valid JSON: {}", quote_input(e.what())));
  }
}

}  // namespace attnjit::util
