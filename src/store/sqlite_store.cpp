// Opening, reopening and recovering the store's connection: the file when it
// is usable, else memory (with the file attached read-only when readable).
#include "store/sqlite_store.hpp"

#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "store/schema.hpp"
#include "store/wal_check.hpp"
#include "util/log.hpp"

namespace attnjit::store {

namespace {

// No SQLITE_OPEN_CREATE: the file is only ever created complete (temp + link).
// NOFOLLOW: SQLite refuses a symlinked database file (a second guard behind
// untrusted_db_files_reason, which also covers the side files).
constexpr int kFileFlags =
    SQLITE_OPEN_READWRITE | SQLITE_OPEN_URI | SQLITE_OPEN_FULLMUTEX | SQLITE_OPEN_NOFOLLOW;
constexpr int kMemoryFlags =
    SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_URI | SQLITE_OPEN_FULLMUTEX;
constexpr int kOpenAttempts = 4;

}  // namespace

int known_schema_version() {
  int version = 0;
  for (const Migration& m : schema_migrations()) version = std::max(version, std::atoi(m.file));
  return version;
}

void apply_migrations(Db& db) {
  Txn txn(db);
  const int64_t current = db.query_int("PRAGMA user_version");
  for (const Migration& m : schema_migrations()) {
    const int version = std::atoi(m.file);
    if (version <= current) continue;
    db.exec(m.sql);
    db.exec("PRAGMA user_version = " + std::to_string(version));
  }
  txn.commit();
}

bool has_our_layout(Db& db, const std::string& schema) {
  try {
    db.prepare("SELECT key, name, arch, cubin, ptx, meta_json, checksum, ptx_checksum, bytes, compile_ms, "
               "created_us FROM " + schema + ".entries LIMIT 0");
    db.prepare("SELECT key, last_used_us, hits FROM " + schema + ".usage LIMIT 0");
    db.prepare("SELECT hits, misses, puts, evictions, compile_ms_total FROM " + schema +
               ".stats WHERE id = 1");
    return true;
  } catch (const SqliteError& e) {
    if (e.corrupt()) throw;
    return false;
  }
}

void probe_entries(Db& db, const std::string& schema) {
  db.query_int("SELECT count(*) FROM (SELECT 1 FROM " + schema + ".entries NOT INDEXED LIMIT 1)");
  db.query_int("SELECT ifnull(max(rowid), 0) FROM " + schema + ".entries");
}

std::unique_ptr<CubinStore> CubinStore::open(const StoreOptions& options) {
  return std::make_unique<SqliteStore>(options);
}

SqliteStore::SqliteStore(StoreOptions options) : options_(std::move(options)) {
  dir_ = options_.dir.empty() ? resolve_cache_dir() : options_.dir;
  // Absolute now: a reopen after the process's chdir() must find the same file.
  if (!dir_.empty()) dir_ = absolute_path(dir_);
  path_ = dir_ + "/" + kDbFileName;
  track_for_fork(this);  // before any connection exists, so a fork never misses one
  try {
    std::lock_guard<std::mutex> lock(mu_);
    open_locked();
  } catch (...) {
    untrack_for_fork(this);
    throw;
  }
}

SqliteStore::~SqliteStore() {
  untrack_for_fork(this);
  std::lock_guard<std::mutex> lock(mu_);
  if (db_ && getpid() == pid_) {
    try {
      flush_pending_locked();
    } catch (const SqliteError&) {
      // Losing a few hit counts is fine.
    }
  }
  close_locked();
}

void SqliteStore::add_note(const std::string& note) {
  note_ = note_.empty() ? note : note_ + "; " + note;
}

void SqliteStore::add_problem(const std::string& problem) {
  for (const std::string& p : problems_)
    if (p == problem) return;
  problems_.push_back(problem);
  add_note(problem);
}

void SqliteStore::open_locked() {
  pid_ = getpid();
  not_created_ = false;
  if (dir_.empty()) {
    open_memory("no cache folder: set ATTNJIT_CACHE_DIR, XDG_CACHE_HOME or HOME", false);
    return;
  }
  path_ = dir_ + "/" + kDbFileName;
  if (!options_.create && !file_exists(dir_)) {
    not_created_ = true;
    open_memory("cache folder " + dir_ + " does not exist yet (it is made on first use)", false);
    return;
  }
  DirState dir = prepare_cache_dir(dir_);  // throws for a folder others can write
  if (!dir.exists) {
    open_memory(dir.problem, false);
    return;
  }
  // Never opened, not even read-only: a file others could have written is not ours to run.
  if (std::string why = untrusted_db_files_reason(path_); !why.empty()) {
    open_memory("refusing the cache file: " + why + ". Remove it (attnjit recreates the store) "
                "or fix its owner and mode (chmod 600)", false);
    return;
  }
  if (options_.read_only) {
    open_memory("opened read-only as asked (StoreOptions::read_only)", true);
    return;
  }
  if (!dir.writable) {
    open_memory(dir.problem, true);
    return;
  }
  if (file_exists(path_) && access(path_.c_str(), R_OK | W_OK) != 0) {
    open_memory(path_ + " is not writable: " + errno_text(errno), true);
    return;
  }
  sweep_stale_temps(dir_, kDbFileName);
  std::string why;
  for (int attempt = 0; attempt < kOpenAttempts; ++attempt) {
    FileId id;
    switch (try_open_file(&why, &id)) {
      case OpenResult::kOk:
        return;
      case OpenResult::kReadOnly:
      case OpenResult::kNewer:
        open_memory(why, true);
        return;
      case OpenResult::kFailed:
        open_memory(why, false);
        return;
      case OpenResult::kRetry:
        continue;
      case OpenResult::kBad: {
        std::string moved, error;
        if (!quarantine_locked(why, id, &moved, &error)) {
          open_memory(error, false);
          return;
        }
        continue;
      }
    }
  }
  open_memory("could not open " + path_ + " (" + why + ")", false);
}

SqliteStore::OpenResult SqliteStore::try_open_file(std::string* why, FileId* id) {
  int64_t size = 0;
  if (!file_id(path_, id, &size)) {
    if (!options_.create) {
      not_created_ = true;
      *why = "no store file " + path_ + " yet (it is made on first use)";
      return OpenResult::kFailed;
    }
    if (!create_fresh_db(why)) return OpenResult::kFailed;
    if (!file_id(path_, id, &size)) {
      *why = path_ + " vanished while opening";
      return OpenResult::kRetry;
    }
  }
  // We only ever publish complete files, so an empty one was made by someone else.
  if (size == 0) {
    *why = "zero-length file";
    return OpenResult::kBad;
  }
  // Shared: no one may quarantine these files while we look at them.
  DirLock lock(path_, /*exclusive=*/false, options_.busy_timeout_ms);
  if (lock.timed_out()) {
    *why = "timed out after " + std::to_string(options_.busy_timeout_ms) + " ms waiting for " +
           lock.lock_path() + " (held by a stopped or hung process?)";
    return OpenResult::kFailed;
  }
  FileId now;
  if (!file_id(path_, &now) || now != *id) {
    *why = path_ + " was replaced while opening";
    return OpenResult::kRetry;
  }
  // Before SQLite's recovery reads the -wal: afterwards new frames may overwrite the damage.
  if (std::string damage = wal_damage(path_); !damage.empty()) {
    add_problem(damage + "; the entries committed there are lost (they recompile on next use)");
    util::log().warn("cubin store: {}", problems_.back());
  }
  std::unique_ptr<Db> db;
  try {
    db = Db::open(path_, kFileFlags);
  } catch (const SqliteError& e) {
    *why = e.what();
    if (e.primary() == SQLITE_CANTOPEN) return OpenResult::kRetry;
    return e.corrupt() ? OpenResult::kBad : OpenResult::kFailed;
  }
  if (db->readonly("main")) {
    *why = path_ + " can only be opened read-only";
    return OpenResult::kReadOnly;
  }
  db->set_busy_timeout(options_.busy_timeout_ms);
  try {
    // The first read: garbage, a truncated file or a non-database fails here.
    const int64_t app_id = db->query_int("PRAGMA application_id");
    if (app_id != kAppId) {
      *why = "not an attnjit store (application_id " + std::to_string(app_id) + ")";
      return OpenResult::kBad;
    }
    if (db->query_text("PRAGMA journal_mode=WAL") != "wal") {
      util::log().warn("cubin store {}: WAL mode unavailable on this file system; using rollback "
                       "journal", path_);
    }
    db->exec("PRAGMA synchronous=NORMAL");
    const int64_t version = db->query_int("PRAGMA user_version");
    const int known = known_schema_version();
    if (version > known) {
      *why = path_ + " has schema version " + std::to_string(version) +
             ", newer than this library knows (" + std::to_string(known) + ")";
      return OpenResult::kNewer;
    }
    if (version < known) apply_migrations(*db);
    if (!has_our_layout(*db, "main")) {
      *why = "unexpected table layout for schema version " + std::to_string(version);
      return OpenResult::kBad;
    }
    probe_entries(*db, "main");
  } catch (const SqliteError& e) {
    *why = e.what();
    if (e.corrupt() || e.primary() == SQLITE_ERROR) return OpenResult::kBad;
    if (e.readonly()) return OpenResult::kReadOnly;
    return OpenResult::kFailed;
  }
  make_db_files_private(path_);
  db_ = std::move(db);
  file_id_ = *id;
  in_memory_ = false;
  has_ro_ = false;
  return OpenResult::kOk;
}

bool SqliteStore::create_fresh_db(std::string* why) {
  std::string tmp = create_temp_file(path_, why);
  if (tmp.empty()) return false;
  try {
    auto db = Db::open(tmp, kFileFlags);
    // auto_vacuum must be chosen before the first table exists.
    db->exec("PRAGMA auto_vacuum=INCREMENTAL; PRAGMA journal_mode=DELETE");
    apply_migrations(*db);
    db->query_text("PRAGMA journal_mode=WAL");  // persistent: the header says WAL from now on
  } catch (const SqliteError& e) {
    *why = "cannot create " + path_ + ": " + e.what();
    remove_db_files(tmp);
    return false;
  }
  publish_file(tmp, path_);  // false when another process published first: as good
  remove_db_files(tmp);
  return true;
}

void SqliteStore::open_memory(const std::string& why, bool attach_file) {
  close_locked();
  pid_ = getpid();
  try {
    db_ = Db::open(":memory:", kMemoryFlags);
    db_->set_busy_timeout(options_.busy_timeout_ms);
    apply_migrations(*db_);
  } catch (const SqliteError& e) {
    db_.reset();
    throw Error(ErrorCode::kStore, std::string("cannot open an in-memory store: ") + e.what());
  }
  in_memory_ = true;
  has_ro_ = false;
  std::string note = why;
  if (attach_file && file_exists(path_)) {
    std::string error;
    if (attach_read_only(&error)) {
      note += "; reading existing entries from " + path_ + " read-only";
    } else {
      note += "; cannot read " + path_ + " either (" + error + ")";
    }
  }
  note += "; new kernels stay in this process's memory";
  add_note(note);
  if (not_created_) util::log().info("cubin store: {}", note);  // asked not to create: no fault
  else util::log().warn("cubin store: {}", note);
}

bool SqliteStore::attach_read_only(std::string* error) {
  // mode=ro needs the -shm to exist or be creatable; on a read-only folder
  // fall back to immutable (nothing can write it from here anyway).
  for (const char* query : {"mode=ro", "mode=ro&immutable=1"}) {
    try {
      Stmt attach = db_->prepare("ATTACH DATABASE ?1 AS ro");
      attach.bind_text(1, sqlite_uri(path_, query));
      attach.run();
    } catch (const SqliteError& e) {
      *error = e.what();
      continue;
    }
    bool foreign = false;
    try {
      const int64_t app_id = db_->query_int("PRAGMA ro.application_id");
      if (app_id != kAppId) {
        *error = "not an attnjit store";
        foreign = true;
      } else if (!has_our_layout(*db_, "ro")) {
        *error = "unexpected table layout";
        foreign = true;
      } else {
        probe_entries(*db_, "ro");
        has_ro_ = true;
        return true;
      }
    } catch (const SqliteError& e) {
      *error = e.what();
      foreign = e.corrupt();
    }
    try {
      db_->exec("DETACH DATABASE ro");
    } catch (const SqliteError&) {
    }
    if (foreign) return false;  // immutable would not make it ours
  }
  return false;
}

void SqliteStore::ensure_open_locked() {
  if (getpid() != pid_) {
    // A fork child: never touch the parent's connection (see Db::leak).
    close_locked();
    note_.clear();
    problems_.clear();
    reopen_locked();
    return;
  }
  if (!db_) {
    reopen_locked();  // closed for a fork, or a failed reopen
    return;
  }
  if (in_memory_) {
    if (reattach_ro_) {
      reattach_ro_ = false;
      std::string error;
      if (!attach_read_only(&error)) add_note("cannot read " + path_ + " again (" + error + ")");
    }
    return;
  }
  FileId now;
  if (!file_id(path_, &now) || now != file_id_) {
    util::log().info("cubin store {} was replaced (quarantined or removed); reopening", path_);
    close_locked();
    reopen_locked();
  }
}

void SqliteStore::reopen_locked() {
  try {
    open_locked();
  } catch (const Error& e) {
    // Refused now (e.g. the folder became group-writable): a running program
    // keeps working from memory rather than failing get/put.
    open_memory(std::string("cannot reopen the store: ") + e.what(), false);
  }
}

void SqliteStore::close_locked() {
  pending_ = Pending{};
  reattach_ro_ = false;
  close_connection_locked();
}

void SqliteStore::close_connection_locked() {
  if (!db_) return;
  if (getpid() != pid_) {
    db_->leak();
  } else if (!in_memory_) {
    FileId now;
    if (!file_id(path_, &now) || now != file_id_) db_->persist_wal();
  }
  db_.reset();
  has_ro_ = false;
}

bool SqliteStore::quarantine_locked(const std::string& reason, const FileId& id,
                                    std::string* moved_to, std::string* error) {
  close_locked();
  DirLock lock(path_, /*exclusive=*/true, options_.busy_timeout_ms);
  if (lock.timed_out()) {
    *error = "cannot quarantine " + path_ + " (" + reason + "): timed out after " +
             std::to_string(options_.busy_timeout_ms) + " ms waiting for " + lock.lock_path() +
             " (held by a stopped or hung process?)";
    return false;
  }
  FileId now;
  // Already moved by another process (or removed): nothing for us to move.
  if (!file_id(path_, &now) || now != id) return true;
  std::string to = quarantine_db_files(path_, error);
  if (to.empty()) return false;
  util::log().warn("cubin store {} is unusable ({}); moved it to {}{}", path_, reason, to,
                   options_.create ? " and started a fresh store" : " (a fresh one is made on first use)");
  add_problem("quarantined " + path_ + " (" + reason + ") as " + to);
  *moved_to = to;
  return true;
}

bool SqliteStore::recover_locked(const char* what, const SqliteError& e) {
  // Our writes never break the constraints of the schema we write (INSERT OR IGNORE or
  // REPLACE, upserts, counters read through ifnull): a file whose tables refuse one has
  // another schema (say, a damaged sqlite_master that declares a NOT NULL column more)
  // and is moved aside like a corrupt one. Memory always has ours.
  const bool foreign_schema = e.primary() == SQLITE_CONSTRAINT && !in_memory_;
  if (e.corrupt() || foreign_schema) {
    if (in_memory_) {
      if (!has_ro_) return false;
      // Only the attached file can be corrupt: stop reading it.
      try {
        db_->exec("DETACH DATABASE ro");
      } catch (const SqliteError&) {
      }
      has_ro_ = false;
      util::log().warn("cubin store {}: read-only file is corrupt ({}); no longer reading it",
                       path_, e.what());
      add_note("stopped reading " + path_ + ": corrupt");
      return true;
    }
    const FileId id = file_id_;
    std::string moved, error;
    if (!quarantine_locked(std::string(what) + ": " + e.what(), id, &moved, &error)) {
      open_memory(error, false);
      return true;
    }
    reopen_locked();
    return true;
  }
  if (e.readonly() && !in_memory_) {
    open_memory(path_ + " became read-only (" + e.what() + ")", true);
    return true;
  }
  return false;
}

void SqliteStore::salvage_locked(const std::string& reason) {
  const FileId id = file_id_;
  std::string moved, error;
  if (!quarantine_locked(reason, id, &moved, &error)) {
    throw Error(ErrorCode::kStore, "verify: " + error);
  }
  reopen_locked();
  if (moved.empty() || in_memory_) return;
  try {
    auto src = Db::open(sqlite_uri(moved, "mode=ro"), SQLITE_OPEN_READONLY | SQLITE_OPEN_URI);
    CopyResult r = copy_verified_rows(*src, "main", *db_, /*own_txns=*/true, /*best_effort=*/true);
    util::log().warn("cubin store {}: salvaged {} rows from {} ({} bad)", path_, r.added, moved,
                     r.bad);
  } catch (const std::exception& e) {  // SqliteError or SourceError: nothing more to save
    util::log().warn("cubin store {}: nothing salvaged from {}: {}", path_, moved, e.what());
  }
}

bool SqliteStore::checkpoint() {
  std::lock_guard<std::mutex> lock(mu_);
  ensure_open_locked();
  if (!db_ || in_memory_) return false;
  try {
    flush_pending_locked();
    // PASSIVE never waits; TRUNCATE then waits briefly for readers and empties the -wal.
    Stmt passive = db_->prepare("PRAGMA main.wal_checkpoint(PASSIVE)");
    bool done = passive.step() && passive.col_int(0) == 0 && passive.col_int(1) == passive.col_int(2);
    db_->set_busy_timeout(std::min(options_.busy_timeout_ms, 2000));
    try {
      Stmt truncate = db_->prepare("PRAGMA main.wal_checkpoint(TRUNCATE)");
      if (truncate.step()) done = truncate.col_int(0) == 0;
    } catch (const SqliteError& e) {
      if (e.corrupt()) throw;
    }
    db_->set_busy_timeout(options_.busy_timeout_ms);
    return done;
  } catch (const SqliteError& e) {
    db_->set_busy_timeout(options_.busy_timeout_ms);
    util::log().warn("cubin store {}: checkpoint failed: {}", path_, e.what());
    return false;
  }
}

std::string SqliteStore::path() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_memory_ ? ":memory:" : path_;
}

std::unique_ptr<CompileClaim> SqliteStore::claim_compile(const std::string& key, int timeout_ms) {
  const std::string db = path();
  if (db == ":memory:") return nullptr;
  // Waits outside mu_: this process's other threads keep reading and writing the store.
  auto claim = std::make_unique<KeyLock>(db, key, timeout_ms);
  if (!claim->held() && !claim->timed_out()) return nullptr;  // no lock here (e.g. ENOLCK): compile
  return claim;
}

}  // namespace attnjit::store
