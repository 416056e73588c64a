// Tests of the store's trust rules (src/store/store_location.cpp, sqlite_store.cpp):
// a database file or side file that others could have written is never opened.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>

#include "common/store_fixtures.hpp"
#include "common/temp_dir.hpp"
#include "store/cubin_store.hpp"
#include "store/store_location.hpp"

namespace attnjit::store {
namespace {

using fixtures::make_entry;
using fixtures::open_store;
using ::attnjit::testing::TempDir;
namespace fs = std::filesystem;

constexpr uid_t kNobody = 65534;

// A valid store holding one entry ("poison"), in its own folder.
std::string make_store_file(const TempDir& tmp, const std::string& folder) {
  const std::string dir = tmp.sub(folder);
  {
    auto s = open_store(dir);
    EXPECT_TRUE(s->put(make_entry("poison", 512)));
  }
  return dir + "/" + kDbFileName;
}

// Opens `cache` and checks it refused its file: in memory, a note naming `what`,
// and none of the file's entries served.
void expect_refused(const std::string& cache, const std::string& what) {
  auto s = open_store(cache);
  const StoreStats st = s->stats();
  EXPECT_TRUE(st.in_memory) << st.note;
  EXPECT_NE(st.note.find("refusing the cache file"), std::string::npos) << st.note;
  EXPECT_NE(st.note.find(what), std::string::npos) << st.note;
  EXPECT_FALSE(s->get("poison").has_value()) << "served an entry from an untrusted file";
  EXPECT_FALSE(s->contains("poison"));
  // It keeps working from memory.
  EXPECT_TRUE(s->put(make_entry("fresh", 64)));
  EXPECT_TRUE(s->get("fresh").has_value());
}

TEST(StoreTrustTest, SymlinkedDbFileToAnotherUsersWorldWritableFileIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to chown";
  // The repro: a private cache folder whose db is a link into a
  // world-writable folder, to a 0666 file that another user owns.
  TempDir tmp("trust");
  const std::string target = make_store_file(tmp, "victim");
  const std::string world = tmp.sub("w");
  fs::create_directory(world);
  ASSERT_EQ(chmod(world.c_str(), 0777), 0);
  const std::string planted = world + "/db.sqlite3";
  fs::copy_file(target, planted);
  ASSERT_EQ(chmod(planted.c_str(), 0666), 0);
  ASSERT_EQ(chown(planted.c_str(), kNobody, kNobody), 0);
  const std::string cache = tmp.sub("c");
  ASSERT_EQ(mkdir(cache.c_str(), 0700), 0);
  fs::create_symlink("../w/db.sqlite3", cache + "/" + kDbFileName);

  expect_refused(cache, "symbolic link");
  // SQLite never opened the target: no -wal or -shm appeared beside it.
  EXPECT_FALSE(fs::exists(planted + "-wal"));
  EXPECT_FALSE(fs::exists(planted + "-shm"));
}

TEST(StoreTrustTest, SymlinkedDbFileIsRefusedEvenWhenTheTargetIsOurs) {
  TempDir tmp("trust");
  const std::string target = make_store_file(tmp, "other");
  const std::string cache = tmp.sub("c");
  ASSERT_EQ(mkdir(cache.c_str(), 0700), 0);
  fs::create_symlink(target, cache + "/" + kDbFileName);
  expect_refused(cache, "symbolic link");
}

TEST(StoreTrustTest, SymlinkedSideFilesAreRefused) {
  for (const char* suffix : {"-wal", "-shm", "-journal", ".lock"}) {
    SCOPED_TRACE(suffix);
    TempDir tmp("trust");
    const std::string db = make_store_file(tmp, "c");
    const std::string decoy = tmp.sub(std::string("decoy") + suffix);
    { std::FILE* f = std::fopen(decoy.c_str(), "w"); ASSERT_NE(f, nullptr); std::fclose(f); }
    fs::remove(db + suffix);
    fs::create_symlink(decoy, db + suffix);
    expect_refused(tmp.sub("c"), "symbolic link");
    EXPECT_EQ(fs::file_size(decoy), 0u) << "wrote through the link";
  }
}

TEST(StoreTrustTest, DbFileWritableByOthersIsRefused) {
  for (mode_t mode : {0666, 0620, 0602}) {
    SCOPED_TRACE(mode);
    TempDir tmp("trust");
    const std::string db = make_store_file(tmp, "c");
    ASSERT_EQ(chmod(db.c_str(), mode), 0);
    expect_refused(tmp.sub("c"), "writable by group or others");
  }
}

TEST(StoreTrustTest, WalWritableByOthersIsRefused) {
  TempDir tmp("trust");
  const std::string db = make_store_file(tmp, "c");
  const std::string wal = db + "-wal";
  { std::FILE* f = std::fopen(wal.c_str(), "a"); ASSERT_NE(f, nullptr); std::fclose(f); }
  ASSERT_EQ(chmod(wal.c_str(), 0666), 0);
  expect_refused(tmp.sub("c"), "-wal has mode 0666");
}

TEST(StoreTrustTest, DbFileOwnedByAnotherUserIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to chown";
  TempDir tmp("trust");
  const std::string db = make_store_file(tmp, "c");
  ASSERT_EQ(chown(db.c_str(), kNobody, kNobody), 0);
  expect_refused(tmp.sub("c"), "owned by uid 65534");
}

TEST(StoreTrustTest, DbPathThatIsNotARegularFileIsRefused) {
  TempDir tmp("trust");
  const std::string cache = tmp.sub("c");
  ASSERT_EQ(mkdir(cache.c_str(), 0700), 0);
  const std::string db = cache + "/" + kDbFileName;
  ASSERT_EQ(mkfifo(db.c_str(), 0600), 0);
  expect_refused(cache, "not a regular file");
  fs::remove(db);
  ASSERT_EQ(mkdir(db.c_str(), 0700), 0);
  expect_refused(cache, "not a regular file");
}

TEST(StoreTrustTest, ReadOnlyOpenAlsoRefusesAnUntrustedFile) {
  // The read-only path attaches the file: it must not attach an untrusted one.
  TempDir tmp("trust");
  const std::string target = make_store_file(tmp, "other");
  const std::string cache = tmp.sub("c");
  ASSERT_EQ(mkdir(cache.c_str(), 0700), 0);
  fs::create_symlink(target, cache + "/" + kDbFileName);
  StoreOptions options;
  options.dir = cache;
  options.read_only = true;
  auto s = CubinStore::open(options);
  EXPECT_TRUE(s->stats().in_memory);
  EXPECT_FALSE(s->get("poison").has_value());
}

TEST(StoreTrustTest, TrustedStoreStillOpensAndItsFilesArePrivate) {
  TempDir tmp("trust");
  const std::string db = make_store_file(tmp, "c");
  auto s = open_store(tmp.sub("c"));
  EXPECT_FALSE(s->stats().in_memory) << s->stats().note;
  EXPECT_TRUE(s->get("poison").has_value());
  for (const char* suffix : {"", "-wal", "-shm"}) {
    struct stat st {};
    if (lstat((db + suffix).c_str(), &st) != 0) continue;
    EXPECT_EQ(st.st_mode & 07777, 0600u) << suffix;
  }
}

TEST(StoreTrustTest, UntrustedFileReasonNamesEachCase) {
  TempDir tmp("trust");
  EXPECT_EQ(untrusted_file_reason(tmp.sub("absent")), "");
  const std::string f = tmp.sub("f");
  { std::FILE* fp = std::fopen(f.c_str(), "w"); ASSERT_NE(fp, nullptr); std::fclose(fp); }
  ASSERT_EQ(chmod(f.c_str(), 0600), 0);
  EXPECT_EQ(untrusted_file_reason(f), "");
  ASSERT_EQ(chmod(f.c_str(), 0660), 0);
  EXPECT_NE(untrusted_file_reason(f).find("writable by group or others"), std::string::npos);
  fs::create_symlink(f, tmp.sub("l"));
  EXPECT_NE(untrusted_file_reason(tmp.sub("l")).find("symbolic link"), std::string::npos);
}

}  // namespace
}  // namespace attnjit::store
