// Whole-store operations of SqliteStore: verify, export to a bundle file, import from one.
#include <fmt/format.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <optional>

#include "store/checksum.hpp"
#include "store/sqlite_store.hpp"
#include "util/log.hpp"

namespace attnjit::store {

namespace {

constexpr int kImportBatchRows = 64;  // rows per write transaction: others get the lock in between

Error store_error(const std::string& what, const std::string& detail) {
  return Error(ErrorCode::kStore, what + ": " + detail);
}

}  // namespace

CopyResult copy_verified_rows(Db& src, const std::string& schema, Db& dst, bool own_txns,
                              bool best_effort) {
  CopyResult result;
  // ifnull: a row's bookkeeping columns are not covered by the checksum, so a
  // NULL there must not fail the NOT NULL constraints of the copy.
  std::optional<Stmt> read;
  try {
    // A salvage leaves usage behind: a damaged usage table must not cost the entries.
    const std::string last_used = best_effort ? "NULL" : usage_of(schema, "last_used_us");
    const std::string hits = best_effort ? "NULL" : usage_of(schema, "hits");
    read.emplace(src.prepare("SELECT " + entry_columns(Blobs::kCubinAndPtx) +
                             ", ifnull(compile_ms, 0), ifnull(created_us, 0), ifnull(" + last_used +
                             ", ifnull(created_us, 0)), ifnull(" + hits + ", 0) FROM " + schema + ".entries"));
  } catch (const SqliteError& e) {
    throw SourceError(e.what());
  }
  Stmt insert = dst.prepare(kInsertRowSql);
  Stmt usage = dst.prepare(kInsertUsageSql);
  std::unique_ptr<Txn> txn;
  int in_batch = 0;
  while (true) {
    bool has_row = false;
    try {
      has_row = read->step();
    } catch (const SqliteError& e) {
      if (!best_effort) throw SourceError(e.what());
      result.stopped_early = true;
      break;
    }
    if (!has_row) break;
    const int n = entry_column_count(Blobs::kCubinAndPtx);
    Row row = read_row(*read, Blobs::kCubinAndPtx);
    row.entry.compile_ms = read->col_double(n);
    row.created_us = read->col_int(n + 1);
    row.last_used_us = read->col_int(n + 2);
    row.hits = read->col_int(n + 3);
    // A bundle of an older schema fails here too: its rows were summed otherwise.
    if (!row_intact(row, Blobs::kCubinAndPtx)) {
      ++result.bad;
      continue;
    }
    if (own_txns && !txn) txn = std::make_unique<Txn>(dst);
    result.added += insert_row(dst, insert, usage, row) ? 1 : 0;
    if (own_txns && ++in_batch == kImportBatchRows) {
      txn->commit();
      txn.reset();
      in_batch = 0;
    }
  }
  if (txn) txn->commit();
  return result;
}

VerifyReport SqliteStore::verify(bool repair) {
  std::lock_guard<std::mutex> lock(mu_);
  ensure_open_locked();
  VerifyReport report;
  report.problems = problems_;
  std::vector<BadRow> bad_main;
  std::string problem;
  try {
    flush_pending_locked();
    for (const std::string& schema : schemas()) {
      const int n = entry_column_count(Blobs::kCubinAndPtx);
      Stmt s = db_->prepare("SELECT " + entry_columns(Blobs::kCubinAndPtx) +
                            ", bytes, length(cubin) + length(ptx), rowid, quote(checksum) FROM " + schema + ".entries");
      while (s.step()) {
        ++report.checked;
        const Row row = read_row(s, Blobs::kCubinAndPtx);
        // `bytes` is outside the checksum: a wrong value is tampering too.
        if (row_intact(row, Blobs::kCubinAndPtx) && s.col_int(n) == s.col_int(n + 1)) continue;
        ++report.bad;
        report.bad_keys.push_back(row.entry.key);
        if (schema == "main") bad_main.push_back({s.col_int(n + 2), s.col_text(n + 3)});
      }
    }
    for (const std::string& schema : schemas()) {
      Stmt s = db_->prepare("PRAGMA " + schema + ".integrity_check");
      while (s.step()) {
        std::string line = s.col_text(0);
        if (line == "ok") continue;
        report.integrity_ok = false;
        if (problem.empty()) problem = schema + ": " + line;
      }
    }
  } catch (const SqliteError& e) {
    if (!e.corrupt()) throw store_error("verify " + path_, e.what());
    report.integrity_ok = false;
    problem = e.what();
  }
  if (!report.integrity_ok) {
    util::log().warn("cubin store {}: integrity check failed: {}", path_, problem);
  }
  if (!repair) return report;
  try {
    if (!report.integrity_ok && !in_memory_) {
      // Rows can't be trusted to delete one by one: move the file aside and
      // copy back every row that still reads and passes its checksum.
      salvage_locked("verify: " + problem);
      return report;
    }
    if (!report.integrity_ok && has_ro_) recover_locked("verify", SqliteError(SQLITE_CORRUPT, problem));
    if (bad_main.empty()) return report;
    delete_bad_rows_locked(bad_main);
    vacuum_locked();
  } catch (const SqliteError& e) {
    throw store_error("verify repair " + path_, e.what());
  }
  return report;
}

void SqliteStore::refuse_live_export_target(const std::string& file) const {
  // The export ends in rename(tmp, file): onto a live database (ours, or any
  // with a WAL) that would swap the file under its open connections.
  FileId target, live;
  const bool exists = file_id(file, &target);
  const bool ours = exists && ((file_id(path_, &live) && live == target) ||
                               (db_ && !in_memory_ && target == file_id_));
  if (ours) {
    throw Error(ErrorCode::kInvalidArgument,
                "export to " + file + ": that is the live store " + path_ +
                    "; export to another file");
  }
  for (const char* side : {"-wal", "-shm"}) {
    if (file_exists(file + side)) {
      throw Error(ErrorCode::kInvalidArgument,
                  "export to " + file + ": " + file + side +
                      " exists beside it, so it is (or was) a live database; export to another "
                      "file");
    }
  }
}

int64_t SqliteStore::export_to(const std::string& file) {
  std::lock_guard<std::mutex> lock(mu_);
  ensure_open_locked();
  refuse_live_export_target(file);
  std::string error;
  const std::string tmp = create_temp_file(file, &error);  // 0600 from the start
  if (tmp.empty()) throw store_error("export to " + file, error);
  CopyResult total;
  try {
    {
      auto out = Db::open(tmp, SQLITE_OPEN_READWRITE);
      // A standalone file: no WAL beside it; synced before it gets its name.
      out->exec("PRAGMA journal_mode=DELETE; PRAGMA synchronous=FULL");
      apply_migrations(*out);
      flush_pending_locked();
      Txn txn(*out);
      for (const std::string& schema : schemas()) {
        CopyResult r = copy_verified_rows(*db_, schema, *out, /*own_txns=*/false,
                                          /*best_effort=*/false);
        total.added += r.added;
        total.bad += r.bad;
      }
      txn.commit();
    }
    make_private(tmp);
    if (std::rename(tmp.c_str(), file.c_str()) != 0) {
      throw store_error("export to " + file, "cannot rename " + tmp + ": " + errno_text(errno));
    }
  } catch (const SqliteError& e) {
    remove_db_files(tmp);
    throw store_error("export to " + file, e.what());
  } catch (const SourceError& e) {
    remove_db_files(tmp);
    throw store_error("export to " + file,
                      std::string("cannot read the store (try verify with repair): ") + e.what());
  } catch (...) {
    remove_db_files(tmp);
    throw;
  }
  if (total.bad > 0) {
    util::log().warn("cubin store {}: export left out {} rows with a bad checksum", path_,
                     total.bad);
  }
  return total.added;
}

int64_t SqliteStore::import_from(const std::string& file) { return import_bundle(file).added; }

ImportReport SqliteStore::import_bundle(const std::string& file) {
  // Held from the start: every SQLite call happens under mu_, so a fork (which
  // takes every mu_) never catches one half done.
  std::lock_guard<std::mutex> lock(mu_);
  struct stat st {};
  if (stat(file.c_str(), &st) != 0) throw store_error("import " + file, errno_text(errno));
  if (!S_ISREG(st.st_mode)) throw store_error("import " + file, "not a regular file");
  std::unique_ptr<Db> src;
  try {
    src = Db::open(sqlite_uri(file, "mode=ro"), SQLITE_OPEN_READONLY | SQLITE_OPEN_URI);
    src->set_busy_timeout(options_.busy_timeout_ms);
    const int64_t app_id = src->query_int("PRAGMA application_id");
    if (app_id != kAppId) {
      throw store_error("import " + file, "not an attnjit cubin store (application_id " +
                                              std::to_string(app_id) + ")");
    }
    if (!has_our_layout(*src, "main")) {
      const int64_t version = src->query_int("PRAGMA user_version");
      throw store_error("import " + file,
                        version == known_schema_version()
                            ? std::string("not an attnjit cubin store (unexpected tables)")
                            : fmt::format("a cubin store of schema {}, which this library (schema {}) does not "
                                          "read; export it again with this library",
                                          version, known_schema_version()));
    }
  } catch (const SqliteError& e) {
    throw store_error("import " + file, std::string("not an attnjit cubin store: ") + e.what());
  }

  CopyResult result = run_op("import", [&] {
    flush_pending_locked();
    CopyResult r;
    try {
      r = copy_verified_rows(*src, "main", *db_, /*own_txns=*/true, /*best_effort=*/false);
    } catch (const SourceError& e) {
      throw store_error("import " + file, std::string("cannot read the bundle: ") + e.what());
    }
    Txn txn(*db_);
    evict_locked(options_.max_bytes, nullptr);
    txn.commit();
    return r;
  });
  if (result.bad > 0) {
    util::log().warn("cubin store: import skipped {} rows of {} whose checksum did not match",
                     result.bad, file);
  }
  return ImportReport{result.added, result.bad};
}

}  // namespace attnjit::store
