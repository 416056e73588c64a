// Tests of src/store/: the API behaviour of the SQLite cubin store (one process).
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "common/env_guard.hpp"
#include "common/log_capture.hpp"
#include "common/store_fixtures.hpp"
#include "common/temp_dir.hpp"
#include "attnjit/error.hpp"
#include "store/cubin_store.hpp"
#include "store/schema.hpp"
#include "util/log.hpp"

namespace attnjit::store {
namespace {

using fixtures::make_entry;
using fixtures::open_store;

namespace fs = std::filesystem;

using TempDir = ::attnjit::testing::TempDir;

class RawDb {
 public:
  explicit RawDb(const std::string& path) { EXPECT_EQ(sqlite3_open(path.c_str(), &db_), SQLITE_OK); }
  ~RawDb() { sqlite3_close(db_); }
  void exec(const std::string& sql) {
    char* err = nullptr;
    EXPECT_EQ(sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK)
        << sql << ": " << (err ? err : "");
    sqlite3_free(err);
  }
  int64_t query_int(const std::string& sql) {
    sqlite3_stmt* s = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db_, sql.c_str(), -1, &s, nullptr), SQLITE_OK) << sql;
    int64_t v = sqlite3_step(s) == SQLITE_ROW ? sqlite3_column_int64(s, 0) : -1;
    sqlite3_finalize(s);
    return v;
  }
  std::string query_text(const std::string& sql) {
    sqlite3_stmt* s = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db_, sql.c_str(), -1, &s, nullptr), SQLITE_OK) << sql;
    std::string v;
    if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_text(s, 0)) {
      v = reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
    }
    sqlite3_finalize(s);
    return v;
  }

 private:
  sqlite3* db_ = nullptr;
};

int file_mode(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return -1;
  return static_cast<int>(st.st_mode & 07777);
}

using ::attnjit::testing::LogCapture;

using testing::EnvGuard;

TEST(StoreTest, PutGetRoundtripIsByteIdentical) {
  TempDir tmp;
  auto store = open_store(tmp.path());
  EXPECT_FALSE(store->stats().in_memory) << store->stats().note;
  EXPECT_EQ(store->path(), tmp.sub("cubins.sqlite3"));

  Entry big = make_entry("big", 1 << 20, 3000);
  big.cubin[7] = '\0';  // embedded zeros must survive
  Entry empty_ptx = make_entry("noptx", 100, 0);
  EXPECT_TRUE(store->put(big));
  EXPECT_TRUE(store->put(empty_ptx));
  EXPECT_FALSE(store->put(big)) << "a second put of the same key inserts nothing";

  for (const Entry& want : {big, empty_ptx}) {
    auto got = store->get(want.key);
    ASSERT_TRUE(got.has_value()) << want.key;
    EXPECT_EQ(got->key, want.key);
    EXPECT_EQ(got->name, want.name);
    EXPECT_EQ(got->arch, want.arch);
    EXPECT_EQ(got->cubin, want.cubin);
    EXPECT_EQ(got->ptx, want.ptx);
    EXPECT_EQ(got->meta_json, want.meta_json);
    EXPECT_EQ(got->compile_ms, want.compile_ms);
  }
  EXPECT_TRUE(store->contains("big"));
  EXPECT_FALSE(store->contains("nope"));
  EXPECT_FALSE(store->get("nope").has_value());

  // A second object (another connection) sees the same bytes.
  store.reset();
  auto again = open_store(tmp.path());
  auto got = again->get("big");
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->cubin, big.cubin);
}

TEST(StoreTest, ChecksumMismatchIsDetectedAndRemoved) {
  TempDir tmp;
  auto store = open_store(tmp.path());
  ASSERT_TRUE(store->put(make_entry("victim", 4096)));
  ASSERT_TRUE(store->put(make_entry("bystander", 4096)));
  {
    RawDb raw(tmp.sub("cubins.sqlite3"));
    raw.exec("UPDATE entries SET cubin = zeroblob(4096) WHERE key = 'victim'");
  }
  LogCapture log;
  EXPECT_FALSE(store->get("victim").has_value());
  EXPECT_NE(log.text().find("checksum mismatch"), std::string::npos) << log.text();
  {
    RawDb raw(tmp.sub("cubins.sqlite3"));
    EXPECT_EQ(raw.query_int("SELECT count(*) FROM entries WHERE key = 'victim'"), 0);
  }
  EXPECT_TRUE(store->get("bystander").has_value());
  auto st = store->stats();
  EXPECT_EQ(st.misses, 1);
  EXPECT_EQ(st.hits, 1);
  EXPECT_EQ(st.entries, 1);
  // The key can be stored again after the bad row is gone.
  EXPECT_TRUE(store->put(make_entry("victim", 4096)));
  EXPECT_TRUE(store->get("victim").has_value());
}

