// Tests of src/store/: what a reader trusts (checksummed metadata, sizes from the blobs,
// damaged counters), the schema 001 -> 002 and 002 -> 003 upgrades, and export never replacing a live database.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "attnjit/error.hpp"
#include "common/log_capture.hpp"
#include "common/store_fixtures.hpp"
#include "common/temp_dir.hpp"
#include "store/cubin_store.hpp"
#include "store/schema.hpp"

namespace attnjit::store {
namespace {

using fixtures::make_entry;
using fixtures::open_store;

namespace fs = std::filesystem;
using TempDir = ::attnjit::testing::TempDir;
using ::attnjit::testing::LogCapture;

// Plain SQL on a store file, as another tool (or an attacker) would write it.
void raw_exec(const std::string& db, const std::string& sql) {
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &raw), SQLITE_OK);
  char* err = nullptr;
  EXPECT_EQ(sqlite3_exec(raw, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK)
      << sql << ": " << (err ? err : "");
  sqlite3_free(err);
  sqlite3_close(raw);
}

int64_t raw_int(const std::string& db, const std::string& sql) {
  sqlite3* raw = nullptr;
  EXPECT_EQ(sqlite3_open(db.c_str(), &raw), SQLITE_OK);
  sqlite3_stmt* s = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(raw, sql.c_str(), -1, &s, nullptr), SQLITE_OK) << sql;
  const int64_t v = sqlite3_step(s) == SQLITE_ROW ? sqlite3_column_int64(s, 0) : -1;
  sqlite3_finalize(s);
  sqlite3_close(raw);
  return v;
}

// meta_json is parsed by the runtime (wrong JSON types there throw), and name
// and arch are shown to users: a row whose metadata changed is a bad row.
TEST(StoreIntegrityTest, MetadataIsCoveredByTheChecksum) {
  TempDir tmp;
  const std::string db = tmp.sub("cubins.sqlite3");
  auto store = open_store(tmp.path());
  for (const char* k : {"meta", "name", "arch", "fine"}) ASSERT_TRUE(store->put(make_entry(k, 3000)));
  raw_exec(db, R"(UPDATE entries SET meta_json = '{"log":5,"resources":{"registers":"many"}}')"
               " WHERE key = 'meta'");
  raw_exec(db, "UPDATE entries SET name = 'other' WHERE key = 'name'");
  raw_exec(db, "UPDATE entries SET arch = 'sm_80' WHERE key = 'arch'");
  auto report = store->verify(false);
  std::sort(report.bad_keys.begin(), report.bad_keys.end());
  EXPECT_EQ(report.bad_keys, (std::vector<std::string>{"arch", "meta", "name"}));
  LogCapture log;
  for (const char* k : {"meta", "name", "arch"}) EXPECT_FALSE(store->get(k).has_value()) << k;
  EXPECT_EQ(log.count("checksum mismatch"), 3) << log.text();
  EXPECT_EQ(raw_int(db, "SELECT count(*) FROM entries"), 1) << "the bad rows were removed";
  auto fine = store->get("fine");
  ASSERT_TRUE(fine.has_value());
  EXPECT_EQ(fine->meta_json, make_entry("fine", 3000).meta_json);
}

TEST(StoreIntegrityTest, HugeBytesValuesBreakNeitherPutNorStats) {
  TempDir tmp;
  const std::string db = tmp.sub("cubins.sqlite3");
  auto store = open_store(tmp.path());
  ASSERT_TRUE(store->put(make_entry("a", 2000)));
  ASSERT_TRUE(store->put(make_entry("b", 2000)));
  raw_exec(db, "UPDATE entries SET bytes = 9223372036854775000");  // sum() would overflow
  EXPECT_TRUE(store->put(make_entry("c", 2000)));
  StoreStats st;
  ASSERT_NO_THROW(st = store->stats());
  EXPECT_EQ(st.entries, 3);
  EXPECT_EQ(st.total_bytes, 3 * (2000 + 64)) << "sizes come from the blobs";
  EXPECT_NO_THROW(store->gc(int64_t(1) << 40));
  EXPECT_EQ(store->list().size(), 3u);
}

std::string raw_text(const std::string& db, const std::string& sql) {
  sqlite3* raw = nullptr;
  EXPECT_EQ(sqlite3_open(db.c_str(), &raw), SQLITE_OK);
  sqlite3_stmt* s = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(raw, sql.c_str(), -1, &s, nullptr), SQLITE_OK) << sql;
  std::string v = sqlite3_step(s) == SQLITE_ROW ? reinterpret_cast<const char*>(sqlite3_column_text(s, 0)) : "";
  sqlite3_finalize(s);
  sqlite3_close(raw);
  return v;
}

std::string sql_quote(const std::string& text) {
  std::string q = "'";
  for (char ch : text) q += ch == '\'' ? std::string("''") : std::string(1, ch);
  return q + "'";
}

