// The row operations of SqliteStore: get, put, contains, list, stats, gc, clear.
#include <fmt/format.h>
#include <sqlite3.h>

#include <algorithm>

#include "store/checksum.hpp"
#include "store/sqlite_store.hpp"
#include "util/log.hpp"

namespace attnjit::store {

namespace {

// A get() must not wait long just to record a hit; the counts wait in Pending.
constexpr int kShortBusyMs = 250;
constexpr size_t kMaxPendingTouches = 4096;
// Blob lengths are read from the record header, without loading the blobs.
constexpr const char* kRowBytesSum = "coalesce(sum(length(cubin) + length(ptx)), 0)";

}  // namespace

std::string entry_columns(Blobs blobs) {
  return blobs == Blobs::kCubin ? "key, name, arch, meta_json, checksum, ptx_checksum, length(ptx), cubin"
                                : "key, name, arch, meta_json, checksum, ptx_checksum, length(ptx), cubin, ptx";
}

int entry_column_count(Blobs blobs) { return blobs == Blobs::kCubin ? 8 : 9; }

Row read_row(Stmt& s, Blobs blobs) {
  Row row;
  Entry& e = row.entry;
  e.key = s.col_text(0);
  e.name = s.col_text(1);
  e.arch = s.col_text(2);
  e.meta_json = s.col_text(3);
  row.checksum = s.col_text(4);
  row.ptx_checksum = s.col_text(5);
  e.ptx_bytes = s.col_int(6);
  e.cubin = s.col_blob(7);
  if (blobs == Blobs::kCubinAndPtx) e.ptx = s.col_blob(8);
  return row;
}

bool row_intact(const Row& row, Blobs blobs) {
  if (row_checksum(row.entry, row.ptx_checksum) != row.checksum) return false;
  return blobs == Blobs::kCubin || ptx_checksum(row.entry.ptx) == row.ptx_checksum;
}

const char* const kInsertRowSql =
    "INSERT OR IGNORE INTO main.entries (key, name, arch, cubin, ptx, meta_json, checksum, bytes, "
    "compile_ms, created_us, ptx_checksum) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)";
const char* const kInsertUsageSql =
    "INSERT OR REPLACE INTO main.usage (key, last_used_us, hits) VALUES (?1, ?2, ?3)";

void bind_row(Stmt& insert, const Row& row) {
  const Entry& e = row.entry;
  insert.bind_text(1, e.key)
      .bind_text(2, e.name)
      .bind_text(3, e.arch)
      .bind_blob(4, e.cubin)
      .bind_blob(5, e.ptx)
      .bind_text(6, e.meta_json)
      .bind_text(7, row.checksum)
      .bind_int(8, static_cast<int64_t>(e.cubin.size() + e.ptx.size()))
      .bind_double(9, e.compile_ms)
      .bind_int(10, row.created_us)
      .bind_text(11, row.ptx_checksum);
}

bool insert_row(Db& db, Stmt& insert, Stmt& usage, const Row& row) {
  bind_row(insert, row);
  insert.run();
  insert.reset();
  if (db.changes() != 1) return false;
  usage.bind_text(1, row.entry.key).bind_int(2, row.last_used_us).bind_int(3, row.hits);
  usage.run();
  usage.reset();
  return true;
}

std::string usage_of(const std::string& schema, const char* column) {
  return fmt::format("(SELECT {1} FROM {0}.usage WHERE usage.key = entries.key)", schema, column);
}

std::vector<std::string> SqliteStore::schemas() const {
  if (has_ro_) return {"main", "ro"};
  return {"main"};
}

// --- get / contains -----------------------------------------------------------

std::optional<Entry> SqliteStore::get(const std::string& key, Blobs blobs) {
  std::lock_guard<std::mutex> lock(mu_);
  try {
    return run_op("get", [&] { return get_locked(key, blobs); });
  } catch (const Error& e) {  // OpError, or even memory could not be opened
    util::log().warn("{}; treating it as a miss", e.what());
    return std::nullopt;
  }
}

std::optional<Entry> SqliteStore::get_locked(const std::string& key, Blobs blobs) {
  const int extra = entry_column_count(blobs);
  for (const std::string& schema : schemas()) {
    Row stored;
    BadRow row;
    {
      Stmt s = db_->prepare("SELECT " + entry_columns(blobs) + ", compile_ms, rowid, quote(checksum) FROM " +
                            schema + ".entries WHERE key = ?1");
      s.bind_text(1, key);
      if (!s.step()) continue;
      stored = read_row(s, blobs);
      stored.entry.compile_ms = s.col_double(extra);
      row = {s.col_int(extra + 1), s.col_text(extra + 2)};
    }
    Entry& entry = stored.entry;
    // The checksum covers the metadata too: a caller never sees a tampered meta_json.
    if (!row_intact(stored, blobs)) {
      util::log().warn("cubin store {}: checksum mismatch for {} ({}){}", path_, key, entry.name,
                       schema == "main" ? "; removing it" : "");
      if (schema == "main") {
        try {
          delete_bad_rows_locked({row});
        } catch (const SqliteError& e) {
          if (e.corrupt()) throw;
          util::log().warn("cubin store {}: could not delete the bad row {}: {}", path_, key, e.what());
        }
      }
      ++pending_.misses;
      flush_pending_locked();
      return std::nullopt;
    }
    ++pending_.hits;
    auto& touch = pending_.touches[key];
    ++touch.first;
    touch.second = now_us();
    note_pending_locked();
    return std::move(entry);
  }
  ++pending_.misses;  // a miss is usually followed by a put, which writes the counts
  note_pending_locked();
  return std::nullopt;
}

bool SqliteStore::remove(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  try {
    return run_op("remove", [&] {
      Txn txn(*db_);
      Stmt del = db_->prepare("DELETE FROM main.entries WHERE key = ?1");
      del.bind_text(1, key);
      del.run();
      const bool removed = db_->changes() > 0;
      drop_orphan_usage_locked();
      txn.commit();
      return removed;
    });
  } catch (const Error& e) {
    util::log().warn("{}; the row stays", e.what());
    return false;
  }
}

void SqliteStore::delete_bad_rows_locked(const std::vector<BadRow>& rows) {
  Txn txn(*db_);
  Stmt del = db_->prepare("DELETE FROM main.entries WHERE rowid = ?1 AND quote(checksum) = ?2");
  for (const BadRow& row : rows) {
    del.bind_int(1, row.rowid).bind_text(2, row.quoted_checksum);
    del.run();
    del.reset();
  }
  drop_orphan_usage_locked();
  txn.commit();
}

void SqliteStore::drop_orphan_usage_locked() {
  db_->exec("DELETE FROM main.usage WHERE key NOT IN (SELECT key FROM main.entries)");
}

bool SqliteStore::contains(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  try {
    return run_op("contains", [&] {
      for (const std::string& schema : schemas()) {
        Stmt s = db_->prepare("SELECT 1 FROM " + schema + ".entries WHERE key = ?1");
        s.bind_text(1, key);
        if (s.step()) return true;
      }
      return false;
    });
  } catch (const Error& e) {
    util::log().warn("{}", e.what());
    return false;
  }
}

SqliteStore::RowState SqliteStore::row_state_locked(const std::string& schema, const std::string& key) {
  // Both blobs: a row that get() (which reads the PTX too) would refuse is not valid here.
  Stmt s = db_->prepare("SELECT " + entry_columns(Blobs::kCubinAndPtx) + " FROM " + schema + ".entries WHERE key = ?1");
  s.bind_text(1, key);
  if (!s.step()) return RowState::kNone;
  const Row row = read_row(s, Blobs::kCubinAndPtx);
  return row.entry.key == key && row_intact(row, Blobs::kCubinAndPtx) ? RowState::kValid : RowState::kStale;
}

// --- pending hit bookkeeping --------------------------------------------------

namespace {
constexpr int64_t kPendingMaxAgeUs = 2'000'000;  // LRU order needs seconds, not microseconds
constexpr size_t kPendingMaxTouches = 64;
}  // namespace

void SqliteStore::note_pending_locked() {
  const int64_t now = now_us();
  if (pending_.since_us == 0) pending_.since_us = now;
  if (now - pending_.since_us >= kPendingMaxAgeUs || pending_.touches.size() >= kPendingMaxTouches)
    flush_pending_locked();
}

void SqliteStore::flush_pending_locked() {
  if (pending_.empty()) return;
  db_->set_busy_timeout(std::min(options_.busy_timeout_ms, kShortBusyMs));
  try {
    Txn txn(*db_);
    apply_pending_locked();
    txn.commit();
    pending_ = Pending{};
  } catch (const SqliteError& e) {
    db_->set_busy_timeout(options_.busy_timeout_ms);
    if (e.corrupt()) throw;
    // Busy or read-only: keep the counts for the next write; stats() adds them.
    if (pending_.touches.size() > kMaxPendingTouches) pending_.touches.clear();
    return;
  }
  db_->set_busy_timeout(options_.busy_timeout_ms);
}

// The counters (stats, and each row's hits and last use) are advisory: every update
// reads a NULL one (a damaged row; the NOT NULL constraints keep writers from making
// one) as 0, so a damaged row heals on the next write instead of failing every put
// with a constraint error.
void SqliteStore::apply_pending_locked() {
  if (pending_.hits != 0 || pending_.misses != 0) {
    Stmt s = db_->prepare(
        "UPDATE main.stats SET hits = ifnull(hits, 0) + ?1, misses = ifnull(misses, 0) + ?2 WHERE id = 1");
    s.bind_int(1, pending_.hits).bind_int(2, pending_.misses);
    s.run();
  }
  if (pending_.touches.empty()) return;
  // A row of usage, never of entries: an UPDATE there would rebuild the record, blobs and all.
  Stmt s = db_->prepare(
      "INSERT INTO main.usage (key, last_used_us, hits) SELECT ?3, ?2, ?1 WHERE EXISTS "
      "(SELECT 1 FROM main.entries WHERE key = ?3) ON CONFLICT(key) DO UPDATE SET "
      "hits = ifnull(hits, 0) + excluded.hits, last_used_us = max(ifnull(last_used_us, 0), excluded.last_used_us)");
  for (const auto& [key, touch] : pending_.touches) {
    s.bind_int(1, touch.first).bind_int(2, touch.second).bind_text(3, key);
    s.run();
    s.reset();
  }
}

// --- put / eviction -----------------------------------------------------------

bool SqliteStore::put(const Entry& entry) {
  std::lock_guard<std::mutex> lock(mu_);
  try {
    return run_op("put", [&] { return put_locked(entry); });
  } catch (const Error& e) {
    write_error_ = e.what();
    util::log().warn("{}; the kernel was not stored", e.what());
    return false;
  }
}

bool SqliteStore::put_locked(const Entry& entry) {
  // Already served (and valid) from the read-only file: nothing to keep.
  if (has_ro_ && row_state_locked("ro", entry.key) == RowState::kValid) return false;
  Row row;
  row.entry = entry;
  row.ptx_checksum = ptx_checksum(entry.ptx);
  row.checksum = row_checksum(entry, row.ptx_checksum);
  row.created_us = row.last_used_us = now_us();

  Txn txn(*db_);
  // Check again under the write lock: another process may have put it meanwhile. A stale
  // row there is replaced, so that the put reads back. Deleting it from a malformed file
  // throws the corrupt error: run_op then moves the file aside and puts into a fresh store.
  const RowState state = row_state_locked("main", entry.key);
  if (state == RowState::kStale) {
    Stmt del = db_->prepare("DELETE FROM main.entries WHERE key = ?1");
    del.bind_text(1, entry.key);
    del.run();
  }
  bool inserted = false;
  if (state != RowState::kValid) {
    Stmt insert = db_->prepare(kInsertRowSql);
    Stmt usage = db_->prepare(kInsertUsageSql);
    inserted = insert_row(*db_, insert, usage, row);
  }
  if (inserted) {
    Stmt s = db_->prepare(
        "UPDATE main.stats SET puts = ifnull(puts, 0) + 1, "
        "compile_ms_total = ifnull(compile_ms_total, 0) + ?1 "
        "WHERE id = 1");
    s.bind_double(1, entry.compile_ms);
    s.run();
  }
  apply_pending_locked();
  const int64_t evicted = inserted ? evict_locked(options_.max_bytes, &entry.key) : 0;
  // Read it back after the transaction's last write: in a damaged file the key can lead
  // to another row, or a later write (a page the damaged pointer map calls free) can
  // overwrite the new one. That is corruption: run_op moves the file aside and puts into
  // a fresh store.
  if (row_state_locked("main", entry.key) != RowState::kValid)
    throw SqliteError(SQLITE_CORRUPT, "the row just written does not read back (a damaged file)");
  txn.commit();
  pending_ = Pending{};
  if (evicted > 0) vacuum_locked();
  return inserted;
}

int64_t SqliteStore::evict_locked(int64_t cap, const std::string* keep_key) {
  cap = std::max<int64_t>(cap, 0);
  // Sizes come from the blobs, never from the `bytes` column: it is not
  // covered by the checksum, and a wrong value there could overflow sum().
  int64_t total = db_->query_int(std::string("SELECT ") + kRowBytesSum + " FROM main.entries");
  if (total <= cap) return 0;
  std::vector<int64_t> victims;  // rowids: a damaged file's key may not match a bound text
  {
    Stmt s = db_->prepare("SELECT key, length(cubin) + length(ptx), rowid FROM main.entries ORDER BY ifnull(" +
                          usage_of("main", "last_used_us") + ", 0), created_us, rowid");
    while (total > cap && s.step()) {
      if (keep_key && s.col_text(0) == *keep_key) continue;  // the newest put survives its own cap check
      total -= s.col_int(1);
      victims.push_back(s.col_int(2));
    }
  }
  Stmt del = db_->prepare("DELETE FROM main.entries WHERE rowid = ?1");
  for (const int64_t rowid : victims) {
    del.bind_int(1, rowid);
    del.run();
    del.reset();
  }
  drop_orphan_usage_locked();
  Stmt s = db_->prepare("UPDATE main.stats SET evictions = ifnull(evictions, 0) + ?1 WHERE id = 1");
  s.bind_int(1, static_cast<int64_t>(victims.size()));
  s.run();
  if (!victims.empty()) {
    util::log().debug("cubin store {}: evicted {} entries (cap {} bytes)", path_, victims.size(),
                      cap);
  }
  return static_cast<int64_t>(victims.size());
}

void SqliteStore::vacuum_locked() {
  // Give freed pages back to the file system (auto_vacuum=INCREMENTAL).
  try {
    db_->exec("PRAGMA main.incremental_vacuum");
  } catch (const SqliteError& e) {
    if (e.corrupt()) throw;
  }
}

int64_t SqliteStore::gc(int64_t max_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!in_memory_) {
    // Quarantined files are kept for a post-mortem, but not forever.
    const int pruned = prune_quarantine(path_, kQuarantineKeep);
    if (pruned > 0) util::log().info("cubin store: removed {} old quarantined file set(s)", pruned);
  }
  return run_op("gc", [&] {
    Txn txn(*db_);
    apply_pending_locked();
    const int64_t evicted = evict_locked(max_bytes, nullptr);
    txn.commit();
    pending_ = Pending{};
    if (evicted > 0) vacuum_locked();
    return evicted;
  });
}

