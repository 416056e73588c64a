// Helpers shared by the attnjit CLI subcommands (see context.hpp).
#include "cli/context.hpp"

#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <iostream>

#include "attnjit/error.hpp"
#include "compile/nvrtc_compiler.hpp"
#include "driver/cuda_driver.hpp"
#include "store/store_location.hpp"
#include "util/bounded_input.hpp"
#include "util/log.hpp"

#ifndef ATTNJIT_CUDA_BIN_DIR
#define ATTNJIT_CUDA_BIN_DIR ""
#endif

namespace attnjit::cli {

Runtime& Context::runtime() { return Runtime::global(); }

std::unique_ptr<store::CubinStore> Context::open_store(int64_t max_bytes, bool create) const {
  store::StoreOptions options;
  options.create = create;
  // dir stays empty: resolve_cache_dir(), which sees --cache-dir through ATTNJIT_CACHE_DIR.
  if (max_bytes > 0) options.max_bytes = max_bytes;
  return store::CubinStore::open(options);
}

std::string Context::resolved_cache_dir() const {
  return store::resolve_cache_dir();
}

void require_file_backed(const store::StoreStats& stats, const std::string& command) {
  if (!stats.in_memory) return;
  throw Error(ErrorCode::kStore,
              fmt::format("{}: the cache in {} is not usable, so nothing would persist ({}); fix the folder "
                          "or pass --cache-dir (see `attnjit doctor`)",
                          command, store::resolve_cache_dir(), stats.note));
}

// For a cache folder that does not exist yet: "" when the first use can make it,
// else why not (the nearest existing folder above it is not writable, or is a file).
std::string creatable_problem(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path p = fs::absolute(dir, ec);
  if (ec) return "";
  while (p.has_parent_path() && p != p.parent_path() && !fs::exists(fs::symlink_status(p, ec))) p = p.parent_path();
  if (!fs::is_directory(p, ec)) return fmt::format("cannot create {}: {} is not a directory", dir, p.string());
  if (access(p.c_str(), W_OK | X_OK) != 0)
    return fmt::format("cannot create {}: {} is not writable", dir, p.string());
  return "";
}

bool report_memory_only(const store::StoreStats& stats, const std::string& command) {
  const std::string dir = store::resolve_cache_dir();
  // A store not made yet (create=false) is empty, unless its folder could never be made.
  const std::string why = stats.not_created ? creatable_problem(dir) : stats.note;
  if (stats.not_created && why.empty()) {
    std::cerr << fmt::format("attnjit: {}: there is no store in {} yet (nothing has been cached there)\n", command,
                             dir);
    return true;
  }
  if (!stats.in_memory || stats.reads_file) return true;
  std::cerr << fmt::format("attnjit: store: {}: the store is in memory only: the cache in {} is not usable ({}); "
                           "fix the folder or pass --cache-dir (see `attnjit doctor`)\n",
                           command, dir, why);
  return false;
}

std::string store_db_path() {
  const std::string dir = store::resolve_cache_dir();
  return dir.empty() ? "" : dir + "/" + store::kDbFileName;
}

int quarantine_files(const std::string& db_path) {
  namespace fs = std::filesystem;
  if (db_path.empty()) return 0;
  const std::string prefix = fs::path(db_path).filename().string() + ".corrupt-";
  int n = 0;
  std::error_code ec;
  for (fs::directory_iterator it(fs::path(db_path).parent_path(), ec), end; !ec && it != end; it.increment(ec))
    n += it->path().filename().string().rfind(prefix, 0) == 0;
  return n;
}

std::string quarantine_note(const std::string& db_path, int n) {
  if (n == 0) return "";
  return fmt::format("{} quarantined file(s) beside the store ({}.corrupt-*): a damaged store was set aside and "
                     "a fresh one started; `attnjit cache gc` deletes all but the newest",
                     n, db_path);
}

void apply_global_options(const Context& ctx) {
  if (!ctx.cache_dir.empty()) {
    std::error_code ec;
    const auto abs = std::filesystem::absolute(ctx.cache_dir, ec);
    setenv("ATTNJIT_CACHE_DIR", (ec ? ctx.cache_dir : abs.lexically_normal().string()).c_str(), 1);
  }
  if (ctx.verbose > 0) {
    const auto level = ctx.verbose == 1   ? spdlog::level::info
                       : ctx.verbose == 2 ? spdlog::level::debug
                                          : spdlog::level::trace;
    util::log().set_level(level);
  }
}

int64_t parse_size(const std::string& text, const std::string& option) {
  // Plain decimals only: std::stod would also take hex ("0x10"), "inf" and
  // exponents; here their letters end up as an unknown unit. Exact integer
  // arithmetic: a limit is a whole number of bytes, never a rounded double.
  const std::string shown = util::quote_input(text, 40);
  size_t pos = 0;
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) ++pos;
  const std::string int_digits = text.substr(0, pos);
  std::string frac_digits;
  if (pos < text.size() && text[pos] == '.') {
    const size_t start = ++pos;
    while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) ++pos;
    frac_digits = text.substr(start, pos - start);
  }
  if (int_digits.empty())
    throw UsageError(fmt::format("{} '{}': expected a decimal number with an optional K/M/G/T suffix, e.g. 512M or 2G",
                                 option, shown));
  std::string unit = text.substr(pos);
  while (!unit.empty() && unit.front() == ' ') unit.erase(0, 1);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit.size() > 1 && unit.back() == 'B') unit.pop_back();  // "MB" -> "M"
  if (unit.size() > 1 && unit.back() == 'I') unit.pop_back();  // "MiB" -> "M"
  int shift = 0;
  if (unit.empty() || unit == "B") shift = 0;
  else if (unit == "K") shift = 10;
  else if (unit == "M") shift = 20;
  else if (unit == "G") shift = 30;
  else if (unit == "T") shift = 40;
  else
    throw UsageError(fmt::format("{} '{}': unknown unit '{}' (use K, M, G or T)", option, shown,
                                 util::quote_input(text.substr(pos), 40)));
  while (!frac_digits.empty() && frac_digits.back() == '0') frac_digits.pop_back();  // "2.0" is whole
  // A fraction of a byte count means nothing: ask for the unit meant.
  if (!frac_digits.empty() && shift == 0)
    throw UsageError(fmt::format("{} '{}': a byte count is a whole number; give a unit for a fraction, e.g. 1.5G",
                                 option, shown));
  const std::string too_large = fmt::format("{} '{}': too large (it must be below 8 EiB)", option, shown);
  if (int_digits.size() > 19 || frac_digits.size() > 18) throw UsageError(too_large);
  using u128 = unsigned __int128;
  const u128 whole = static_cast<u128>(std::stoull(int_digits)) << shift;
  u128 frac_bytes = 0;
  if (!frac_digits.empty()) {
    u128 pow10 = 1;
    for (size_t i = 0; i < frac_digits.size(); ++i) pow10 *= 10;
    const u128 scaled = static_cast<u128>(std::stoull(frac_digits)) << shift;
    if (scaled % pow10 != 0)
      throw UsageError(fmt::format("{} '{}': not a whole number of bytes; use a smaller unit", option, shown));
    frac_bytes = scaled / pow10;
  }
  // 2^63 and above do not fit int64_t: the cast would wrap to a negative limit.
  const u128 bytes = whole + frac_bytes;
  if (bytes >= (static_cast<u128>(1) << 63)) throw UsageError(too_large);
  return static_cast<int64_t>(bytes);
}

