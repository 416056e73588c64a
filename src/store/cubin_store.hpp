// CubinStore: the SQLite file of compiled kernels that many processes share.
// It stores opaque blobs under string keys; it does not know what a kernel is.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace attnjit::store {

struct StoreOptions {
  std::string dir;                       // empty: resolve_cache_dir()
  int64_t max_bytes = 4LL << 30;         // LRU eviction above this (blob bytes)
  int busy_timeout_ms = 30000;
  // Never write the file: read existing entries from it, keep new ones in
  // memory (e.g. a prewarmed cache on a read-only image). A folder or file
  // this process cannot write is treated the same way without asking.
  bool read_only = false;
  // False: never create the folder or the database file (diagnosis, e.g. `attnjit
  // doctor`): a missing one leaves the store in memory, with a note saying so.
  bool create = true;
};

// $ATTNJIT_CACHE_DIR, else $XDG_CACHE_HOME/attnjit, else ~/.cache/attnjit.
std::string resolve_cache_dir();

struct Entry {
  std::string key;        // hex hash, primary key
  std::string name;       // readable label (for ls/inspect)
  std::string arch;       // "sm_90a"
  std::string cubin;      // binary blob
  std::string ptx;        // may be empty; not read by a get(key, Blobs::kCubin)
  std::string meta_json;  // free-form metadata (compile log, resources, spec json...)
  double compile_ms = 0;
  int64_t ptx_bytes = 0;  // set by get(): the stored PTX's length, read or not (put ignores it)
};

// What a get() reads of a row. A launch needs the cubin only, and a row's PTX is
// usually larger (2.5x for the MLA kernel): it is read for inspect, verify and export.
enum class Blobs { kCubinAndPtx, kCubin };

struct EntryInfo {
  std::string key, name, arch;
  int64_t cubin_bytes = 0, ptx_bytes = 0;
  int64_t created_unix = 0, last_used_unix = 0;
  int64_t hits = 0;
  double compile_ms = 0;
};

struct StoreStats {
  int64_t entries = 0;
  int64_t total_bytes = 0;   // cubin + ptx bytes
  int64_t hits = 0, misses = 0, puts = 0, evictions = 0;
  double compile_ms_total = 0;
  std::string path;
  bool in_memory = false;   // true when the location was read-only/unusable
  bool reads_file = false;  // in memory, but serving the file's entries read-only
  bool not_created = false; // StoreOptions::create was false and there is no store yet
  std::string note;         // why it is in memory, quarantine notes...
  std::string write_error;  // why the last put() failed to store its entry (e.g. disk full); "" if none did
};

struct VerifyReport {
  int64_t checked = 0;
  int64_t bad = 0;                 // checksum or size mismatches (removed when repair=true)
  std::vector<std::string> bad_keys;
  bool integrity_ok = true;        // PRAGMA integrity_check
  // What this store found wrong since it was opened, before verify ran: a corrupt
  // file it quarantined (so the rows checked are those of a fresh store), a -wal
  // whose damage dropped committed entries. Empty when there was nothing.
  std::vector<std::string> problems;
};

struct ImportReport {
  int64_t added = 0;  // verified rows that were new here
  int64_t bad = 0;    // rows skipped because their checksum did not match
};

// Held while this process compiles one key (CubinStore::claim_compile), so that another
// process missing the same key waits for the entry instead of compiling it too: a fleet's
// prewarms start side by side. Released when destroyed (and by the kernel if the process dies).
class CompileClaim {
 public:
  virtual ~CompileClaim() = default;
  // Another process held the claim first: look in the store again before compiling.
  bool waited() const { return waited_; }

 protected:
  bool waited_ = false;
};

class CubinStore {
 public:
  // Never throws for an unusable location: falls back to an in-memory store and
  // says why in stats().note. Throws Error(kStore) only for a folder that others
  // can write, or that belongs to another user than this one or root (a cubin
  // is code that will run). A corrupt or foreign file is quarantined, not fatal.
  // A database file (or -wal/-shm/-journal/.lock) that is a symlink, not a regular
  // file, owned by another user or writable by group/others is never opened, not
  // even read-only: the store serves from memory and says why in stats().note.
  static std::unique_ptr<CubinStore> open(const StoreOptions& options);
  virtual ~CubinStore() = default;

  // Verifies the checksum (of what it reads: the PTX too unless blobs is kCubin); a bad
  // row is deleted and reported as a miss.
  virtual std::optional<Entry> get(const std::string& key, Blobs blobs = Blobs::kCubinAndPtx) = 0;
  // INSERT OR IGNORE under BEGIN IMMEDIATE. True when this call inserted it.
  virtual bool put(const Entry& entry) = 0;
  virtual bool contains(const std::string& key) = 0;
  // Deletes a row that is intact but wrong for its key (the registry found its
  // recorded inputs differ from the request's). True when a row was removed.
  virtual bool remove(const std::string& key) = 0;

  virtual std::vector<EntryInfo> list() = 0;
  virtual StoreStats stats() = 0;
  virtual int64_t gc(int64_t max_bytes) = 0;  // evict LRU until under; returns rows evicted
  virtual VerifyReport verify(bool repair) = 0;
  // Verified rows copied. Throws Error(kInvalidArgument) for a target that is
  // the live store or has a -wal/-shm beside it.
  virtual int64_t export_to(const std::string& file) = 0;
  virtual int64_t import_from(const std::string& file) = 0;  // verified rows added
  virtual ImportReport import_bundle(const std::string& file) = 0;  // import_from, with the bad count
  // Copies the -wal's committed pages into the database file and empties the
  // -wal, so that the file alone holds every entry (copying it gives them all).
  // False when readers kept part of the -wal, or there is no file behind the store.
  virtual bool checkpoint() = 0;
  virtual void clear() = 0;
  virtual std::string path() const = 0;  // db file path, or ":memory:"
  // Waits (at most timeout_ms: a holder may be stopped) for no other process to be
  // compiling `key`, then holds the claim until the result is destroyed. Null where no
  // file backs the store (nothing this process puts is seen by others).
  virtual std::unique_ptr<CompileClaim> claim_compile(const std::string& key, int timeout_ms) = 0;
};

}  // namespace attnjit::store
