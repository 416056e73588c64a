// Tests of src/store/wal_check.cpp and SqliteStore::checkpoint: damage to the -wal that
// silently drops committed entries is reported; a crash's uncommitted tail is not.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "common/log_capture.hpp"
#include "common/store_fixtures.hpp"
#include "common/temp_dir.hpp"
#include "store/cubin_store.hpp"
#include "store/wal_check.hpp"

namespace attnjit::store {
namespace {

namespace fs = std::filesystem;
using fixtures::make_entry;
using fixtures::open_store;
using ::attnjit::testing::LogCapture;
using ::attnjit::testing::TempDir;

constexpr int kEntries = 12;

// A store whose entries sit only in its -wal: the files copied from `live` while a
// connection holds them open (closing the last connection would fold the -wal in).
std::string wal_only_copy(const TempDir& tmp, const std::string& name, int entry_bytes = 6000) {
  const std::string live = tmp.sub("live");
  auto store = open_store(live);
  for (int i = 0; i < kEntries; ++i) EXPECT_TRUE(store->put(make_entry("k" + std::to_string(i), entry_bytes)));
  const std::string copy = tmp.sub(name);
  fs::create_directory(copy);
  fs::permissions(copy, fs::perms::owner_all, fs::perm_options::replace);
  for (const char* suffix : {"", "-wal"})
    fs::copy_file(live + "/cubins.sqlite3" + suffix, copy + "/cubins.sqlite3" + suffix);
  EXPECT_GT(fs::file_size(copy + "/cubins.sqlite3-wal"), 32u) << "the entries are in the -wal";
  return copy;
}

// The -wal's page size (header bytes 8-11, big-endian).
uint32_t wal_page_size(const std::string& wal) {
  std::ifstream f(wal, std::ios::binary);
  unsigned char hdr[12];
  f.read(reinterpret_cast<char*>(hdr), sizeof hdr);
  return (uint32_t(hdr[8]) << 24) | (uint32_t(hdr[9]) << 16) | (uint32_t(hdr[10]) << 8) | hdr[11];
}

void flip_byte(const std::string& file, std::streamoff at) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(at);
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5a);
  f.seekp(at);
  f.write(&c, 1);
}

TEST(StoreWalTest, AnIntactWalIsNotReported) {
  TempDir tmp;
  const std::string copy = wal_only_copy(tmp, "copy");
  EXPECT_EQ(wal_damage(copy + "/cubins.sqlite3"), "");
  LogCapture log;
  auto store = open_store(copy);
  EXPECT_EQ(store->stats().entries, kEntries);
  EXPECT_TRUE(store->verify(false).problems.empty());
  EXPECT_EQ(log.count("damaged"), 0) << log.text();
}

TEST(StoreWalTest, AFlippedByteInAnEarlyFrameIsReportedWithAWarning) {
  TempDir tmp;
  const std::string copy = wal_only_copy(tmp, "copy");
  // Frame 0's page data: SQLite drops it and every commit after it.
  flip_byte(copy + "/cubins.sqlite3-wal", 32 + 24 + 200);
  EXPECT_NE(wal_damage(copy + "/cubins.sqlite3").find("frame 0"), std::string::npos);
  LogCapture log;
  auto store = open_store(copy);
  const auto st = store->stats();
  EXPECT_LT(st.entries, kEntries) << "SQLite ignored the frames after the damage";
  EXPECT_FALSE(st.in_memory) << st.note;
  EXPECT_NE(st.note.find("-wal is damaged"), std::string::npos) << st.note;
  EXPECT_GE(log.count("-wal is damaged"), 1) << log.text();
  const auto report = store->verify(false);
  ASSERT_EQ(report.problems.size(), 1u);
  EXPECT_NE(report.problems[0].find("committed transaction"), std::string::npos) << report.problems[0];
}

TEST(StoreWalTest, DamagePastTheFirstMegabyteIsFoundAtItsFrame) {
  TempDir tmp;
  // 12 entries of 200 KB: a -wal of ~2.4 MB, hundreds of frames.
  const std::string copy = wal_only_copy(tmp, "copy", 200000);
  const std::string wal = copy + "/cubins.sqlite3-wal";
  ASSERT_GT(fs::file_size(wal), 2u << 20);
  const uint64_t frame_bytes = 24 + wal_page_size(wal);
  const uint64_t frame = ((3u << 19) - 32) / frame_bytes;  // the frame holding byte 1.5 MiB
  flip_byte(wal, static_cast<std::streamoff>(32 + frame * frame_bytes + 24 + 100));
  const std::string damage = wal_damage(copy + "/cubins.sqlite3");
  EXPECT_NE(damage.find("frame " + std::to_string(frame) + " "), std::string::npos) << damage;
  EXPECT_NE(damage.find("committed transaction"), std::string::npos) << damage;
}

