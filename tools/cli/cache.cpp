// `attnjit cache ls|stats|gc|verify|export|import|clear`: operate on the cubin
// store directly (no compiling): the fleet path is prewarm, export, ship, import.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <iostream>

#include "attnjit/error.hpp"
#include "cli/context.hpp"

namespace attnjit::cli {

namespace {

nlohmann::json stats_json(const store::StoreStats& st) {
  return {{"path", st.path},         {"entries", st.entries},     {"total_bytes", st.total_bytes},
          {"hits", st.hits},         {"misses", st.misses},       {"puts", st.puts},
          {"evictions", st.evictions}, {"compile_ms_total", st.compile_ms_total},
          {"in_memory", st.in_memory}, {"reads_file", st.reads_file}, {"note", st.note},
          {"created", !st.not_created}};
}

int cache_ls(Context& ctx, bool json) {
  auto st = ctx.open_store(0, /*create=*/false);  // a mistyped --cache-dir must not be made
  // An unusable folder lists nothing: that must not read as an empty cache.
  const bool usable = report_memory_only(st->stats(), "cache ls");
  auto entries = st->list();
  std::sort(entries.begin(), entries.end(), [](const store::EntryInfo& a, const store::EntryInfo& b) {
    return a.name != b.name ? a.name < b.name : a.arch < b.arch;
  });
  if (json) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& e : entries)
      j.push_back({{"name", e.name},
                   {"key", e.key},
                   {"arch", e.arch},
                   {"cubin_bytes", e.cubin_bytes},
                   {"ptx_bytes", e.ptx_bytes},
                   {"bytes", e.cubin_bytes + e.ptx_bytes},
                   {"hits", e.hits},
                   {"compile_ms", e.compile_ms},
                   {"created_unix", e.created_unix},
                   {"last_used_unix", e.last_used_unix}});
    print_json({{"path", st->path()}, {"in_memory", !usable}, {"created", !st->stats().not_created}, {"entries", j}});
    return usable ? kExitOk : kExitFailure;
  }
  size_t width = 4;
  for (const auto& e : entries) width = std::max(width, e.name.size());
  // The key prefix tells apart entries of one name built from other inputs
  // (tuning knobs, a template override, another NVRTC): inspect prints the whole key.
  std::cout << fmt::format("{:<{}}  {:<12}  {:<7}  {:>10}  {:>6}  {:>10}  {}\n", "NAME", width, "KEY", "ARCH", "SIZE",
                           "HITS", "COMPILE", "LAST USED");
  int64_t total = 0;
  for (const auto& e : entries) {
    total += e.cubin_bytes + e.ptx_bytes;
    std::cout << fmt::format("{:<{}}  {:<12}  {:<7}  {:>10}  {:>6}  {:>7.0f} ms  {}\n", e.name, width,
                             e.key.substr(0, 12), e.arch,
                             human_bytes(e.cubin_bytes + e.ptx_bytes), e.hits, e.compile_ms,
                             format_unix_time(e.last_used_unix));
  }
  std::cout << fmt::format("{} entries, {} in {}{}\n", entries.size(), human_bytes(total), st->path(),
                           usable ? "" : " (in memory only)");
  return usable ? kExitOk : kExitFailure;
}

int cache_stats(Context& ctx, bool json) {
  auto st = ctx.open_store(0, /*create=*/false);
  const auto s = st->stats();
  const bool usable = report_memory_only(s, "cache stats");
  if (json) {
    print_json(stats_json(s));
    return usable ? kExitOk : kExitFailure;
  }
  std::cout << fmt::format("path:        {}{}\n", s.path,
                           s.not_created ? " (not created yet)" : s.in_memory ? " (in memory)" : "")
            << fmt::format("entries:     {}\n", s.entries)
            << fmt::format("size:        {}\n", human_bytes(s.total_bytes))
            << fmt::format("hits:        {}\n", s.hits) << fmt::format("misses:      {}\n", s.misses)
            << fmt::format("puts:        {}\n", s.puts) << fmt::format("evictions:   {}\n", s.evictions)
            << fmt::format("compile:     {:.1f} s in total for the stored entries\n", s.compile_ms_total / 1000);
  if (!s.note.empty()) std::cout << "note:        " << s.note << "\n";
  return usable ? kExitOk : kExitFailure;
}

}  // namespace

