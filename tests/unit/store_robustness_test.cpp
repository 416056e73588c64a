// Tests of src/store/ under stress: many processes, kill -9, fork, corrupt files, read-only locations.
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spdlog/sinks/ostream_sink.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/child_process.hpp"
#include "common/log_capture.hpp"
#include "common/store_fixtures.hpp"
#include "common/temp_dir.hpp"
#include "attnjit/error.hpp"
#include "store/cubin_store.hpp"
#include "util/log.hpp"

namespace attnjit::store {
namespace {

using fixtures::make_entry;
using fixtures::open_store;

namespace fs = std::filesystem;

const std::string kWorker = std::string(ATTNJIT_TEST_TOOLS_DIR) + "/store_worker";

using TempDir = ::attnjit::testing::TempDir;

using ::attnjit::testing::LogCapture;

using ::attnjit::testing::spawn;
using ::attnjit::testing::wait_exit_code;
bool wait_ready(int fd) { return ::attnjit::testing::wait_first_byte(fd); }  // the worker's first committed put

std::vector<std::string> files_containing(const std::string& dir, const std::string& needle) {
  std::vector<std::string> out;
  for (auto& p : fs::directory_iterator(dir)) {
    std::string name = p.path().filename().string();
    if (name.find(needle) != std::string::npos) out.push_back(name);
  }
  return out;
}

// The quarantined db files (their -wal/-shm, when present, sit beside them).
std::vector<std::string> quarantined_dbs(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& name : files_containing(dir, "cubins.sqlite3.corrupt-")) {
    auto ends_with = [&](const std::string& s) {
      return name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
    };
    if (!ends_with("-wal") && !ends_with("-shm") && !ends_with("-journal")) out.push_back(name);
  }
  return out;
}

// --- many processes -------------------------------------------------------------

TEST(StoreProcessTest, EightProcessesOfFourThreadsAgreeByteForByte) {
  TempDir tmp;
  const std::string dir = tmp.sub("cache");
  std::vector<pid_t> workers;
  for (int i = 0; i < 8; ++i) {
    workers.push_back(spawn({kWorker, "mixed", dir, "4", "300", "48", std::to_string(i + 1)}));
  }
  for (pid_t pid : workers) EXPECT_EQ(wait_exit_code(pid), 0) << "worker " << pid;
  EXPECT_EQ(wait_exit_code(spawn({kWorker, "check", dir})), 0);
  auto store = open_store(dir);
  auto st = store->stats();
  EXPECT_FALSE(st.in_memory) << st.note;
  EXPECT_GT(st.entries, 0);
  EXPECT_LE(st.entries, 48);
  EXPECT_EQ(st.puts, st.entries) << "each key was inserted exactly once";
  auto report = store->verify(false);
  EXPECT_TRUE(report.integrity_ok);
  EXPECT_EQ(report.bad, 0);
  EXPECT_TRUE(files_containing(dir, "corrupt").empty());
}

TEST(StoreProcessTest, KillNineWhileWritingLeavesAConsistentStore) {
  TempDir tmp;
  const std::string dir = tmp.sub("cache");
  std::mt19937 rng(12345);
  std::uniform_int_distribution<int> delay_ms(2, 50);
  for (int i = 0; i < 30; ++i) {
    // Two writers of 256 KiB blobs with a 16 MiB cap, so eviction runs too.
    // Each kill lands after the writer's first commit, however slow the machine, so the
    // store always holds rows by the end and the kill cuts into a later write.
    int ready_a = -1, ready_b = -1;
    pid_t a = spawn({kWorker, "writer", dir, "262144", std::to_string(16 << 20)}, &ready_a);
    pid_t b = spawn({kWorker, "writer", dir, "262144", std::to_string(16 << 20)}, &ready_b);
    EXPECT_TRUE(wait_ready(ready_a)) << "writer a never committed";
    EXPECT_TRUE(wait_ready(ready_b)) << "writer b never committed";
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(rng)));
    kill(a, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(rng) / 4));
    kill(b, SIGKILL);
    EXPECT_EQ(wait_exit_code(a), 128 + SIGKILL);
    EXPECT_EQ(wait_exit_code(b), 128 + SIGKILL);
  }
  {
    auto store = open_store(dir);
    auto st = store->stats();
    EXPECT_FALSE(st.in_memory) << st.note;
    EXPECT_GT(st.entries, 0);
    auto report = store->verify(false);
    EXPECT_TRUE(report.integrity_ok);
    EXPECT_EQ(report.bad, 0);
    EXPECT_EQ(report.checked, st.entries);
    EXPECT_TRUE(files_containing(dir, "corrupt").empty());
    EXPECT_TRUE(files_containing(dir, ".tmp-").empty()) << "temp files of dead writers are swept";
  }
  EXPECT_EQ(wait_exit_code(spawn({kWorker, "check", dir})), 0);
}

