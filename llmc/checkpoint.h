// tdpipe's checkpoint container (DESIGN.md §5): a 256 x int32 header, then named sections, each
// byte-shuffled (optional, for float data), zlib-compressed and CRC32-guarded; written to a temp
// file, fsynced and renamed; read back with every field verified. Model-agnostic.
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// On-disk layout (all integers little-endian):
//   header: 256 x int32 (1024 bytes)
//     [0] CKPT_MAGIC  [1] CKPT_VERSION  [2] section count  [3] descriptor bytes (80)
//     [4] shuffle block bytes  [5..6] step (int64, lo/hi)  [7..8] file bytes (int64, lo/hi)
//     [9] zlib level used  [10..254] zero  [255] CRC32 of bytes 0..1019
//   then per section: an 80-byte descriptor followed by its zlib stream
//     [0..31] name, NUL-padded  [32] u32 element size  [36] u32 flags (bit 0: shuffled)
//     [40] u64 raw bytes  [48] u64 compressed bytes  [56] u32 CRC32 of the compressed bytes
//     [60] u32 CRC32 of the raw bytes  [64..75] zero  [76] u32 CRC32 of descriptor bytes 0..75
// Shuffle: the raw bytes are cut into blocks of CKPT_SHUFFLE_BLOCK; within a block the n whole
// elements of size e are transposed into e byte planes (byte j of element i goes to j*n + i);
// bytes past the last whole element stay where they are.
// Compression: a section's zlib stream holds one raw deflate stream per block of CKPT_SHUFFLE_BLOCK
// input bytes, each ended by a sync flush (the last one finished), so the writer compresses blocks
// on OpenMP threads and the bytes depend on the block size alone, not on the thread count. The
// reader inflates it as one stream, as it does the single-stream sections of older files.
#define CKPT_MAGIC 20241130
#define CKPT_VERSION 1
#define CKPT_HEADER_INTS 256
#define CKPT_HEADER_BYTES (CKPT_HEADER_INTS * 4)
#define CKPT_DESC_BYTES 80
#define CKPT_NAME_CAP 32 // names are 1..31 printable characters
#define CKPT_SHUFFLE_BLOCK (1 << 20)
#define CKPT_MAX_SECTIONS 4096
// "level" 10: deflate's entropy coding alone (Z_HUFFMAN_ONLY), no LZ77 matching. Byte-shuffled
// floats have almost no repeats for LZ77 to find, so this is faster than level 1 and as small as
// level 6 on model weights (README, make bench-checkpoint).
#define CKPT_LEVEL_HUFFMAN 10

typedef struct {
    char name[CKPT_NAME_CAP];
    int elem_size;      // 1, 2, 4 or 8: the element width the section was written with
    int shuffled;       // 1 when the bytes were shuffled on disk (undone here)
    size_t bytes;       // raw (decompressed) byte count
    size_t comp_bytes;  // compressed byte count on disk
    void* data;         // (bytes,) decompressed and unshuffled; NULL when only verified
} CkptSection;

typedef struct {
    long step;
    int zlib_level;
    int num_sections;
    CkptSection* sections; // (num_sections,) in file order
    size_t file_bytes;
} Ckpt;

typedef struct CkptWriter CkptWriter;

// CRC32 (zlib's) of any length; start with crc = 0
uint32_t ckpt_crc32(uint32_t crc, const void* data, size_t bytes);

// "<dir>/ckpt_<step, 8 digits>.tdck" into out; returns 0, or -1 when it does not fit
int ckpt_path(char* out, size_t cap, const char* dir, long step);