void SqliteStore::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  run_op("clear", [&] {
    pending_.touches.clear();
    Txn txn(*db_);
    db_->exec("DELETE FROM main.entries; DELETE FROM main.usage");
    apply_pending_locked();
    txn.commit();
    pending_ = Pending{};
    vacuum_locked();
  });
  if (has_ro_) {
    util::log().warn("cubin store: clear() cannot remove the entries of read-only {}", path_);
  }
}

// --- list / stats -------------------------------------------------------------

std::vector<EntryInfo> SqliteStore::list() {
  flush_all_pending();  // every store of this process: its counts are in the rows read here
  std::lock_guard<std::mutex> lock(mu_);
  return run_op("list", [&] {
    std::vector<EntryInfo> out;
    for (const std::string& schema : schemas()) {
      // A row without usage (a damaged file) reads as used when it was created.
      Stmt s = db_->prepare("SELECT key, name, arch, length(cubin), length(ptx), created_us, ifnull(" +
                            usage_of(schema, "last_used_us") + ", created_us), ifnull(" + usage_of(schema, "hits") +
                            ", 0), compile_ms FROM " + schema + ".entries ORDER BY 7 DESC");
      while (s.step()) {
        EntryInfo info;
        info.key = s.col_text(0);
        info.name = s.col_text(1);
        info.arch = s.col_text(2);
        info.cubin_bytes = s.col_int(3);
        info.ptx_bytes = s.col_int(4);
        info.created_unix = s.col_int(5) / 1000000;
        info.last_used_unix = s.col_int(6) / 1000000;
        info.hits = s.col_int(7);
        info.compile_ms = s.col_double(8);
        out.push_back(std::move(info));
      }
    }
    std::stable_sort(out.begin(), out.end(), [](const EntryInfo& a, const EntryInfo& b) {
      return a.last_used_unix > b.last_used_unix;
    });
    return out;
  });
}