TEST(StoreProcessTest, ForkedChildOpensItsOwnConnection) {
  TempDir tmp;
  auto store = open_store(tmp.path());
  ASSERT_TRUE(store->put(make_entry("parent", 5000)));
  pid_t pid = fork();
  if (pid == 0) {
    // Only async-signal-safe-ish work and _exit: no gtest assertions in the child.
    int code = 0;
    auto got = store->get("parent");
    if (!got || got->cubin != make_entry("parent", 5000).cubin) code |= 1;
    if (!store->put(make_entry("child", 6000))) code |= 2;
    if (!store->get("child")) code |= 4;
    if (store->stats().in_memory) code |= 8;
    _exit(code);
  }
  ASSERT_GT(pid, 0);
  EXPECT_EQ(wait_exit_code(pid), 0);
  auto got = store->get("child");
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->cubin, make_entry("child", 6000).cubin);
  EXPECT_TRUE(store->put(make_entry("after", 100)));
  EXPECT_TRUE(store->verify(false).integrity_ok);
  EXPECT_EQ(store->stats().entries, 3);
}

// --- corrupt files ----------------------------------------------------------------

// Opens a store on a dir whose cubins.sqlite3 was damaged: it must move the
// file aside once, start fresh and keep working.
void expect_quarantined_and_working(const std::string& dir) {
  LogCapture log;
  auto store = open_store(dir);
  auto st = store->stats();
  EXPECT_FALSE(st.in_memory) << st.note;
  EXPECT_NE(st.note.find("quarantined"), std::string::npos) << st.note;
  auto moved = quarantined_dbs(dir);
  ASSERT_EQ(moved.size(), 1u);
  EXPECT_EQ(log.count("is unusable"), 1) << log.text();
  EXPECT_EQ(st.entries, 0);
  ASSERT_TRUE(store->put(make_entry("fresh", 3000)));
  EXPECT_TRUE(store->get("fresh").has_value());
  EXPECT_TRUE(store->verify(false).integrity_ok);
  store.reset();
  // The fresh file is healthy: the next opener neither warns nor moves it.
  LogCapture again;
  auto reopened = open_store(dir);
  EXPECT_TRUE(reopened->get("fresh").has_value());
  EXPECT_EQ(again.count("is unusable"), 0) << again.text();
  EXPECT_EQ(quarantined_dbs(dir).size(), 1u);
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

TEST(StoreCorruptionTest, GarbageFileIsQuarantined) {
  TempDir tmp;
  std::string garbage(64 * 1024, '\0');
  std::mt19937 rng(7);
  for (char& c : garbage) c = static_cast<char>(rng());
  write_file(tmp.sub("cubins.sqlite3"), garbage);
  expect_quarantined_and_working(tmp.path());
}

TEST(StoreCorruptionTest, TruncatedDatabaseIsQuarantined) {
  TempDir tmp;
  {
    auto store = open_store(tmp.path());
    for (int i = 0; i < 20; ++i) ASSERT_TRUE(store->put(make_entry("t" + std::to_string(i), 50000)));
  }
  const std::string db = tmp.sub("cubins.sqlite3");
  ASSERT_FALSE(fs::exists(db + "-wal")) << "the last close checkpoints and removes the WAL";
  fs::resize_file(db, fs::file_size(db) / 2);
  expect_quarantined_and_working(tmp.path());
}

TEST(StoreCorruptionTest, ZeroLengthFileIsQuarantined) {
  TempDir tmp;
  write_file(tmp.sub("cubins.sqlite3"), "");
  expect_quarantined_and_working(tmp.path());
}

TEST(StoreCorruptionTest, TextFileIsQuarantined) {
  TempDir tmp;
  write_file(tmp.sub("cubins.sqlite3"), "# not a database\nkey = value\n");
  expect_quarantined_and_working(tmp.path());
}

TEST(StoreCorruptionTest, ForeignSqliteDatabaseIsQuarantined) {
  TempDir tmp;
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(tmp.sub("cubins.sqlite3").c_str(), &raw), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(raw, "CREATE TABLE entries (key TEXT, value TEXT);"
                              "INSERT INTO entries VALUES ('a', 'b');",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(raw);
  expect_quarantined_and_working(tmp.path());
  // The foreign file is kept intact under its quarantine name.
  auto moved = quarantined_dbs(tmp.path());
  ASSERT_EQ(moved.size(), 1u);
  ASSERT_EQ(sqlite3_open(tmp.sub(moved[0]).c_str(), &raw), SQLITE_OK);
  sqlite3_stmt* s = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(raw, "SELECT value FROM entries", -1, &s, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(s), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(s, 0)), "b");
  sqlite3_finalize(s);
  sqlite3_close(raw);
}

TEST(StoreCorruptionTest, DamageFoundDuringUseNeverThrows) {
  TempDir tmp;
  std::vector<std::string> keys;
  {
    auto store = open_store(tmp.path());
    for (int i = 0; i < 20; ++i) {
      keys.push_back("d" + std::to_string(i));
      ASSERT_TRUE(store->put(make_entry(keys.back(), 64 * 1024)));
    }
  }
  // Overwrite the middle of the file (blob overflow pages), keeping page 1.
  const std::string db = tmp.sub("cubins.sqlite3");
  const auto size = fs::file_size(db);
  {
    std::fstream f(db, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size / 4));
    std::mt19937 rng(99);
    for (size_t i = 0; i < size / 2; ++i) f.put(static_cast<char>(rng()));
  }
  auto store = open_store(tmp.path());
  int hits = 0, misses = 0;
  for (const auto& key : keys) {
    std::optional<Entry> got;
    EXPECT_NO_THROW(got = store->get(key));
    if (!got) {
      ++misses;
    } else {
      ++hits;
      EXPECT_EQ(got->cubin, make_entry(key, 64 * 1024).cubin) << key;
    }
  }
  EXPECT_GT(misses, 0) << "half of the file was overwritten";
  EXPECT_TRUE(store->put(make_entry("after", 1000)));
  EXPECT_TRUE(store->get("after").has_value());
  store->verify(true);
  auto report = store->verify(false);
  EXPECT_TRUE(report.integrity_ok);
  EXPECT_EQ(report.bad, 0);
  EXPECT_TRUE(store->get("after").has_value());
}