void add_cache_command(CLI::App& app, Context& ctx) {
  CLI::App* cache = app.add_subcommand("cache", "Inspect and maintain the cubin store");
  // One verb: `cache ls clear` must not run `clear` (the last callback used to win).
  cache->require_subcommand(0, 1);

  auto json = std::make_shared<bool>(false);
  CLI::App* ls = cache->add_subcommand("ls", "List the stored kernels (name, arch, size, hits, last used)");
  ls->add_flag("--json", *json, "Print JSON");
  ls->callback([&ctx, json] { ctx.action = [&ctx, json] { return cache_ls(ctx, *json); }; });

  CLI::App* stats = cache->add_subcommand("stats", "Store size and hit/miss/compile statistics");
  stats->add_flag("--json", *json, "Print JSON");
  stats->callback([&ctx, json] { ctx.action = [&ctx, json] { return cache_stats(ctx, *json); }; });

  auto max_size = std::make_shared<std::string>();
  CLI::App* gc = cache->add_subcommand("gc", "Evict least-recently-used kernels until the store fits");
  gc->add_option("--max-size", *max_size, "Size to shrink to, e.g. 512M or 2G")->required();
  gc->add_flag("--json", *json, "Print JSON");
  gc->callback([&ctx, max_size, json] {
    ctx.action = [&ctx, max_size, json] {
      const int64_t bytes = parse_size(*max_size, "--max-size");
      auto st = ctx.open_store();
      require_file_backed(st->stats(), "cache gc");  // nothing it evicted would stay evicted
      const int quarantined = quarantine_files(store_db_path());
      const int64_t evicted = st->gc(bytes);
      const int removed = std::max(0, quarantined - quarantine_files(store_db_path()));
      const auto s = st->stats();
      if (*json)
        print_json({{"evicted", evicted}, {"entries", s.entries}, {"total_bytes", s.total_bytes},
                    {"quarantine_files_removed", removed}});
      else {
        std::cout << fmt::format("evicted {} entries; {} entries, {} left (limit {})\n", evicted, s.entries,
                                 human_bytes(s.total_bytes), human_bytes(bytes));
        if (removed > 0)
          std::cout << fmt::format("deleted {} old quarantined file(s) ({}.corrupt-*; the newest sets are kept)\n",
                                   removed, st->path());
      }
      return kExitOk;
    };
  });

  auto repair = std::make_shared<bool>(false);
  CLI::App* verify = cache->add_subcommand("verify", "Check every blob's checksum and the database's integrity");
  verify->add_flag("--repair", *repair, "Remove the entries that fail (they recompile on next use)");
  verify->add_flag("--json", *json, "Print JSON");
  verify->callback([&ctx, repair, json] {
    ctx.action = [&ctx, repair, json] {
      auto st = ctx.open_store(0, /*create=*/false);
      const auto r = st->verify(*repair);
      const std::string db = store_db_path();
      const int quarantined_files = quarantine_files(db);
      const std::string quarantined = quarantine_note(db, quarantined_files);
      // Opening may already have found the store damaged (a quarantined file, a -wal that
      // dropped entries): the rows checked then are what survived, not a clean bill.
      const bool usable = report_memory_only(st->stats(), "cache verify");
      const bool ok = usable && r.problems.empty() && r.integrity_ok && (r.bad == 0 || *repair);
      if (*json) {
        print_json({{"checked", r.checked}, {"bad", r.bad}, {"bad_keys", r.bad_keys},
                    {"integrity_ok", r.integrity_ok}, {"problems", r.problems}, {"in_memory", !usable},
                    {"repaired", *repair}, {"ok", ok}, {"quarantine_files", quarantined_files}});
      } else {
        for (const auto& p : r.problems) std::cout << "damaged: " << p << "\n";
        // Not a failure of this store, but the operator should know a damaged one existed.
        if (!quarantined.empty()) std::cout << "note: " << quarantined << "\n";
        std::cout << fmt::format("checked {} entries: {} bad{}; integrity {}\n", r.checked, r.bad,
                                 r.bad && *repair ? " (removed)" : "", r.integrity_ok ? "ok" : "FAILED");
        for (const auto& k : r.bad_keys) std::cout << "  bad: " << k << "\n";
        if (!ok && r.bad && !*repair) std::cout << "run `attnjit cache verify --repair` to remove them\n";
      }
      return ok ? kExitOk : kExitFailure;
    };
  });

  auto file = std::make_shared<std::string>();
  auto force = std::make_shared<bool>(false);
  CLI::App* exp = cache->add_subcommand("export", "Write every verified entry to a bundle file (a store database)");
  exp->add_option("file", *file, "Bundle file to write")->required();
  exp->add_flag("--force", *force, "Overwrite FILE if it exists");
  exp->callback([&ctx, file, force] {
    ctx.action = [&ctx, file, force] {
      // A typo must not replace a bundle (or any other file) without asking.
      std::error_code ec;
      if (!*force && std::filesystem::symlink_status(*file, ec).type() != std::filesystem::file_type::not_found)
        throw Error(ErrorCode::kInvalidArgument,
                    fmt::format("cache export: {} already exists; pass --force to overwrite it", *file));
      auto st = ctx.open_store(0, /*create=*/false);
      // A read-only cache still serves its file's entries, which export can copy;
      // a store with no file behind it has nothing to give.
      if (st->stats().entries == 0) require_file_backed(st->stats(), "cache export");
      const int64_t n = st->export_to(*file);
      std::cout << fmt::format("exported {} entries to {}\n", n, *file);
      return kExitOk;
    };
  });

  CLI::App* imp = cache->add_subcommand("import", "Add the verified entries of a bundle file to the store");
  imp->add_option("file", *file, "Bundle file written by `attnjit cache export`")->required()->check(CLI::ExistingFile);
  imp->callback([&ctx, file] {
    ctx.action = [&ctx, file] {
      auto st = ctx.open_store();
      require_file_backed(st->stats(), "cache import");  // an import that does not persist is a failure
      const store::ImportReport r = st->import_bundle(*file);
      std::cout << fmt::format("imported {} entries from {}; the store holds {}\n", r.added, *file,
                               st->stats().entries);
      if (r.bad == 0) return kExitOk;
      // A bundle with rows that fail their checksum is damaged (or tampered with): say so and fail.
      std::cerr << fmt::format("attnjit: store: cache import: {} rows of {} failed their checksum and were skipped; "
                               "the bundle is damaged: export it again\n",
                               r.bad, *file);
      return kExitFailure;
    };
  });

  CLI::App* clear = cache->add_subcommand("clear", "Remove every entry from the store");
  clear->callback([&ctx] {
    ctx.action = [&ctx] {
      auto st = ctx.open_store();
      require_file_backed(st->stats(), "cache clear");  // a clear in memory leaves the file as it was
      const int64_t n = st->stats().entries;
      st->clear();
      std::cout << fmt::format("removed {} entries from {}\n", n, st->path());
      return kExitOk;
    };
  });
}

}  // namespace attnjit::cli