// NULL counters (stats, a row's hits and last use) in a damaged file: the NOT NULL
// constraints keep SQLite writers from making them, so the damage is made by
// lifting the constraints, writing NULLs and putting the schema back. Found by
// fuzz_store_open: every put then failed with a constraint error. The counters are
// advisory, so the next write heals them.
TEST(StoreIntegrityTest, NullCountersInADamagedFileDoNotBlockPuts) {
  TempDir tmp;
  const std::string db = tmp.sub("cubins.sqlite3");
  auto store = open_store(tmp.path(), /*max_bytes=*/5000);
  ASSERT_TRUE(store->put(make_entry("a", 2000)));
  ASSERT_TRUE(store->put(make_entry("b", 2000)));
  const std::string stats_sql = raw_text(db, "SELECT sql FROM sqlite_schema WHERE name = 'stats'");
  const std::string usage_sql = raw_text(db, "SELECT sql FROM sqlite_schema WHERE name = 'usage'");
  ASSERT_NE(stats_sql.find("NOT NULL"), std::string::npos);
  raw_exec(db, "PRAGMA writable_schema = ON; UPDATE sqlite_schema SET sql = replace(sql, 'NOT NULL', '') "
               "WHERE name IN ('stats', 'usage')");
  raw_exec(db, "UPDATE stats SET hits = NULL, misses = NULL, puts = NULL, evictions = NULL, "
               "compile_ms_total = NULL; UPDATE usage SET hits = NULL, last_used_us = NULL WHERE key = 'a'");
  raw_exec(db, "PRAGMA writable_schema = ON; UPDATE sqlite_schema SET sql = " + sql_quote(stats_sql) +
                   " WHERE name = 'stats'; UPDATE sqlite_schema SET sql = " + sql_quote(usage_sql) +
                   " WHERE name = 'usage'");
  // (typeof: with NOT NULL back in the schema, SQLite folds `IS NULL` to false.)
  ASSERT_EQ(raw_text(db, "SELECT typeof(compile_ms_total) FROM stats"), "null");

  ASSERT_TRUE(store->get("a").has_value());     // a hit to record on a row whose hits are NULL
  EXPECT_TRUE(store->put(make_entry("c", 2000)));  // 3 x 2064 bytes > 5000: evicts, counts
  EXPECT_TRUE(store->contains("c"));
  StoreStats st;
  ASSERT_NO_THROW(st = store->stats());
  EXPECT_EQ(st.puts, 1) << "the damaged counter restarted from 0";
  EXPECT_EQ(st.evictions, 1);
  EXPECT_EQ(raw_text(db, "SELECT typeof(puts) || typeof(evictions) || typeof(compile_ms_total) FROM stats"),
            "integerintegerreal")
      << "the write healed the row";
}

// A damaged sqlite_master that declares one more NOT NULL column (what the fuzzer made of
// "INTEGER" once): every insert into usage fails its constraint. Our writes never break
// our own schema, so the file is moved aside and the put lands in a fresh store.
TEST(StoreIntegrityTest, ASchemaThatRefusesOurRowsIsMovedAside) {
  TempDir tmp;
  const std::string db = tmp.sub("cubins.sqlite3");
  {
    auto store = open_store(tmp.path());
    ASSERT_TRUE(store->put(make_entry("a", 2000)));
  }
  raw_exec(db, "PRAGMA writable_schema = ON; UPDATE sqlite_schema SET sql = replace(sql, "
               "'hits           INTEGER NOT NULL DEFAULT 0', 'hits INTEGER NOT NULL DEFAULT 0, extra INTEGER NOT NULL') "
               "WHERE name = 'usage'");
  ASSERT_NE(raw_text(db, "SELECT sql FROM sqlite_schema WHERE name = 'usage'").find("extra"), std::string::npos);
  LogCapture log;
  auto store = open_store(tmp.path());
  ASSERT_TRUE(store->get("a").has_value()) << "reads do not meet the extra column";
  EXPECT_TRUE(store->put(make_entry("b", 2000)));
  const auto b = store->get("b");
  ASSERT_TRUE(b.has_value());
  EXPECT_TRUE(fixtures::same(*b, make_entry("b", 2000)));
  EXPECT_EQ(log.count("is unusable"), 1) << log.text();
  EXPECT_FALSE(store->stats().in_memory);
  EXPECT_TRUE(store->verify(false).integrity_ok);
}

