// SqliteStore: the CubinStore over one SQLite connection per process (the file, or memory as a fallback).
//
// How it behaves (the why is next to the code):
// - File: <dir>/cubins.sqlite3, WAL, synchronous=NORMAL, auto_vacuum=INCREMENTAL.
//   Created complete in a 0600 temp file and hard-linked into place, so no one
//   ever sees a half-made store; an empty file at that name is therefore foreign.
// - Checksum: XXH3-128 over the length-prefixed key, name, arch, cubin, ptx and
//   meta_json, checked on every read; a bad row is deleted and the read is a
//   miss. Sizes are length(cubin) + length(ptx), never the unchecked `bytes`.
// - Writes: BEGIN IMMEDIATE + busy timeout; put() re-checks the key under the
//   write lock, INSERT OR IGNOREs, then evicts by last_used_us above max_bytes
//   (never the row it just put). Hit counts and last_used wait in memory and
//   go out in a short write after each get (250 ms busy limit) or with the next put.
// - Corrupt or foreign file (NOTADB, CORRUPT, wrong application_id or tables,
//   zero length), at open or later: renamed with its -wal/-shm to
//   <name>.corrupt-<unix time>-<pid>[-wal|-shm] under an exclusive flock on
//   <name>.lock (openers hold it shared), a fresh store is made, one warning.
// - A newer schema (user_version above ours) is never quarantined: it is read
//   read-only and new entries stay in memory, as for a read-only location.
// - Read-only location (folder or file not writable, StoreOptions::read_only):
//   an in-memory store with the same schema, with the file ATTACHed read-only
//   (mode=ro, else immutable=1) when it exists, so shipped caches still serve.
// - Fork: pthread_atfork handlers (store_fork.cpp) take every store's mutex and
//   close its file connection before fork(), so no SQLite connection or lock
//   state crosses into the child; parent and child reopen on their next call.
//   A fork that skips the handlers (a raw syscall) is caught by the pid check:
//   the inherited connection is abandoned unclosed.
// - Another process replacing the file (quarantine, rm) is noticed by a stat
//   per call; the old connection is closed with its WAL kept and we reopen.
//   A reopen that fails (even a refused folder) falls back to memory with a
//   note: get/put/contains never throw.
// - The <name>.lock flock waits at most busy_timeout_ms (a holder may be
//   stopped); then the store falls back to memory with a note.
// - The folder is made absolute at open, so a later chdir() changes nothing.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "attnjit/error.hpp"
#include "store/cubin_store.hpp"
#include "store/sqlite_db.hpp"
#include "store/store_location.hpp"

namespace attnjit::store {

inline constexpr int64_t kAppId = 1096044106;  // 'ATNJ', set by cache_schema/001_initial.sql

// The highest NNN among cache_schema/NNN_*.sql.
int known_schema_version();
// Applies the migrations above the db's user_version, in one BEGIN IMMEDIATE
// transaction that re-reads user_version, so concurrent openers apply each once.
void apply_migrations(Db& db);
// True when <schema>.entries and <schema>.stats have the columns we use.
// Throws SqliteError for corruption, so the caller can quarantine.
bool has_our_layout(Db& db, const std::string& schema);
// The first read of <schema>.entries: the table b-tree's two edges (its first and last
// rows), so a garbage root or a file cut short throws here (corrupt: quarantine) at a
// cost of the tree's depth. Not a walk of every row: a warm start must not cost more for
// a store that holds more kernels (a walk took ~0.1 ms per 100 rows). Damage deeper in
// the table is met by the read that reaches it, and run_op moves the file aside then.
void probe_entries(Db& db, const std::string& schema);

// One row as stored, with its bookkeeping columns.
struct Row {
  Entry entry;
  std::string checksum, ptx_checksum;
  int64_t created_us = 0, last_used_us = 0, hits = 0;
};
// The columns the checksums cover, in the order read_row expects them as the first
// entry_column_count(blobs) of a SELECT (the PTX last, only when read); the columns
// a caller adds start there. compile_ms is left at 0.
std::string entry_columns(Blobs blobs);
int entry_column_count(Blobs blobs);
Row read_row(Stmt& select, Blobs blobs);
// The row checksum holds, and so does the PTX's digest when the PTX was read.
bool row_intact(const Row& row, Blobs blobs);
// The INSERT OR IGNORE that every writer uses (bind_row fills its parameters), and the
// row's usage (hits, last use) that goes with it. insert_row runs both: the usage only
// when the entry was new. True when it was.
extern const char* const kInsertRowSql;
extern const char* const kInsertUsageSql;
void bind_row(Stmt& insert, const Row& row);
bool insert_row(Db& db, Stmt& insert, Stmt& usage, const Row& row);
// A correlated subquery for an entry's `column` of <schema>.usage (NULL when it has none).
std::string usage_of(const std::string& schema, const char* column);

// Copies the rows of src.<schema>.entries whose checksum is right into dst
// (INSERT OR IGNORE). own_txns: commit every few rows on dst (import); else the
// caller holds dst's transaction (export). best_effort: stop quietly at the
// first read error instead of throwing (salvaging a corrupt file).
// Reading the source failed (not the destination): SourceError, so that a bad
// bundle is never mistaken for corruption of the store itself.
class SourceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
struct CopyResult {
  int64_t added = 0, bad = 0;
  bool stopped_early = false;
};
CopyResult copy_verified_rows(Db& src, const std::string& schema, Db& dst, bool own_txns,
                              bool best_effort);

// Hit/miss bookkeeping waiting for the next write transaction, so a busy or
// read-only file never fails a get().
struct Pending {
  int64_t hits = 0, misses = 0;
  std::map<std::string, std::pair<int64_t, int64_t>> touches;  // key -> (hits, last_used_us)
  int64_t since_us = 0;  // when the oldest count still pending was taken
  bool empty() const { return hits == 0 && misses == 0 && touches.empty(); }
};

// A store operation that failed after recovery was tried; get/put/contains
// turn it into a miss/false, the admin calls let it through.
class OpError : public Error {
 public:
  using Error::Error;
};

class SqliteStore final : public CubinStore {
 public:
  explicit SqliteStore(StoreOptions options);
  ~SqliteStore() override;