TEST(StoreWalTest, ADamagedWalHeaderIsReported) {
  TempDir tmp;
  const std::string copy = wal_only_copy(tmp, "copy");
  flip_byte(copy + "/cubins.sqlite3-wal", 17);  // a salt: the header checksum fails
  EXPECT_NE(wal_damage(copy + "/cubins.sqlite3").find("header is damaged"), std::string::npos);
  auto store = open_store(copy);
  EXPECT_EQ(store->verify(false).problems.size(), 1u);
}

TEST(StoreWalTest, AnUncommittedTailFromACrashIsNotDamage) {
  TempDir tmp;
  const std::string copy = wal_only_copy(tmp, "copy");
  const std::string wal = copy + "/cubins.sqlite3-wal";
  // A writer killed mid-transaction leaves frames with no commit frame after them;
  // cutting the last (commit) frame in half leaves the same: nothing committed is lost
  // beyond that last transaction, which a crash may drop by design (synchronous=NORMAL).
  fs::resize_file(wal, fs::file_size(wal) - 100);
  EXPECT_EQ(wal_damage(copy + "/cubins.sqlite3"), "");
  auto store = open_store(copy);
  EXPECT_TRUE(store->verify(false).problems.empty());
  EXPECT_GE(store->stats().entries, kEntries - 1);
}

TEST(StoreWalTest, ACommitFrameCutBetweenItsHeaderAndPageIsNotDamage) {
  TempDir tmp;
  const std::string copy = wal_only_copy(tmp, "copy");
  const std::string wal = copy + "/cubins.sqlite3-wal";
  // kill -9 between SQLite's two writes of the last (commit) frame: its header is new,
  // its page still holds whatever was there. That transaction never committed.
  const uint32_t page = wal_page_size(wal);
  std::fstream f(wal, std::ios::in | std::ios::out | std::ios::binary);
  const auto size = static_cast<std::streamoff>(fs::file_size(wal));
  f.seekp(size - static_cast<std::streamoff>(page));
  f.write(std::string(page, '\0').data(), page);
  f.close();
  EXPECT_EQ(wal_damage(copy + "/cubins.sqlite3"), "");
  auto store = open_store(copy);
  EXPECT_TRUE(store->verify(false).problems.empty());
  EXPECT_EQ(store->stats().entries, kEntries - 1) << "only the cut transaction is gone";
}

TEST(StoreWalTest, CheckpointMovesTheEntriesIntoTheFile) {
  TempDir tmp;
  const std::string live = tmp.sub("live");
  auto store = open_store(live);
  for (int i = 0; i < kEntries; ++i) ASSERT_TRUE(store->put(make_entry("k" + std::to_string(i), 6000)));
  EXPECT_TRUE(store->checkpoint());
  EXPECT_EQ(fs::file_size(live + "/cubins.sqlite3-wal"), 0u) << "TRUNCATE empties the -wal";
  // The file alone, copied while the store is still open, holds every entry.
  const std::string copy = tmp.sub("copy");
  fs::create_directory(copy);
  fs::permissions(copy, fs::perms::owner_all, fs::perm_options::replace);
  fs::copy_file(live + "/cubins.sqlite3", copy + "/cubins.sqlite3");
  EXPECT_EQ(open_store(copy)->stats().entries, kEntries);

  StoreOptions memory;
  memory.dir = tmp.sub("a-file/cache");
  std::ofstream(tmp.sub("a-file")) << "x";
  EXPECT_FALSE(CubinStore::open(memory)->checkpoint()) << "nothing to checkpoint in memory";
}

TEST(StoreWalTest, CreateFalseMakesNoFolderOrFile) {
  TempDir tmp;
  StoreOptions options;
  options.create = false;
  options.dir = tmp.sub("missing/cache");
  auto st = CubinStore::open(options)->stats();
  EXPECT_TRUE(st.not_created);
  EXPECT_TRUE(st.in_memory);
  EXPECT_FALSE(fs::exists(tmp.sub("missing")));

  options.dir = tmp.sub("empty");
  fs::create_directory(options.dir);
  fs::permissions(options.dir, fs::perms::owner_all, fs::perm_options::replace);
  st = CubinStore::open(options)->stats();
  EXPECT_TRUE(st.not_created);
  EXPECT_TRUE(fs::is_empty(options.dir)) << "no database, lock or temp file";

  // An existing store opens as usual.
  open_store(options.dir)->put(make_entry("k", 100));
  st = CubinStore::open(options)->stats();
  EXPECT_FALSE(st.not_created);
  EXPECT_FALSE(st.in_memory) << st.note;
  EXPECT_EQ(st.entries, 1);
}

}  // namespace
}  // namespace attnjit::store