// A hit is recorded in its row of usage: the entry's record (its blobs) is never rewritten,
// a row missing from usage reads as last used when it was created, and deleting an entry
// (remove, eviction, a bad checksum) deletes its usage too.
TEST(StoreIntegrityTest, UsageLivesApartFromTheBlobs) {
  TempDir tmp;
  const std::string db = tmp.sub("cubins.sqlite3");
  auto store = open_store(tmp.path());
  ASSERT_TRUE(store->put(make_entry("a", 2000)));
  ASSERT_TRUE(store->put(make_entry("b", 2000)));
  ASSERT_TRUE(store->get("a", Blobs::kCubin).has_value());
  ASSERT_TRUE(store->get("a", Blobs::kCubin).has_value());
  store->stats();  // flushes the touches
  EXPECT_EQ(raw_int(db, "SELECT hits FROM usage WHERE key = 'a'"), 2);
  EXPECT_EQ(raw_int(db, "SELECT hits FROM usage WHERE key = 'b'"), 0);
  EXPECT_GE(raw_int(db, "SELECT last_used_us FROM usage WHERE key = 'a'"),
            raw_int(db, "SELECT created_us FROM entries WHERE key = 'a'"));
  raw_exec(db, "DELETE FROM usage WHERE key = 'b'");
  for (const EntryInfo& e : store->list()) {
    if (e.key != "b") continue;
    EXPECT_EQ(e.hits, 0);
    EXPECT_EQ(e.last_used_unix, e.created_unix);
  }
  ASSERT_TRUE(store->get("b", Blobs::kCubin).has_value());  // a touch of a row without usage makes one
  store->stats();
  EXPECT_EQ(raw_int(db, "SELECT hits FROM usage WHERE key = 'b'"), 1);
  ASSERT_TRUE(store->remove("a"));
  EXPECT_EQ(raw_int(db, "SELECT count(*) FROM usage WHERE key = 'a'"), 0);
  raw_exec(db, "UPDATE entries SET cubin = zeroblob(2000) WHERE key = 'b'");
  EXPECT_FALSE(store->get("b", Blobs::kCubin).has_value());
  EXPECT_EQ(raw_int(db, "SELECT count(*) FROM usage"), 0);
}

TEST(StoreIntegrityTest, EvictionSizesRowsByTheirBlobs) {
  TempDir tmp;
  auto store = open_store(tmp.path(), /*max_bytes=*/5000);
  ASSERT_TRUE(store->put(make_entry("a", 2000)));
  ASSERT_TRUE(store->put(make_entry("b", 2000)));
  raw_exec(tmp.sub("cubins.sqlite3"), "UPDATE entries SET bytes = 0");  // claims to be free
  ASSERT_TRUE(store->put(make_entry("c", 2000)));  // 3 x 2064 real bytes > 5000
  EXPECT_FALSE(store->contains("a")) << "the least recently used row is evicted";
  EXPECT_TRUE(store->contains("b"));
  EXPECT_TRUE(store->contains("c"));
  EXPECT_EQ(store->stats().total_bytes, 2 * (2000 + 64));
}

TEST(StoreIntegrityTest, VerifyFlagsRowsWhoseBytesColumnIsWrong) {
  TempDir tmp;
  auto store = open_store(tmp.path());
  for (const char* k : {"x", "y", "z"}) ASSERT_TRUE(store->put(make_entry(k, 1500)));
  raw_exec(tmp.sub("cubins.sqlite3"), "UPDATE entries SET bytes = 1 WHERE key = 'y'");
  VerifyReport r = store->verify(false);
  EXPECT_EQ(r.checked, 3);
  EXPECT_EQ(r.bad_keys, std::vector<std::string>{"y"});
  EXPECT_TRUE(r.integrity_ok);
  store->verify(true);
  r = store->verify(false);
  EXPECT_EQ(r.checked, 2);
  EXPECT_EQ(r.bad, 0);
}

// A damaged file can hold a checksum or a key as a BLOB, which a bound text never equals:
// verify's repair, get's removal and gc must still find those rows (found by the fuzzer).
TEST(StoreIntegrityTest, RowsWithBlobTypedChecksumOrKeyAreRemovedAndEvicted) {
  TempDir tmp;
  auto store = open_store(tmp.path());
  for (const char* k : {"x", "y", "z", "w"}) ASSERT_TRUE(store->put(make_entry(k, 1500)));
  const std::string db = tmp.sub("cubins.sqlite3");
  raw_exec(db, "UPDATE entries SET checksum = CAST('814d02f9' AS BLOB) WHERE key = 'x'");
  raw_exec(db, "UPDATE entries SET checksum = CAST(checksum AS BLOB), key = CAST(key AS BLOB) "
               "WHERE key = 'y'");
  raw_exec(db, "UPDATE entries SET checksum = CAST('0' AS BLOB) WHERE key = 'z'");
  EXPECT_FALSE(store->get("z").has_value()) << "a bad checksum is a miss";
  EXPECT_EQ(raw_int(db, "SELECT count(*) FROM entries WHERE key = 'z'"), 0) << "get removes it";
  VerifyReport r = store->verify(true);
  EXPECT_EQ(r.bad_keys, std::vector<std::string>{"x"});
  r = store->verify(false);
  EXPECT_EQ(r.bad, 0);
  EXPECT_EQ(r.checked, 2);
  // The BLOB-keyed row "y" passes its checksum (it reads back as text) but no text key
  // finds it: gc's eviction goes by rowid, so the cap still holds.
  EXPECT_EQ(store->gc(0), 2);
  EXPECT_EQ(raw_int(db, "SELECT count(*) FROM entries"), 0);
}