// A launch reads the cubin alone: every column it returns is verified (the row checksum
// covers the PTX through its digest), the PTX is neither read nor checked, and its length
// is still known. A whole read checks the PTX against that digest.
TEST(StoreTest, CubinOnlyReadsAreVerifiedWithoutThePtx) {
  TempDir tmp;
  auto store = open_store(tmp.path());
  const Entry want = make_entry("k", 5000, 70000);
  ASSERT_TRUE(store->put(want));
  auto got = store->get("k", Blobs::kCubin);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->cubin, want.cubin);
  EXPECT_EQ(got->meta_json, want.meta_json);
  EXPECT_EQ(got->name, want.name);
  EXPECT_EQ(got->compile_ms, want.compile_ms);
  EXPECT_TRUE(got->ptx.empty());
  EXPECT_EQ(got->ptx_bytes, 70000);
  {
    RawDb raw(tmp.sub("cubins.sqlite3"));
    raw.exec("UPDATE entries SET ptx = zeroblob(70000) WHERE key = 'k'");
  }
  got = store->get("k", Blobs::kCubin);
  ASSERT_TRUE(got.has_value()) << "the cubin and its metadata are intact";
  EXPECT_FALSE(store->get("k", Blobs::kCubinAndPtx).has_value()) << "the PTX fails its digest";
  EXPECT_FALSE(store->contains("k")) << "and the whole read removed the row";

  // A damaged cubin, metadata or PTX digest fails the cubin-only read.
  for (const char* damage : {"cubin = zeroblob(5000)", "meta_json = '{}'", "ptx_checksum = 'x'"}) {
    ASSERT_TRUE(store->put(want));
    {
      RawDb raw(tmp.sub("cubins.sqlite3"));
      raw.exec(std::string("UPDATE entries SET ") + damage + " WHERE key = 'k'");
    }
    EXPECT_FALSE(store->get("k", Blobs::kCubin).has_value()) << damage;
    EXPECT_FALSE(store->contains("k")) << damage;
  }
}

TEST(StoreTest, MigrationsSetUserVersionAndWalMode) {
  TempDir tmp;
  open_store(tmp.path());
  int newest = 0;
  for (const Migration& m : schema_migrations()) newest = std::max(newest, std::atoi(m.file));
  ASSERT_GE(newest, 1);
  RawDb raw(tmp.sub("cubins.sqlite3"));
  EXPECT_EQ(raw.query_int("PRAGMA user_version"), newest);
  EXPECT_EQ(raw.query_int("PRAGMA application_id"), 1096044106);  // 'ATNJ'
  EXPECT_EQ(raw.query_text("PRAGMA journal_mode"), "wal");
  EXPECT_EQ(raw.query_int("SELECT count(*) FROM stats"), 1);
}

TEST(StoreTest, ExistingDbWithOurIdButNoTablesIsMigrated) {
  TempDir tmp;
  {
    RawDb raw(tmp.sub("cubins.sqlite3"));
    raw.exec("PRAGMA application_id = 1096044106");
  }
  auto store = open_store(tmp.path());
  auto st = store->stats();
  EXPECT_FALSE(st.in_memory) << st.note;
  EXPECT_TRUE(store->put(make_entry("a", 10)));
  RawDb raw(tmp.sub("cubins.sqlite3"));
  EXPECT_GE(raw.query_int("PRAGMA user_version"), 1);
}

TEST(StoreTest, NewerSchemaVersionIsReadOnlyNotQuarantined) {
  TempDir tmp;
  {
    auto store = open_store(tmp.path());
    ASSERT_TRUE(store->put(make_entry("old", 1000)));
  }
  {
    RawDb raw(tmp.sub("cubins.sqlite3"));
    raw.exec("PRAGMA user_version = 999");
  }
  auto store = open_store(tmp.path());
  auto st = store->stats();
  EXPECT_TRUE(st.in_memory);
  EXPECT_NE(st.note.find("newer"), std::string::npos) << st.note;
  EXPECT_TRUE(store->get("old").has_value()) << "served read-only from the newer file";
  EXPECT_TRUE(store->put(make_entry("new", 1000)));
  EXPECT_TRUE(store->get("new").has_value());
  EXPECT_EQ(store->stats().entries, 2);
  store.reset();
  RawDb raw(tmp.sub("cubins.sqlite3"));
  EXPECT_EQ(raw.query_int("PRAGMA user_version"), 999);
  EXPECT_EQ(raw.query_int("SELECT count(*) FROM entries"), 1) << "the file was not written";
  for (auto& p : fs::directory_iterator(tmp.path())) {
    EXPECT_EQ(p.path().filename().string().find("corrupt"), std::string::npos);
  }
}