// Zeroes the root page of `object` (an index or table of the store file): the damage verify's
// integrity check finds and a repair salvages around.
void zero_root_page(const std::string& db, const std::string& object) {
  int64_t root = 0, page_size = 0;
  {
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open(db.c_str(), &raw), SQLITE_OK);
    sqlite3_stmt* s = nullptr;
    const std::string sql = "SELECT rootpage, (SELECT page_size FROM pragma_page_size) FROM sqlite_master WHERE name = '" +
                            object + "'";
    ASSERT_EQ(sqlite3_prepare_v2(raw, sql.c_str(), -1, &s, nullptr), SQLITE_OK);
    ASSERT_EQ(sqlite3_step(s), SQLITE_ROW);
    root = sqlite3_column_int64(s, 0);
    page_size = sqlite3_column_int64(s, 1);
    sqlite3_finalize(s);
    sqlite3_close(raw);
  }
  ASSERT_GT(root, 1);
  std::fstream f(db, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>((root - 1) * page_size));
  for (int64_t i = 0; i < page_size; ++i) f.put('\0');
}

TEST(StoreCorruptionTest, VerifyRepairSalvagesRowsFromADamagedIndex) {
  TempDir tmp;
  const std::string db = tmp.sub("cubins.sqlite3");
  {
    auto store = open_store(tmp.path());
    for (int i = 0; i < 10; ++i) ASSERT_TRUE(store->put(make_entry("s" + std::to_string(i), 9000)));
  }
  zero_root_page(db, "sqlite_autoindex_entries_1");  // the key index's only page: the table stays readable
  auto store = open_store(tmp.path());
  auto before = store->verify(/*repair=*/true);
  EXPECT_FALSE(before.integrity_ok);
  auto after = store->verify(false);
  EXPECT_TRUE(after.integrity_ok);
  EXPECT_EQ(after.checked, 10) << "every row was salvaged from the quarantined file";
  for (int i = 0; i < 10; ++i) {
    auto got = store->get("s" + std::to_string(i));
    ASSERT_TRUE(got.has_value()) << i;
    EXPECT_EQ(got->cubin, make_entry("s" + std::to_string(i), 9000).cubin);
  }
  EXPECT_EQ(quarantined_dbs(tmp.path()).size(), 1u);
}