StoreStats SqliteStore::stats() {
  flush_all_pending();
  std::lock_guard<std::mutex> lock(mu_);
  return run_op("stats", [&] {
    flush_pending_locked();
    StoreStats st;
    for (const std::string& schema : schemas()) {
      Stmt s = db_->prepare(std::string("SELECT count(*), ") + kRowBytesSum + " FROM " + schema +
                            ".entries");
      if (s.step()) {
        st.entries += s.col_int(0);
        st.total_bytes += s.col_int(1);
      }
    }
    Stmt s = db_->prepare(
        "SELECT hits, misses, puts, evictions, compile_ms_total FROM main.stats WHERE id = 1");
    if (s.step()) {
      st.hits = s.col_int(0);
      st.misses = s.col_int(1);
      st.puts = s.col_int(2);
      st.evictions = s.col_int(3);
      st.compile_ms_total = s.col_double(4);
    }
    // Counts a busy or read-only file could not take yet.
    st.hits += pending_.hits;
    st.misses += pending_.misses;
    st.path = in_memory_ ? ":memory:" : path_;
    st.in_memory = in_memory_;
    st.reads_file = has_ro_;
    st.not_created = not_created_;
    st.write_error = write_error_;
    st.note = note_;
    return st;
  });
}

}  // namespace attnjit::store