TEST(StoreTest, ResolveCacheDirFollowsEnvironment) {
  EnvGuard g1("ATTNJIT_CACHE_DIR"), g2("XDG_CACHE_HOME"), g3("HOME");
  setenv("ATTNJIT_CACHE_DIR", "/x/explicit", 1);
  setenv("XDG_CACHE_HOME", "/x/xdg", 1);
  setenv("HOME", "/x/home", 1);
  EXPECT_EQ(resolve_cache_dir(), "/x/explicit");
  unsetenv("ATTNJIT_CACHE_DIR");
  EXPECT_EQ(resolve_cache_dir(), "/x/xdg/attnjit");
  setenv("XDG_CACHE_HOME", "relative/ignored", 1);  // XDG: relative paths are invalid
  EXPECT_EQ(resolve_cache_dir(), "/x/home/.cache/attnjit");
  unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(resolve_cache_dir(), "/x/home/.cache/attnjit");
  setenv("ATTNJIT_CACHE_DIR", "", 1);  // empty counts as unset
  EXPECT_EQ(resolve_cache_dir(), "/x/home/.cache/attnjit");
}

TEST(StoreTest, EmptyDirOptionUsesResolvedFolder) {
  TempDir tmp;
  EnvGuard guard("ATTNJIT_CACHE_DIR");
  setenv("ATTNJIT_CACHE_DIR", tmp.sub("from-env").c_str(), 1);
  auto store = CubinStore::open(StoreOptions{});
  EXPECT_EQ(store->path(), tmp.sub("from-env/cubins.sqlite3"));
  EXPECT_TRUE(fs::exists(tmp.sub("from-env/cubins.sqlite3")));
}

TEST(StoreTest, FolderIs0700AndFilesAre0600WhateverTheUmask) {
  TempDir tmp;
  mode_t old_umask = umask(0);  // the most permissive umask: modes must not depend on it
  {
    const std::string dir = tmp.sub("a/b/cache");
    auto store = open_store(dir);
    ASSERT_TRUE(store->put(make_entry("k", 1000)));
    ASSERT_TRUE(store->get("k").has_value());
    EXPECT_EQ(file_mode(dir), 0700);
    EXPECT_EQ(file_mode(dir + "/cubins.sqlite3"), 0600);
    ASSERT_TRUE(fs::exists(dir + "/cubins.sqlite3-wal"));
    EXPECT_EQ(file_mode(dir + "/cubins.sqlite3-wal"), 0600);
    EXPECT_EQ(file_mode(dir + "/cubins.sqlite3-shm"), 0600);
    for (auto& p : fs::directory_iterator(dir)) {
      EXPECT_EQ(file_mode(p.path().string()), 0600) << p.path();
    }
    const std::string bundle = tmp.sub("bundle.sqlite3");
    EXPECT_EQ(store->export_to(bundle), 1);
    EXPECT_EQ(file_mode(bundle), 0600);
  }
  umask(old_umask);
}

TEST(StoreTest, RefusesFolderThatOthersCanWrite) {
  TempDir tmp;
  for (mode_t mode : {0777, 0770, 0702}) {
    const std::string dir = tmp.sub("shared" + std::to_string(mode));
    ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
    ASSERT_EQ(chmod(dir.c_str(), mode), 0);
    try {
      open_store(dir);
      ADD_FAILURE() << "opened a folder with mode " << std::oct << mode;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kStore);
      EXPECT_NE(std::string(e.what()).find(dir), std::string::npos) << e.what();
      char want[8];
      snprintf(want, sizeof(want), "%04o", static_cast<unsigned>(mode));
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(dir + "/cubins.sqlite3")) << "nothing is written there";
  }
}

TEST(StoreTest, RefusesFolderOwnedByAnotherUser) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to chown";
  TempDir tmp;
  const std::string dir = tmp.sub("theirs");
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(chown(dir.c_str(), 65534, 65534), 0);
  try {
    open_store(dir);
    ADD_FAILURE() << "opened a folder owned by uid 65534";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kStore);
    EXPECT_NE(std::string(e.what()).find("owned by uid 65534"), std::string::npos) << e.what();
  }
}

