-- 001: the first layout of the attnjit cubin store (brings the db to user_version 1).
-- application_id 'ATNJ' marks the file as ours: a SQLite file without it is foreign.
PRAGMA application_id = 1096044106;

-- One compiled kernel per key. checksum = XXH3-128 (32 hex digits) over the
-- length-prefixed key, cubin and ptx (see src/store/checksum.hpp); verified on
-- every read. bytes = length(cubin) + length(ptx), kept so that sums and LRU
-- eviction read only the small index, never the blobs. Times are unix
-- microseconds so that LRU order is exact within a second.
CREATE TABLE entries (
  key            TEXT PRIMARY KEY NOT NULL,
  name           TEXT NOT NULL DEFAULT '',
  arch           TEXT NOT NULL DEFAULT '',
  cubin          BLOB NOT NULL,
  ptx            BLOB NOT NULL,
  meta_json      TEXT NOT NULL DEFAULT '',
  checksum       TEXT NOT NULL,
  bytes          INTEGER NOT NULL,
  compile_ms     REAL NOT NULL DEFAULT 0,
  created_us     INTEGER NOT NULL,
  last_used_us   INTEGER NOT NULL,
  hits           INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX entries_lru ON entries(last_used_us, bytes);

-- Counters shared by every process using this file: one row, updated inside
-- the write transactions that happen anyway (put, evict, hit bookkeeping).
CREATE TABLE stats (
  id                INTEGER PRIMARY KEY CHECK (id = 1),
  hits              INTEGER NOT NULL DEFAULT 0,
  misses            INTEGER NOT NULL DEFAULT 0,
  puts              INTEGER NOT NULL DEFAULT 0,
  evictions         INTEGER NOT NULL DEFAULT 0,
  compile_ms_total  REAL NOT NULL DEFAULT 0
);
INSERT INTO stats (id) VALUES (1);