std::string human_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", v, units[u]);
}

std::string format_unix_time(int64_t unix_s) {
  if (unix_s <= 0) return "-";
  std::time_t t = static_cast<std::time_t>(unix_s);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

spec::Arch default_arch(std::string* why) {
  std::string reason;
  if (driver::is_available(&reason) && driver::device_count() > 0) {
    const auto info = driver::device_info(0);
    spec::Arch a = spec::arch_for_device(info.sm_major, info.sm_minor);
    if (why) *why = fmt::format("GPU 0 ({})", info.name);
    return a;
  }
  if (why) *why = "the default without a GPU";
  return spec::Arch::parse("sm_90a");
}

std::vector<spec::Arch> parse_archs(const std::vector<std::string>& values) {
  std::vector<spec::Arch> archs;
  for (const auto& v : values) {
    size_t start = 0;
    while (start <= v.size()) {
      size_t comma = v.find(',', start);
      std::string item = v.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      // An empty item is a typo ("--arch ''", "sm_90a,,sm_80"), not a request for the default.
      if (item.empty())
        throw UsageError(fmt::format("--arch '{}': empty arch name (expected e.g. sm_90a or sm_90a,sm_100a)", v));
      spec::Arch a = spec::Arch::parse(item);  // throws Error(kInvalidArgument)
      // An arch this NVRTC cannot compile for (sm_91) would fail every kernel at compile time.
      const std::vector<int>& sms = compile::nvrtc_supported_sms();
      if (!sms.empty() && std::find(sms.begin(), sms.end(), a.sm) == sms.end()) {
        std::string known;
        for (int sm : sms) known += (known.empty() ? "sm_" : ", sm_") + std::to_string(sm);
        throw Error(ErrorCode::kInvalidArgument,
                    fmt::format("--arch '{}': NVRTC {} does not compile for it (it does: {}; the kernels need sm_80 "
                                "or newer)", item, compile::nvrtc_version().substr(0, compile::nvrtc_version().find(' ')),
                                known));
      }
      bool dup = false;
      for (const auto& b : archs) dup = dup || b == a;
      if (!dup) archs.push_back(a);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  if (archs.empty()) archs.push_back(default_arch());
  return archs;
}

bool is_tty(int fd) { return isatty(fd) == 1; }

std::string find_program(const std::string& name) {
  namespace fs = std::filesystem;
  std::vector<std::string> dirs;
  if (const char* path = std::getenv("PATH")) {
    std::string p = path;
    size_t start = 0;
    while (true) {
      size_t colon = p.find(':', start);
      dirs.push_back(p.substr(start, colon == std::string::npos ? std::string::npos : colon - start));
      if (colon == std::string::npos) break;
      start = colon + 1;
    }
  }
  if (const char* home = std::getenv("CUDA_HOME"); home && *home) dirs.push_back(std::string(home) + "/bin");
  dirs.push_back("/usr/local/cuda/bin");
  if (*ATTNJIT_CUDA_BIN_DIR) dirs.push_back(ATTNJIT_CUDA_BIN_DIR);
  for (const auto& d : dirs) {
    if (d.empty()) continue;
    const std::string candidate = d + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0 && fs::is_regular_file(candidate)) return candidate;
  }
  return "";
}

int run_capture(const std::string& command, std::string* output) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) output->append(buf, n);
  const int status = pclose(pipe);
  if (status == -1) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

TempFile::TempFile(const std::string& suffix, const std::string& contents) {
  const char* tmpdir = std::getenv("TMPDIR");
  std::string pattern = std::string(tmpdir && *tmpdir ? tmpdir : "/tmp") + "/attnjit-XXXXXX" + suffix;
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  const int fd = mkstemps(buf.data(), static_cast<int>(suffix.size()));
  if (fd < 0)
    throw std::runtime_error(fmt::format("cannot create a temp file {}: {}", pattern, std::strerror(errno)));
  path_ = buf.data();
  size_t off = 0;
  while (off < contents.size()) {
    ssize_t w = write(fd, contents.data() + off, contents.size() - off);
    if (w <= 0) {
      close(fd);
      throw std::runtime_error(fmt::format("cannot write {}: {}", path_, std::strerror(errno)));
    }
    off += static_cast<size_t>(w);
  }
  close(fd);
}

TempFile::~TempFile() {
  if (!path_.empty()) unlink(path_.c_str());
}

void print_json(const nlohmann::json& j) { std::cout << j.dump(2) << std::endl; }

}  // namespace attnjit::cli