TEST(StoreTest, EvictsLeastRecentlyUsedAboveTheCap) {
  TempDir tmp;
  auto store = open_store(tmp.path(), /*max_bytes=*/3000);
  ASSERT_TRUE(store->put(make_entry("a", 1000, 0)));
  ASSERT_TRUE(store->put(make_entry("b", 1000, 0)));
  ASSERT_TRUE(store->put(make_entry("c", 1000, 0)));
  ASSERT_TRUE(store->get("a").has_value());  // a is now more recent than b and c
  ASSERT_TRUE(store->put(make_entry("d", 1000, 0)));
  EXPECT_TRUE(store->contains("a"));
  EXPECT_FALSE(store->contains("b")) << "b was the least recently used";
  EXPECT_TRUE(store->contains("c"));
  EXPECT_TRUE(store->contains("d"));
  auto st = store->stats();
  EXPECT_EQ(st.evictions, 1);
  EXPECT_EQ(st.total_bytes, 3000);

  // gc() to a smaller cap: c goes first, then a; d (newest) stays.
  EXPECT_EQ(store->gc(1500), 2);
  EXPECT_FALSE(store->contains("c"));
  EXPECT_FALSE(store->contains("a"));
  EXPECT_TRUE(store->contains("d"));
  EXPECT_EQ(store->stats().evictions, 3);
  EXPECT_EQ(store->gc(1500), 0);

  // An entry larger than the cap is still kept (it is the newest).
  ASSERT_TRUE(store->put(make_entry("huge", 5000, 0)));
  EXPECT_TRUE(store->contains("huge"));
  EXPECT_FALSE(store->contains("d"));
}

TEST(StoreTest, StatsCountHitsMissesPutsAcrossObjects) {
  TempDir tmp;
  auto one = open_store(tmp.path());
  auto two = open_store(tmp.path());
  Entry e = make_entry("k1", 2000, 100);
  e.compile_ms = 40;
  ASSERT_TRUE(one->put(e));
  e.key = "k2";
  e.compile_ms = 2;
  ASSERT_TRUE(two->put(e));
  EXPECT_FALSE(two->put(e));
  EXPECT_TRUE(one->get("k2").has_value());
  EXPECT_TRUE(two->get("k1").has_value());
  EXPECT_TRUE(two->get("k1").has_value());
  EXPECT_FALSE(one->get("missing").has_value());

  auto st = one->stats();
  EXPECT_EQ(st.entries, 2);
  EXPECT_EQ(st.total_bytes, 2 * 2100);
  EXPECT_EQ(st.puts, 2);
  EXPECT_EQ(st.hits, 3);
  EXPECT_EQ(st.misses, 1);
  EXPECT_EQ(st.evictions, 0);
  EXPECT_DOUBLE_EQ(st.compile_ms_total, 42.0);
  EXPECT_FALSE(st.in_memory);
  EXPECT_EQ(st.path, tmp.sub("cubins.sqlite3"));

  auto infos = two->list();
  ASSERT_EQ(infos.size(), 2u);
  for (const auto& info : infos) {
    EXPECT_EQ(info.cubin_bytes, 2000);
    EXPECT_EQ(info.ptx_bytes, 100);
    EXPECT_EQ(info.arch, "sm_90a");
    EXPECT_GT(info.created_unix, 1600000000);
    EXPECT_GE(info.last_used_unix, info.created_unix);
    EXPECT_EQ(info.hits, info.key == "k1" ? 2 : 1);
  }
}

TEST(StoreTest, VerifyFindsAndRepairsBadRows) {
  TempDir tmp;
  auto store = open_store(tmp.path());
  for (const char* k : {"x", "y", "z"}) ASSERT_TRUE(store->put(make_entry(k, 3000)));
  {
    RawDb raw(tmp.sub("cubins.sqlite3"));
    raw.exec("UPDATE entries SET ptx = X'00' WHERE key = 'y'");
  }
  VerifyReport r = store->verify(false);
  EXPECT_EQ(r.checked, 3);
  EXPECT_EQ(r.bad, 1);
  EXPECT_EQ(r.bad_keys, std::vector<std::string>{"y"});
  EXPECT_TRUE(r.integrity_ok);
  EXPECT_EQ(store->stats().entries, 3) << "verify(false) changes nothing";

  r = store->verify(true);
  EXPECT_EQ(r.bad, 1);
  EXPECT_EQ(store->stats().entries, 2);
  r = store->verify(false);
  EXPECT_EQ(r.checked, 2);
  EXPECT_EQ(r.bad, 0);
  EXPECT_TRUE(r.integrity_ok);
}