// The usage table (hits, last use) damaged: a repair salvages every entry without it.
TEST(StoreCorruptionTest, VerifyRepairSalvagesEntriesPastADamagedUsageTable) {
  TempDir tmp;
  const std::string db = tmp.sub("cubins.sqlite3");
  {
    auto store = open_store(tmp.path());
    for (int i = 0; i < 10; ++i) ASSERT_TRUE(store->put(make_entry("u" + std::to_string(i), 9000)));
  }
  zero_root_page(db, "usage");
  auto store = open_store(tmp.path());
  EXPECT_FALSE(store->verify(/*repair=*/true).integrity_ok);
  auto after = store->verify(false);
  EXPECT_TRUE(after.integrity_ok);
  EXPECT_EQ(after.checked, 10);
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(store->get("u" + std::to_string(i), Blobs::kCubin).has_value()) << i;
}

TEST(StoreCorruptionTest, ReplacedFileIsReopenedWithoutTouchingTheNewOne) {
  TempDir tmp;
  const std::string db = tmp.sub("cubins.sqlite3");
  auto old_user = open_store(tmp.path());
  ASSERT_TRUE(old_user->put(make_entry("old", 1000)));
  // What another process's quarantine does: move the whole set aside.
  for (const char* suffix : {"", "-wal", "-shm"}) {
    if (fs::exists(db + suffix)) fs::rename(db + suffix, db + ".moved" + suffix);
  }
  auto new_user = open_store(tmp.path());
  ASSERT_TRUE(new_user->put(make_entry("new", 1000)));  // lives in the new WAL for now
  // The old connection notices, and closing it must not delete the new -wal/-shm.
  EXPECT_FALSE(old_user->get("old").has_value());
  EXPECT_TRUE(old_user->get("new").has_value());
  old_user.reset();
  EXPECT_TRUE(fs::exists(db + "-wal"));
  EXPECT_TRUE(fs::exists(db + "-shm"));
  auto third = open_store(tmp.path());
  EXPECT_TRUE(third->get("new").has_value());
  EXPECT_TRUE(third->verify(false).integrity_ok);
}

// --- read-only locations --------------------------------------------------------

void expect_memory_store_works(CubinStore& store, const std::string& why_fragment) {
  auto st = store.stats();
  EXPECT_TRUE(st.in_memory);
  EXPECT_NE(st.note.find(why_fragment), std::string::npos) << st.note;
  EXPECT_EQ(store.path(), ":memory:");
  ASSERT_TRUE(store.put(make_entry("mem", 4000)));
  auto got = store.get("mem");
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->cubin, make_entry("mem", 4000).cubin);
  EXPECT_EQ(store.stats().entries, 1);
  EXPECT_TRUE(store.verify(false).integrity_ok);
}

TEST(StoreReadOnlyTest, FolderUnderARegularFileFallsBackToMemory) {
  TempDir tmp;
  write_file(tmp.sub("plainfile"), "x");
  auto store = open_store(tmp.sub("plainfile/cache"));  // cannot be created, even by root
  expect_memory_store_works(*store, "plainfile/cache");
}

TEST(StoreReadOnlyTest, FolderUnderProcFallsBackToMemory) {
  auto store = open_store("/proc/self/attnjit-cache");
  expect_memory_store_works(*store, "/proc/self/attnjit-cache");
}

TEST(StoreReadOnlyTest, ReadOnlyOptionServesTheFileAndKeepsNewEntriesInMemory) {
  TempDir tmp;
  {
    auto store = open_store(tmp.path());
    ASSERT_TRUE(store->put(make_entry("shipped", 8000)));
  }
  StoreOptions options;
  options.dir = tmp.path();
  options.read_only = true;
  auto store = CubinStore::open(options);
  auto st = store->stats();
  EXPECT_TRUE(st.in_memory);
  EXPECT_NE(st.note.find("read-only"), std::string::npos) << st.note;
  auto shipped = store->get("shipped");
  ASSERT_TRUE(shipped.has_value());
  EXPECT_EQ(shipped->cubin, make_entry("shipped", 8000).cubin);
  EXPECT_FALSE(store->put(make_entry("shipped", 8000))) << "already served by the file";
  EXPECT_TRUE(store->put(make_entry("local", 1000)));
  EXPECT_TRUE(store->get("local").has_value());
  EXPECT_EQ(store->stats().entries, 2);
  EXPECT_EQ(store->list().size(), 2u);
  const std::string bundle = tmp.sub("both.sqlite3");
  EXPECT_EQ(store->export_to(bundle), 2);
  store.reset();
  auto writable = open_store(tmp.path());
  EXPECT_FALSE(writable->contains("local")) << "the file was never written";
  EXPECT_EQ(writable->import_from(bundle), 1);
}