  std::optional<Entry> get(const std::string& key, Blobs blobs) override;
  bool put(const Entry& entry) override;
  bool contains(const std::string& key) override;
  bool remove(const std::string& key) override;
  std::vector<EntryInfo> list() override;
  StoreStats stats() override;
  int64_t gc(int64_t max_bytes) override;
  VerifyReport verify(bool repair) override;
  int64_t export_to(const std::string& file) override;
  int64_t import_from(const std::string& file) override;
  ImportReport import_bundle(const std::string& file) override;
  bool checkpoint() override;
  void clear() override;
  std::string path() const override;
  std::unique_ptr<CompileClaim> claim_compile(const std::string& key, int timeout_ms) override;

 private:
  enum class OpenResult { kOk, kReadOnly, kNewer, kBad, kFailed, kRetry };

  // Fork safety (store_fork.cpp): the atfork handlers walk every live store.
  static void track_for_fork(SqliteStore* store);
  static void untrack_for_fork(SqliteStore* store);
  static void prepare_fork();
  static void after_fork_in_parent();
  static void after_fork_in_child();
  void release_for_fork_locked();

  // Connection management (sqlite_store.cpp). All *_locked run under mu_.
  void open_locked();
  void reopen_locked();  // open_locked, but a refusal falls back to memory
  OpenResult try_open_file(std::string* why, FileId* id);
  bool create_fresh_db(std::string* why);
  void open_memory(const std::string& why, bool attach_file);
  bool attach_read_only(std::string* error);
  void ensure_open_locked();
  void close_locked();
  void close_connection_locked();  // close_locked, keeping the pending counts
  bool quarantine_locked(const std::string& reason, const FileId& id, std::string* moved_to,
                         std::string* error);
  bool recover_locked(const char* what, const SqliteError& e);
  void salvage_locked(const std::string& reason);
  void add_note(const std::string& note);
  void add_problem(const std::string& problem);  // a note that verify reports too
  // Runs body; on a SQLite failure recovers once (quarantine, memory) and
  // retries; a second failure becomes OpError.
  template <class F>
  auto run_op(const char* what, F&& body) -> decltype(body());

  // Rows (store_ops.cpp).
  std::vector<std::string> schemas() const;
  std::optional<Entry> get_locked(const std::string& key, Blobs blobs);
  // Deletes the usage rows whose entry is gone (after any delete of entries).
  void drop_orphan_usage_locked();
  bool put_locked(const Entry& entry);
  // The row under key in schema: none; valid (it is key's own and its checksum holds);
  // or stale (a bad checksum, or another key's row: a damaged index).
  enum class RowState { kNone, kValid, kStale };
  RowState row_state_locked(const std::string& schema, const std::string& key);
  // A row that failed its checks, named by rowid and by its checksum as stored (quote():
  // a damaged file may hold it, or the key, as a BLOB, which a bound text never equals).
  struct BadRow {
    int64_t rowid;
    std::string quoted_checksum;
  };
  // Deletes each row still carrying that checksum (a good row put meanwhile is kept).
  void delete_bad_rows_locked(const std::vector<BadRow>& rows);
  void flush_pending_locked();
  // A read writes nothing until its counts are old or many (a write transaction
  // on a warm start costs a -wal creation and a directory sync: milliseconds).
  void note_pending_locked();
  void apply_pending_locked();
  // Writes the pending counts of every store of this process (admin reads, and at
  // exit: the global Runtime's store is never destroyed). Takes each store's mutex.
  static void flush_all_pending();
  int64_t evict_locked(int64_t cap, const std::string* keep_key);
  void vacuum_locked();
  void refuse_live_export_target(const std::string& file) const;

  StoreOptions options_;
  std::string dir_;
  std::string path_;
  mutable std::mutex mu_;
  std::unique_ptr<Db> db_;
  pid_t pid_ = 0;         // the process that opened db_; another pid must reopen
  FileId file_id_;        // the inode db_ has open; another one there means replaced
  bool in_memory_ = false;
  static constexpr int kQuarantineKeep = 3;  // newest quarantined sets gc keeps
  bool has_ro_ = false;   // the file is attached read-only as schema "ro"
  bool reattach_ro_ = false;  // "ro" was detached for a fork: attach again on next use
  bool not_created_ = false;  // create=false found no folder or file
  std::string note_;
  std::vector<std::string> problems_;  // see VerifyReport::problems
  std::string write_error_;            // see StoreStats::write_error
  Pending pending_;
};

template <class F>
auto SqliteStore::run_op(const char* what, F&& body) -> decltype(body()) {
  ensure_open_locked();
  try {
    return body();
  } catch (const SqliteError& e) {
    if (!recover_locked(what, e)) {
      throw OpError(ErrorCode::kStore, std::string("cubin store ") + what + " on " + path_ + ": " +
                                           e.what());
    }
  }
  try {
    return body();
  } catch (const SqliteError& e) {
    throw OpError(ErrorCode::kStore,
                  std::string("cubin store ") + what + " on " + path_ + ": " + e.what());
  }
}

}  // namespace attnjit::store
