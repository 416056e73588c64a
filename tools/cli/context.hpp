// Shared state and small helpers of the attnjit CLI subcommands: global options,
// the runtime and store they act on, sizes, times, archs and external tools.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "attnjit/runtime.hpp"
#include "spec/kernel_spec.hpp"
#include "store/cubin_store.hpp"

namespace attnjit::cli {

// Exit codes: 0 ok, 1 an attnjit error or a failed operation, 2 a usage error.
constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

// A usage problem found after parsing (bad size, conflicting flags): exit code 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Context {
  std::string cache_dir;  // --cache-dir (applied to ATTNJIT_CACHE_DIR before any use)
  int verbose = 0;        // -v: info, -vv: debug, -vvv: trace
  // The chosen subcommand's action, set by its CLI11 callback and run by main()
  // outside the parser, so that its exceptions and exit code are ours.
  std::function<int()> action;

  // The process runtime (Runtime::global(), which honours ATTNJIT_CACHE_DIR).
  Runtime& runtime();
  // The store opened directly (cache subcommands): never compiles anything.
  // Both follow ATTNJIT_CACHE_DIR, so they need apply_global_options() first.
  // create=false: make no folder or file (a diagnosis must change nothing).
  std::unique_ptr<store::CubinStore> open_store(int64_t max_bytes = 0, bool create = true) const;
  std::string resolved_cache_dir() const;
};

// Applies --cache-dir and -v; called once after parsing, before any action.
void apply_global_options(const Context& ctx);

// Throws Error(kStore) when the store fell back to memory (unusable or read-only
// folder): `command` would fill or read a store that vanishes with the process.
void require_file_backed(const store::StoreStats& stats, const std::string& command);
// For commands that read the store (ls, stats, verify): when it is in memory with no
// file behind it, says so on stderr and returns false (the caller exits 1). A store
// opened with create=false that does not exist yet is empty, not broken: a note on
// stderr (a mistyped --cache-dir shows there) and true.
bool report_memory_only(const store::StoreStats& stats, const std::string& command);

// For a cache folder that does not exist yet: "" when the first use can make it,
// else why not (the nearest existing folder above it is not writable, or is a file).
std::string creatable_problem(const std::string& dir);

// The database file the CLI's store uses (resolve_cache_dir()/cubins.sqlite3), also when
// the store opened in memory and its path() says ":memory:"; "" when there is no folder.
std::string store_db_path();
// The quarantined files beside the database ("<db>.corrupt-*"), left by a process that
// found the store damaged and set it aside.
int quarantine_files(const std::string& db_path);
// For n = quarantine_files(db_path): "" when 0, else a sentence saying how many and that gc
// deletes old ones.
std::string quarantine_note(const std::string& db_path, int n);

// "512M", "2G", "1.5GiB", "4096" -> bytes, below 2^63. Throws UsageError naming
// `option`, also for a number that is not a whole count of bytes ("1.5", "1.1K").
int64_t parse_size(const std::string& text, const std::string& option);
std::string human_bytes(int64_t bytes);        // "1.2 MiB"
std::string format_unix_time(int64_t unix_s);  // "2025-01-31 12:00:00", "-" for 0

// The GPU's arch when one is present, else sm_90a. `why` (optional) says which.
spec::Arch default_arch(std::string* why = nullptr);
// --arch values (each may be comma-separated); no values -> {default_arch()}.
// An empty name ("--arch ''", "--arch ,") throws UsageError.
std::vector<spec::Arch> parse_archs(const std::vector<std::string>& values);

bool is_tty(int fd);

// `name` on PATH, in $CUDA_HOME/bin, /usr/local/cuda/bin or the toolkit found at
// build time. "" when absent.
std::string find_program(const std::string& name);
// Runs a command, capturing stdout+stderr. Returns the exit status (-1: could not start).
int run_capture(const std::string& command, std::string* output);
// Single-quotes a string for /bin/sh.
std::string shell_quote(const std::string& s);

// A private temp file (mkstemp under $TMPDIR) holding `contents`; removed on destruction.
class TempFile {
 public:
  TempFile(const std::string& suffix, const std::string& contents);
  ~TempFile();
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Prints JSON (indented) to stdout.
void print_json(const nlohmann::json& j);

// Subcommand registration, one per file under tools/cli/.
void add_doctor_command(CLI::App& app, Context& ctx);
void add_prewarm_command(CLI::App& app, Context& ctx);
void add_inspect_command(CLI::App& app, Context& ctx);
void add_cache_command(CLI::App& app, Context& ctx);
void add_demo_command(CLI::App& app, Context& ctx);

}  // namespace attnjit::cli
