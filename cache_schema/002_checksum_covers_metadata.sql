-- 002: the row checksum now also covers name, arch and meta_json (see
-- src/store/checksum.hpp), so the metadata a reader parses is verified like
-- the cubin. Rows of schema 001 carry the old checksum and can no longer be
-- verified: drop them (a lost row only costs a recompile). The version bump
-- also makes older libraries open this file read-only instead of deleting
-- every new row as a checksum mismatch.
-- bytes stays as written, but readers size rows by length(cubin) + length(ptx).
DELETE FROM entries;