// The genuine thing: a 0500 folder, and a 0400 db file in a writable folder.
// Returns "" on success, else what went wrong (runs in a child under root).
std::string check_chmod_read_only(const std::string& base) {
  const std::string dir = base + "/ro";
  {
    auto store = open_store(dir);
    if (store->stats().in_memory) return "writable folder opened in memory: " + store->stats().note;
    if (!store->put(make_entry("kept", 7000))) return "put failed";
  }
  if (chmod(dir.c_str(), 0500) != 0) return "chmod failed";
  {
    auto store = open_store(dir);
    auto st = store->stats();
    if (!st.in_memory) return "0500 folder was opened for writing";
    if (st.note.find("not writable") == std::string::npos) return "note: " + st.note;
    auto got = store->get("kept");
    if (!got || got->cubin != make_entry("kept", 7000).cubin) return "entry unreadable: " + st.note;
    if (!store->put(make_entry("new", 100)) || !store->get("new")) return "memory put failed";
  }
  chmod(dir.c_str(), 0700);
  const std::string db = dir + "/cubins.sqlite3";
  if (chmod(db.c_str(), 0400) != 0) return "chmod db failed";
  {
    auto store = open_store(dir);
    auto st = store->stats();
    if (!st.in_memory) return "0400 db was opened for writing";
    if (!store->get("kept")) return "0400 db unreadable: " + st.note;
    if (!store->put(make_entry("new2", 100)) || !store->get("new2")) return "memory put failed (2)";
  }
  chmod(db.c_str(), 0600);
  auto store = open_store(dir);
  if (store->contains("new") || store->contains("new2")) return "the read-only file was written";
  return "";
}

TEST(StoreReadOnlyTest, ChmodReadOnlyFolderAndFile) {
  TempDir tmp;
  if (geteuid() != 0) {
    EXPECT_EQ(check_chmod_read_only(tmp.path()), "");
    return;
  }
  // Root ignores permission bits: run the scenario as nobody in a child.
  const uid_t nobody = 65534;
  if (chown(tmp.path().c_str(), nobody, nobody) != 0) GTEST_SKIP() << "cannot chown to nobody";
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    std::string result;
    if (setgroups(0, nullptr) != 0 || setgid(nobody) != 0 || setuid(nobody) != 0) {
      _exit(77);  // no CAP_SETUID here (e.g. a user namespace): skip
    } else {
      try {
        result = check_chmod_read_only(tmp.path());
      } catch (const std::exception& e) {
        result = std::string("exception: ") + e.what();
      }
    }
    if (!result.empty() && write(fds[1], result.data(), result.size()) < 0) _exit(3);
    _exit(result.empty() ? 0 : 1);
  }
  close(fds[1]);
  std::string message;
  char buf[512];
  for (ssize_t n; (n = read(fds[0], buf, sizeof(buf))) > 0;) message.append(buf, n);
  close(fds[0]);
  const int code = wait_exit_code(pid);
  if (code == 77) GTEST_SKIP() << "cannot become nobody";
  EXPECT_EQ(code, 0) << message;
}

}  // namespace
}  // namespace attnjit::store

namespace attnjit::store {
namespace {

// gc keeps the newest quarantined sets for a post-mortem and deletes the rest
// (each set: the db and its -wal/-shm), never touching the live store.
TEST(StoreCorruptionTest, GcPrunesOldQuarantinedSets) {
  ::attnjit::testing::TempDir tmp;
  {
    auto store = CubinStore::open(StoreOptions{tmp.path()});
    ASSERT_TRUE(store->put(Entry{"live", "n", "sm_90a", "cubin", "", "{}", 1.0}));
  }
  const std::string db = tmp.sub("cubins.sqlite3");
  for (int t = 1; t <= 5; ++t) {
    const std::string base = db + ".corrupt-" + std::to_string(1000 + t) + "-42";
    std::ofstream(base) << "old";
    std::ofstream(base + "-wal") << "old";
  }
  auto store = CubinStore::open(StoreOptions{tmp.path()});
  store->gc(int64_t(1) << 40);
  int sets = 0, wals = 0;
  for (const auto& e : std::filesystem::directory_iterator(tmp.path())) {
    const std::string name = e.path().filename().string();
    if (name.find(".corrupt-") == std::string::npos) continue;
    (name.size() > 4 && name.compare(name.size() - 4, 4, "-wal") == 0 ? wals : sets) += 1;
  }
  EXPECT_EQ(sets, 3);
  EXPECT_EQ(wals, 3);
  EXPECT_TRUE(std::filesystem::exists(db + ".corrupt-1005-42"));  // the newest stay
  EXPECT_FALSE(std::filesystem::exists(db + ".corrupt-1001-42"));
  EXPECT_TRUE(store->get("live").has_value());
}

}  // namespace
}  // namespace attnjit::store