// Starts a checkpoint for `step` in `dir`, written to "<dir>/.ckpt_<step>.tdck.tmp".
// zlib_level 0..9 or CKPT_LEVEL_HUFFMAN; shuffle != 0 shuffles sections whose elem_size > 1. NULL + err on failure.
// While a writer is open, SIGXFSZ is ignored so a file-size limit gives EFBIG, not death.
CkptWriter* ckpt_writer_open(const char* dir, long step, int zlib_level, int shuffle, char* err, size_t errlen);
// Appends one section, streaming it through deflate with bounded buffers. elem_size is 1, 2, 4
// or 8; bytes need not be a multiple of it. On failure returns -1 + err, the temp file is
// already removed and the writer only accepts ckpt_writer_abort (or commit, which repeats err).
int ckpt_writer_add(CkptWriter* w, const char* name, const void* data, size_t bytes, int elem_size, char* err, size_t errlen);
// The same section given in pieces, for data that is never whole in one place (a pipeline's model
// arriving stage by stage): begin with the section's size, put its bytes in order in pieces of any
// size, end once all are given. The file is byte for byte what ckpt_writer_add of the whole writes.
// put compresses a block straight from the caller's bytes where it holds a whole one, and gathers
// the rest a block at a time: the writer keeps a block per OpenMP thread, never the section. Putting
// more than begin said, ending short, or beginning (or committing) with a section open fail as add does.
int ckpt_writer_begin(CkptWriter* w, const char* name, size_t bytes, int elem_size, char* err, size_t errlen);
int ckpt_writer_put(CkptWriter* w, const void* data, size_t n, char* err, size_t errlen);
int ckpt_writer_end(CkptWriter* w, char* err, size_t errlen);
// Finishes the header, fsyncs, renames to ckpt_path(dir, step), fsyncs the directory, frees w.
// path_out (may be NULL) receives the final path. -1 + err on failure (temp file removed).
int ckpt_writer_commit(CkptWriter* w, char* path_out, size_t path_cap, char* err, size_t errlen);
// Whatever holds path (a checkpoint resume passed over as damaged or foreign, a FIFO, a folder) is
// renamed to "<path>.kept" (or .kept-2, ...), which neither resume nor pruning reads, so that a
// commit to path replaces nothing. 1 with its new name in kept, 0 when path is free, -1 + err.
int ckpt_keep_aside(const char* path, char* kept, size_t cap, char* err, size_t errlen);
// Drops an unfinished checkpoint: removes the temp file, frees w. NULL is fine.
void ckpt_writer_abort(CkptWriter* w);

// Reads and verifies everything (header, descriptors, sizes, both CRCs of every section,
// truncation, trailing bytes) and keeps the decompressed sections. On failure returns -1 with
// "<path>: <problem>" in err and *out left empty (ckpt_free is still safe).
int ckpt_read(const char* path, Ckpt* out, char* err, size_t errlen);
// Same checks without decompressing: header, descriptors, sizes, CRC of the compressed bytes.
int ckpt_verify(const char* path, char* err, size_t errlen);
// The named section's data and size, or NULL when the checkpoint has no such section (or did not
// keep it: see ckpt_find_latest's keep_max)
const void* ckpt_section(const Ckpt* c, const char* name, size_t* bytes);
// The named section's entry (its size and layout, data NULL when not kept), or NULL when it has none
const CkptSection* ckpt_section_entry(const Ckpt* c, const char* name);

// A section taken as it is decoded instead of kept in memory: put(ctx, off, data, n) receives its
// raw (unshuffled) bytes in order, [off, off + n) at a time, n at most CKPT_SHUFFLE_BLOCK. What a
// large model's resume reads its slice of the model from, holding a block, not the model.
typedef struct {
    const char* name;
    void (*put)(void* ctx, size_t off, const void* data, size_t n);
    void* ctx;
} CkptSink;
// Streams the sections that sinks name (n of them) from the checkpoint at path into their puts,
// checking both CRCs as ckpt_read does; the other sections are not read (ckpt_find_latest, which
// chose the file, has checked them: a rank reads its own sections, not every replica's residuals).
// put sees the bytes before the raw CRC is known: after a failure (-1 + err) what it was given
// must not be used. A sink whose section the file lacks is an error.
int ckpt_read_sinks(const char* path, const CkptSink* sinks, int n, char* err, size_t errlen);
void ckpt_free(Ckpt* c);

// Keeps the `keep` newest valid checkpoints of dir (by the step in their names) and deletes older
// valid ones. Valid: a regular file that passes ckpt_verify and whose header step is its name's,
// as resume would take it. Anything else named like a checkpoint (damaged or foreign files,
// directories, FIFOs) is neither counted nor deleted. 0, or -1 + err.
int ckpt_prune(const char* dir, int keep, char* err, size_t errlen);

// The step of a checkpoint's file name, exactly "ckpt_<1..18 digits>.tdck"; -1 for any other name
long ckpt_name_step(const char* name);
// 1 when name is a checkpoint ckpt_keep_aside set aside ("ckpt_N.tdck.kept", "...kept-2", ...)
int ckpt_name_kept(const char* name);
// 1 when name is the writer's temporary name for a checkpoint (".ckpt_<digits>.tdck.tmp"), else 0
int ckpt_is_temp_name(const char* name);

// Loads the newest checkpoint of dir that passes ckpt_read (and whose header step matches its
// name), falling back to older ones. note receives one line per skipped file and why.
// Returns 0 (out and path_out filled), 1 when dir holds no checkpoint (or does not exist),
// -1 when every checkpoint is damaged or dir cannot be listed (reasons in note).
// keep_max: sections of more bytes are checked as ckpt_verify checks them but not decompressed or
// kept (data NULL; ckpt_read_sinks streams them after); SIZE_MAX keeps everything.
int ckpt_find_latest(const char* dir, size_t keep_max, Ckpt* out, char* path_out, size_t path_cap, char* note, size_t note_cap);

#ifdef __cplusplus
}
#endif
