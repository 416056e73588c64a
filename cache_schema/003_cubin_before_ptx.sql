-- 003: a launch reads a row's cubin without its PTX, and recording a hit reads
-- neither. The small columns come first and the PTX last, so a SELECT of the
-- cubin stops before the PTX's overflow pages (SQLite reads a record's payload
-- in column order), and the row checksum covers the PTX through its own digest,
-- ptx_checksum (see src/store/checksum.hpp): a cubin-only read verifies every
-- column it returns, a whole read (inspect, verify, export) checks the PTX
-- against its digest too. Each row's use (hits, last use: the LRU order) is a
-- row of `usage`: an UPDATE of a column of `entries` rebuilds the whole record,
-- so every recorded hit read the row's blobs again (30 ms for 20 MLA-sized rows).
-- Rows of schema 002 carry the old checksum: dropped, as in 002 (their keys name
-- the build of the library that wrote them, so a newer library never asks for
-- them). The version bump makes older libraries open this file read-only.
DROP INDEX entries_lru;
DROP TABLE entries;
CREATE TABLE entries (
  key            TEXT PRIMARY KEY NOT NULL,
  name           TEXT NOT NULL DEFAULT '',
  arch           TEXT NOT NULL DEFAULT '',
  meta_json      TEXT NOT NULL DEFAULT '',
  checksum       TEXT NOT NULL,
  ptx_checksum   TEXT NOT NULL,
  bytes          INTEGER NOT NULL,
  compile_ms     REAL NOT NULL DEFAULT 0,
  created_us     INTEGER NOT NULL,
  cubin          BLOB NOT NULL,
  ptx            BLOB NOT NULL
);
-- One row per entry, written with it; a row missing here reads as never used.
CREATE TABLE usage (
  key            TEXT PRIMARY KEY NOT NULL,
  last_used_us   INTEGER NOT NULL,
  hits           INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX usage_lru ON usage(last_used_us);