// The migrations up to `version` alone (its SQL run by hand, as an older library left the file),
// with one row in that layout whose checksum this library never accepts.
void make_old_store(const std::string& db, int version) {
  const auto& migrations = schema_migrations();
  std::string sql;
  for (int v = 1; v <= version; ++v) {
    ASSERT_EQ(std::atoi(migrations[v - 1].file), v);
    sql += std::string(migrations[v - 1].sql) + ";";
  }
  raw_exec(db, sql + "PRAGMA user_version = " + std::to_string(version) + ";");
  raw_exec(db, "INSERT INTO entries (key, name, arch, cubin, ptx, meta_json, checksum, bytes, "
               "created_us, last_used_us) VALUES ('old', 'n', 'sm_90a', X'0102', X'03', "
               "'{\"log\":5}', '00000000000000000000000000000000', 3, 1, 1)");
}

// Rows of schema 001 have checksums that do not cover the metadata; rows of 002 carry the
// checksum that covered the PTX itself, in a table whose PTX came before the metadata: the
// upgrade drops them (a recompile), it never quarantines or fails, and the file stays ours.
TEST(StoreIntegrityTest, OlderStoresAreUpgradedAndTheirRowsAreMisses) {
  const auto& migrations = schema_migrations();
  ASSERT_GE(migrations.size(), 3u);
  for (int version : {1, 2}) {
    TempDir tmp;
    const std::string db = tmp.sub("cubins.sqlite3");
    make_old_store(db, version);
    auto store = open_store(tmp.path());
    auto st = store->stats();
    EXPECT_FALSE(st.in_memory) << st.note;
    EXPECT_EQ(st.note.find("quarantined"), std::string::npos) << st.note;
    EXPECT_EQ(st.entries, 0) << version;
    EXPECT_FALSE(store->get("old").has_value());
    EXPECT_TRUE(store->put(make_entry("new", 100)));
    EXPECT_TRUE(store->get("new", Blobs::kCubin).has_value());
    EXPECT_EQ(raw_int(db, "PRAGMA user_version"), std::atoi(migrations.back().file));
  }
}

// An older library's export as a bundle: refused, naming its schema.
TEST(StoreIntegrityTest, BundlesOfAnOlderSchemaAreRefusedByName) {
  TempDir tmp;
  auto store = open_store(tmp.path());
  const std::string bundle = tmp.sub("old-bundle.sqlite3");
  make_old_store(bundle, 2);
  try {
    store->import_from(bundle);
    ADD_FAILURE() << "imported a schema 2 bundle";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kStore);
    EXPECT_NE(std::string(e.what()).find("schema 2"), std::string::npos) << e.what();
  }
}

void expect_export_refused(CubinStore& store, const std::string& target) {
  try {
    store.export_to(target);
    ADD_FAILURE() << "exported onto " << target;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find(target), std::string::npos) << e.what();
  }
}

TEST(StoreIntegrityTest, ExportNeverReplacesALiveDatabase) {
  TempDir tmp;
  auto store = open_store(tmp.sub("live"));
  ASSERT_TRUE(store->put(make_entry("x", 4000)));
  const std::string live = tmp.sub("live/cubins.sqlite3");
  ASSERT_EQ(link(live.c_str(), tmp.sub("alias.sqlite3").c_str()), 0);
  expect_export_refused(*store, live);
  expect_export_refused(*store, tmp.sub("live/./cubins.sqlite3"));
  expect_export_refused(*store, tmp.sub("alias.sqlite3"));  // the same inode by another name
  // Another process's live store: its -wal and -shm sit beside it.
  auto other = open_store(tmp.sub("other"));
  ASSERT_TRUE(other->put(make_entry("o", 100)));
  expect_export_refused(*store, tmp.sub("other/cubins.sqlite3"));
  std::ofstream(tmp.sub("stale.sqlite3-wal")) << "left by a crash";
  expect_export_refused(*store, tmp.sub("stale.sqlite3"));
  EXPECT_TRUE(other->get("o").has_value());
  auto got = store->get("x");
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->cubin, make_entry("x", 4000).cubin);
  EXPECT_TRUE(store->verify(false).integrity_ok);
  EXPECT_EQ(store->export_to(tmp.sub("bundle.sqlite3")), 1) << "an ordinary target still works";
}

}  // namespace
}  // namespace attnjit::store