TEST(StoreTest, ExportImportRoundtrip) {
  TempDir tmp;
  auto src = open_store(tmp.sub("src"));
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(src->put(make_entry("e" + std::to_string(i), 5000 + i)));
  const std::string bundle = tmp.sub("bundle.sqlite3");
  {
    std::ofstream(bundle) << "an older file the export replaces";
  }
  EXPECT_EQ(src->export_to(bundle), 5);
  EXPECT_EQ(file_mode(bundle), 0600);
  for (auto& p : fs::directory_iterator(tmp.path())) {
    EXPECT_EQ(p.path().filename().string().find(".tmp-"), std::string::npos) << p.path();
  }

  auto dst = open_store(tmp.sub("dst"));
  EXPECT_EQ(dst->import_from(bundle), 5);
  EXPECT_EQ(dst->import_from(bundle), 0) << "INSERT OR IGNORE: nothing new the second time";
  for (int i = 0; i < 5; ++i) {
    const std::string key = "e" + std::to_string(i);
    auto a = src->get(key);
    auto b = dst->get(key);
    ASSERT_TRUE(a && b) << key;
    EXPECT_EQ(a->cubin, b->cubin);
    EXPECT_EQ(a->ptx, b->ptx);
    EXPECT_EQ(a->name, b->name);
    EXPECT_EQ(a->meta_json, b->meta_json);
  }
  // The bundle is itself a store file: a store opened on it works.
  fs::create_directories(tmp.sub("asdir"));
  fs::permissions(tmp.sub("asdir"), fs::perms::owner_all, fs::perm_options::replace);
  fs::copy_file(bundle, tmp.sub("asdir/cubins.sqlite3"));
  auto as_store = open_store(tmp.sub("asdir"));
  EXPECT_EQ(as_store->stats().entries, 5);
  EXPECT_FALSE(as_store->stats().in_memory) << as_store->stats().note;
}

TEST(StoreTest, ImportSkipsTamperedRows) {
  TempDir tmp;
  auto src = open_store(tmp.sub("src"));
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(src->put(make_entry("t" + std::to_string(i), 2000)));
  const std::string bundle = tmp.sub("bundle.sqlite3");
  ASSERT_EQ(src->export_to(bundle), 4);
  {
    RawDb raw(bundle);
    raw.exec("UPDATE entries SET cubin = randomblob(2000) WHERE key = 't1'");
    raw.exec("UPDATE entries SET key = 't9' WHERE key = 't2'");  // a blob moved to another key
  }
  auto dst = open_store(tmp.sub("dst"));
  EXPECT_EQ(dst->import_from(bundle), 2);
  EXPECT_TRUE(dst->contains("t0"));
  EXPECT_FALSE(dst->contains("t1"));
  EXPECT_FALSE(dst->contains("t9"));
  EXPECT_TRUE(dst->contains("t3"));
  EXPECT_EQ(dst->verify(false).bad, 0);
}

TEST(StoreTest, ImportRejectsFilesThatAreNotStores) {
  TempDir tmp;
  auto store = open_store(tmp.sub("s"));
  const std::string text = tmp.sub("notes.txt");
  std::ofstream(text) << "this is not a database, it is a text file with some words in it\n";
  const std::string foreign = tmp.sub("foreign.db");
  {
    RawDb raw(foreign);
    raw.exec("CREATE TABLE users (id INTEGER, name TEXT)");
  }
  const std::string missing = tmp.sub("missing.sqlite3");
  for (const std::string& file : {text, foreign, missing, tmp.path()}) {
    try {
      store->import_from(file);
      ADD_FAILURE() << "imported " << file;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kStore);
      EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(store->stats().entries, 0);
}

TEST(StoreTest, ClearRemovesEveryEntry) {
  TempDir tmp;
  auto store = open_store(tmp.path());
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(store->put(make_entry("c" + std::to_string(i), 20000)));
  EXPECT_EQ(store->stats().entries, 10);
  store->clear();
  auto st = store->stats();
  EXPECT_EQ(st.entries, 0);
  EXPECT_EQ(st.total_bytes, 0);
  EXPECT_TRUE(store->list().empty());
  EXPECT_FALSE(store->get("c1").has_value());
  EXPECT_TRUE(store->put(make_entry("c1", 100)));
  EXPECT_TRUE(store->get("c1").has_value());
}

}  // namespace
}  // namespace attnjit::store
