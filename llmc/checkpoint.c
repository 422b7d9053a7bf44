// tdpipe's checkpoint container: the writer (shuffle, deflate, CRC, temp file, fsync, rename),
// the reader/verifier, pruning, and the newest-valid lookup. Layout: see checkpoint.h.
#include "checkpoint.h"
#include "common.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define IO_CHUNK (1 << 20)  // bytes per read/write call
#define OUT_CAP (compressBound(CKPT_SHUFFLE_BLOCK) + 64) // one block's deflate output, with room for its flush
#define ZLIB_MAX_RATIO 1032 // deflate's best ratio: a descriptor claiming more is damaged or hostile
#define PATH_CAP 4096

uint32_t ckpt_crc32(uint32_t crc, const void* data, size_t bytes) {
    const unsigned char* p = (const unsigned char*)data;
    while (bytes > 0) { // zlib's length is a uInt
        uInt n = bytes > (1u << 30) ? (1u << 30) : (uInt)bytes;
        crc = (uint32_t)crc32(crc, p, n);
        p += n;
        bytes -= n;
    }
    return crc;
}

int ckpt_path(char* out, size_t cap, const char* dir, long step) {
    int n = snprintf(out, cap, "%s/ckpt_%08ld.tdck", dir, step);
    return (n < 0 || (size_t)n >= cap) ? -1 : 0;
}

// ----------------------------------------------------------------------------------------------
// little-endian fields and the shuffle

static void put_u32(unsigned char* p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i)); }
static void put_u64(unsigned char* p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i)); }
static uint32_t get_u32(const unsigned char* p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static uint64_t get_u64(const unsigned char* p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

// n bytes of e-byte elements into e planes; the n % e tail bytes are copied as they are
static void shuffle_block(unsigned char* dst, const unsigned char* src, size_t n, int e) {
    size_t k = n / e;
    for (int j = 0; j < e; j++) {
        unsigned char* plane = dst + (size_t)j * k;
        for (size_t i = 0; i < k; i++) plane[i] = src[i * e + j];
    }
    memcpy(dst + k * e, src + k * e, n - k * e);
}

static void unshuffle_block(unsigned char* dst, const unsigned char* src, size_t n, int e) {
    size_t k = n / e;
    for (int j = 0; j < e; j++) {
        const unsigned char* plane = src + (size_t)j * k;
        for (size_t i = 0; i < k; i++) dst[i * e + j] = plane[i];
    }
    memcpy(dst + k * e, src + k * e, n - k * e);
}

static int valid_elem_size(int e) { return e == 1 || e == 2 || e == 4 || e == 8; }

static int valid_name(const char* name) {
    size_t n = strnlen(name, CKPT_NAME_CAP);
    if (n == 0 || n >= CKPT_NAME_CAP) return 0;
    for (size_t i = 0; i < n; i++)
        if (name[i] <= ' ' || name[i] > '~') return 0;
    return 1;
}

// ----------------------------------------------------------------------------------------------
// writer

// one thread's block: its own raw deflate stream and buffers, and what it made of the block
typedef struct {
    z_stream zs;
    unsigned char* out;             // (OUT_CAP) the block's deflate output
    unsigned char* shuf;            // (CKPT_SHUFFLE_BLOCK) the block shuffled
    unsigned char* raw;             // (CKPT_SHUFFLE_BLOCK) where put gathers a block given in pieces
    const unsigned char* in;        // the block to compress: raw, or the caller's bytes where put got it whole
    size_t n;                       // its bytes
    size_t out_len;
    uint32_t crc_raw, crc_comp, adler; // of the raw block, of out, and the raw block's adler32 (of its shuffled bytes)
    int failed;                     // deflate failed on this block
} CkptLane;

// the section between ckpt_writer_begin and ckpt_writer_end: its complete blocks wait in lanes
// [0, pending) until every lane has one (or put returns holding the caller's bytes), then are
// compressed together; a block given in pieces collects in lanes[pending].raw
typedef struct {
    int open;
    char name[CKPT_NAME_CAP];
    int elem_size, shuffled;
    size_t bytes, given;            // the section's raw bytes, and how many put has taken
    size_t n_blocks, done;          // its blocks, and how many are written
    int pending;                    // complete blocks waiting in lanes [0, pending)
    size_t staged;                  // bytes of the next block gathered in lanes[pending].raw
    uint64_t desc_at, comp;         // where its descriptor goes, compressed bytes so far
    uint32_t crc_raw, crc_comp, adler;
} CkptOpen;

struct CkptWriter {
    char dir[PATH_CAP];
    char tmp_path[PATH_CAP];
    char final_path[PATH_CAP];
    int fd;                         // -1 once closed
    long step;
    int level, shuffle;
    uint64_t offset;                // bytes written so far
    int num_sections, cap_sections;
    char (*names)[CKPT_NAME_CAP];   // (cap_sections,) names added so far, to refuse duplicates
    // a section is compressed CKPT_SHUFFLE_BLOCK bytes at a time, n_lanes blocks at once (one per
    // OpenMP thread)
    int n_lanes;
    CkptLane* lanes;                // (n_lanes,)
    CkptOpen sec;                   // the section being written (begin .. end)
    int failed;
    char err[PATH_CAP + 1024];
    struct sigaction old_xfsz;
};

static void writer_free(CkptWriter* w) {
    if (w->fd >= 0) close(w->fd);
    sigaction(SIGXFSZ, &w->old_xfsz, NULL);
    for (int i = 0; i < w->n_lanes; i++) {
        deflateEnd(&w->lanes[i].zs);
        free(w->lanes[i].out);
        free(w->lanes[i].shuf);
        free(w->lanes[i].raw);
    }
    free(w->lanes);
    free(w->names);
    free(w);
}

// records the first failure, removes the temp file; the existing checkpoints are never touched
static int writer_fail(CkptWriter* w, char* err, size_t errlen, const char* fmt, ...)
#ifdef __GNUC__
    __attribute__((format(printf, 4, 5)))
#endif
    ;
static int writer_fail(CkptWriter* w, char* err, size_t errlen, const char* fmt, ...) {
    if (!w->failed) {
        char msg[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        snprintf(w->err, sizeof w->err, "%s: %s", w->tmp_path, msg); // the caller says which step and what it keeps
        if (w->fd >= 0) close(w->fd);
        w->fd = -1;
        unlink(w->tmp_path);
        w->failed = 1;
    }
    td_error(err, errlen, "%s", w->err);
    return -1;
}

static int write_all(CkptWriter* w, const void* buf, size_t n, char* err, size_t errlen) {
    const unsigned char* p = (const unsigned char*)buf;
    while (n > 0) {
        ssize_t k = write(w->fd, p, n > IO_CHUNK ? IO_CHUNK : n);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return writer_fail(w, err, errlen, "write failed at byte %llu: %s", (unsigned long long)w->offset, strerror(errno));
        if (k == 0) return writer_fail(w, err, errlen, "write made no progress at byte %llu", (unsigned long long)w->offset);
        p += k;
        n -= (size_t)k;
        w->offset += (uint64_t)k;
    }
    return 0;
}

static int pwrite_all(CkptWriter* w, const unsigned char* buf, size_t n, uint64_t at, char* err, size_t errlen) {
    while (n > 0) {
        ssize_t k = pwrite(w->fd, buf, n, (off_t)at);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return writer_fail(w, err, errlen, "write failed at byte %llu: %s", (unsigned long long)at, k < 0 ? strerror(errno) : "no progress");
        buf += k;
        n -= (size_t)k;
        at += (uint64_t)k;
    }
    return 0;
}

CkptWriter* ckpt_writer_open(const char* dir, long step, int zlib_level, int shuffle, char* err, size_t errlen) {
    if (zlib_level < 0 || zlib_level > CKPT_LEVEL_HUFFMAN) {
        td_error(err, errlen, "%s: zlib level %d out of range 0..9 (or %d, Huffman only)", dir, zlib_level, CKPT_LEVEL_HUFFMAN);
        return NULL;
    }
    if (step < 0) {
        td_error(err, errlen, "%s: checkpoint step %ld is negative", dir, step);
        return NULL;
    }
    CkptWriter* w = (CkptWriter*)calloc_check(1, sizeof(CkptWriter));
    w->fd = -1;
    w->step = step;
    w->level = zlib_level;
    w->shuffle = shuffle != 0;
    int n1 = snprintf(w->dir, PATH_CAP, "%s", dir), n2 = -1;
    if (ckpt_path(w->final_path, PATH_CAP, dir, step) == 0) // the temp name is ".<final name>.tmp" (ckpt_is_temp_name)
        n2 = snprintf(w->tmp_path, PATH_CAP, "%s/.%s.tmp", dir, w->final_path + n1 + 1);
    if (n1 < 0 || n1 >= PATH_CAP || n2 < 0 || n2 >= PATH_CAP) {
        td_error(err, errlen, "%s: directory path too long", dir);
        free(w);
        return NULL;
    }
    // a file-size limit (RLIMIT_FSIZE) must surface as EFBIG from write(), not kill the trainer
    struct sigaction ign;
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    sigaction(SIGXFSZ, &ign, &w->old_xfsz);
    int huffman = zlib_level == CKPT_LEVEL_HUFFMAN;
#ifdef _OPENMP
    w->n_lanes = omp_get_max_threads();
#else
    w->n_lanes = 1;
#endif
    w->lanes = (CkptLane*)calloc_check((size_t)w->n_lanes, sizeof(CkptLane));
    for (int i = 0; i < w->n_lanes; i++) { // raw deflate (windowBits -15): the zlib wrapper is written around the blocks
        CkptLane* ln = &w->lanes[i];
        if (deflateInit2(&ln->zs, huffman ? 1 : zlib_level, Z_DEFLATED, -15, 8, huffman ? Z_HUFFMAN_ONLY : Z_DEFAULT_STRATEGY) != Z_OK) {
            td_error(err, errlen, "%s: zlib deflateInit failed", dir);
            w->n_lanes = i; // (the lanes before it are freed; no file exists yet)
            writer_free(w);
            return NULL;
        }
        ln->out = (unsigned char*)malloc_check(OUT_CAP);
        ln->shuf = (unsigned char*)malloc_check(CKPT_SHUFFLE_BLOCK);
        ln->raw = (unsigned char*)malloc_check(CKPT_SHUFFLE_BLOCK);
    }
    w->fd = td_create_regular(w->tmp_path, "checkpoint file", err, errlen);
    if (w->fd < 0) {
        writer_free(w);
        return NULL;
    }
    unsigned char zero[CKPT_HEADER_BYTES] = {0}; // the real header is written by commit
    if (write_all(w, zero, sizeof zero, err, errlen) != 0) {
        writer_free(w);
        return NULL;
    }
    return w;
}

// bytes of the shuffle block at offset off of a section of `bytes`
static size_t block_len(size_t bytes, size_t off) { return bytes - off < CKPT_SHUFFLE_BLOCK ? bytes - off : CKPT_SHUFFLE_BLOCK; }

// one block (n bytes at in, n <= CKPT_SHUFFLE_BLOCK) into the lane: its CRC and adler32, shuffled if
// asked, deflated as a raw stream ended by a sync flush (byte aligned, not final) or, the last block,
// finished. One call does it: OUT_CAP is compressBound's bound on a zlib stream of the block, above
// what a raw one with its flush marker can take; a call that leaves input or output unfinished is a
// failure, not a loop.
static void lane_deflate(CkptLane* ln, const unsigned char* in, size_t n, int elem_size, int shuffled, int last) {
    ln->crc_raw = n > 0 ? ckpt_crc32(0, in, n) : 0;
    if (n > 0 && shuffled) {
        shuffle_block(ln->shuf, in, n, elem_size);
        in = ln->shuf;
    }
    ln->adler = n > 0 ? (uint32_t)adler32(1, in, (uInt)n) : 1;
    z_stream* zs = &ln->zs;
    ln->failed = deflateReset(zs) != Z_OK;
    zs->next_in = (Bytef*)in;
    zs->avail_in = (uInt)n;
    zs->next_out = ln->out;
    zs->avail_out = OUT_CAP;
    int ret = deflate(zs, last ? Z_FINISH : Z_SYNC_FLUSH);
    if (ret == Z_STREAM_ERROR || zs->avail_in != 0 || zs->avail_out == 0 || (last && ret != Z_STREAM_END)) ln->failed = 1;
    ln->out_len = OUT_CAP - zs->avail_out;
    ln->crc_comp = ckpt_crc32(0, ln->out, ln->out_len);
}

int ckpt_writer_begin(CkptWriter* w, const char* name, size_t bytes, int elem_size, char* err, size_t errlen) {
    CkptOpen* o = &w->sec;
    if (w->failed) return writer_fail(w, err, errlen, "earlier error");
    if (o->open) return writer_fail(w, err, errlen, "section '%.40s' begun while section '%s' is open", name ? name : "(null)", o->name);
    if (!name || !valid_name(name)) return writer_fail(w, err, errlen, "section name '%.40s' invalid (1..%d printable characters)", name ? name : "(null)", CKPT_NAME_CAP - 1);
    if (!valid_elem_size(elem_size)) return writer_fail(w, err, errlen, "section '%s': element size %d not 1, 2, 4 or 8", name, elem_size);
    if (w->num_sections >= CKPT_MAX_SECTIONS) return writer_fail(w, err, errlen, "more than %d sections", CKPT_MAX_SECTIONS);
    for (int i = 0; i < w->num_sections; i++)
        if (strcmp(w->names[i], name) == 0) return writer_fail(w, err, errlen, "section '%s' added twice", name);

    memset(o, 0, sizeof *o);
    snprintf(o->name, sizeof o->name, "%s", name);
    o->elem_size = elem_size;
    o->shuffled = w->shuffle && elem_size > 1;
    o->bytes = bytes;
    o->n_blocks = bytes == 0 ? 1 : (bytes + CKPT_SHUFFLE_BLOCK - 1) / CKPT_SHUFFLE_BLOCK;
    o->desc_at = w->offset;
    unsigned char desc[CKPT_DESC_BYTES] = {0}; // filled in by end, once the compressed size is known
    if (write_all(w, desc, sizeof desc, err, errlen) != 0) return -1;
    // the section's zlib stream, built as pigz builds one: the 2-byte zlib header; each block of
    // CKPT_SHUFFLE_BLOCK input bytes as its own raw deflate stream, ended by a sync flush (byte
    // aligned, not final) or, for the last block, finished; then the adler32 of the whole input.
    // The reader inflates it as one ordinary stream. The bytes depend on the block size alone, not
    // on the thread count or on how put was given them; the blocks lose only the matches LZ77
    // would find across a boundary (none with Huffman-only coding).
    int level_flags = w->level == CKPT_LEVEL_HUFFMAN || w->level < 2 ? 0 : w->level < 6 ? 1 : w->level == 6 ? 2 : 3;
    unsigned zhdr = (0x78u << 8) | ((unsigned)level_flags << 6);
    zhdr += 31 - zhdr % 31;
    unsigned char head[2] = {(unsigned char)(zhdr >> 8), (unsigned char)zhdr};
    if (write_all(w, head, 2, err, errlen) != 0) return -1;
    o->crc_comp = ckpt_crc32(0, head, 2);
    o->adler = 1;
    o->comp = 2;
    o->open = 1;
    return 0;
}

// compresses the waiting blocks, one per lane at once, and writes them in file order
static int flush_blocks(CkptWriter* w, char* err, size_t errlen) {
    CkptOpen* o = &w->sec;
    int lanes = o->pending;
#pragma omp parallel for schedule(static, 1) num_threads(lanes) if (lanes > 1)
    for (int l = 0; l < lanes; l++) lane_deflate(&w->lanes[l], w->lanes[l].in, w->lanes[l].n, o->elem_size, o->shuffled, o->done + l == o->n_blocks - 1);
    for (int l = 0; l < lanes; l++) {
        const CkptLane* ln = &w->lanes[l];
        if (ln->failed) return writer_fail(w, err, errlen, "section '%s': zlib deflate failed", o->name);
        if (write_all(w, ln->out, ln->out_len, err, errlen) != 0) return -1;
        o->crc_raw = (uint32_t)crc32_combine(o->crc_raw, ln->crc_raw, (z_off_t)ln->n);
        o->adler = (uint32_t)adler32_combine(o->adler, ln->adler, (z_off_t)ln->n);
        o->crc_comp = (uint32_t)crc32_combine(o->crc_comp, ln->crc_comp, (z_off_t)ln->out_len);
        o->comp += ln->out_len;
    }
    o->done += (size_t)lanes;
    o->pending = 0;
    return 0;
}

int ckpt_writer_put(CkptWriter* w, const void* data, size_t n, char* err, size_t errlen) {
    CkptOpen* o = &w->sec;
    if (w->failed) return writer_fail(w, err, errlen, "earlier error");
    if (!o->open) return writer_fail(w, err, errlen, "%zu bytes put with no section begun", n);
    if (n > o->bytes - o->given) return writer_fail(w, err, errlen, "section '%s': %zu bytes put after %zu of its %zu", o->name, n, o->given, o->bytes);
    if (!data && n > 0) return writer_fail(w, err, errlen, "section '%s': NULL data for %zu bytes", o->name, n);
    const unsigned char* p = (const unsigned char*)data;
    int direct = 0; // a waiting block points into the caller's bytes
    while (n > 0) {
        CkptLane* ln = &w->lanes[o->pending];
        size_t blen = block_len(o->bytes, (o->done + (size_t)o->pending) * CKPT_SHUFFLE_BLOCK), take;
        if (o->staged == 0 && n >= blen) { // a whole block: compressed from where it lies
            ln->in = p;
            take = blen;
            direct = 1;
        } else {
            take = n < blen - o->staged ? n : blen - o->staged;
            memcpy(ln->raw + o->staged, p, take);
            o->staged += take;
            ln->in = ln->raw;
        }
        p += take;
        n -= take;
        o->given += take;
        if (ln->in == ln->raw && o->staged < blen) continue; // the block is not complete yet (n is 0)
        ln->n = blen;
        o->staged = 0;
        if (++o->pending == w->n_lanes && flush_blocks(w, err, errlen) != 0) return -1;
    }
    // the caller's bytes are theirs again once put returns: blocks that point into them go now, and
    // a block still being gathered moves (its buffer does) to the first lane
    if (direct && o->pending > 0) {
        int at = o->pending;
        if (flush_blocks(w, err, errlen) != 0) return -1;
        if (o->staged > 0) {
            unsigned char* t = w->lanes[0].raw;
            w->lanes[0].raw = w->lanes[at].raw;
            w->lanes[at].raw = t;
        }
    }
    return 0;
}

int ckpt_writer_end(CkptWriter* w, char* err, size_t errlen) {
    CkptOpen* o = &w->sec;
    if (w->failed) return writer_fail(w, err, errlen, "earlier error");
    if (!o->open) return writer_fail(w, err, errlen, "section ended with none begun");
    if (o->given != o->bytes) return writer_fail(w, err, errlen, "section '%s' ended after %zu of its %zu bytes", o->name, o->given, o->bytes);
    if (o->bytes == 0) { // one empty block: a finished deflate stream of nothing
        w->lanes[0].in = NULL;
        w->lanes[0].n = 0;
        o->pending = 1;
    }
    if (o->pending > 0 && flush_blocks(w, err, errlen) != 0) return -1;
    unsigned char tail[4];
    for (int i = 0; i < 4; i++) tail[i] = (unsigned char)(o->adler >> (24 - 8 * i)); // big-endian, as zlib's trailer
    if (write_all(w, tail, 4, err, errlen) != 0) return -1;
    o->crc_comp = ckpt_crc32(o->crc_comp, tail, 4);
    o->comp += 4;

    unsigned char desc[CKPT_DESC_BYTES] = {0};
    memcpy(desc, o->name, strlen(o->name));
    put_u32(desc + 32, (uint32_t)o->elem_size);
    put_u32(desc + 36, (uint32_t)o->shuffled);
    put_u64(desc + 40, (uint64_t)o->bytes);
    put_u64(desc + 48, o->comp);
    put_u32(desc + 56, o->crc_comp);
    put_u32(desc + 60, o->crc_raw);
    put_u32(desc + 76, ckpt_crc32(0, desc, 76));
    if (pwrite_all(w, desc, sizeof desc, o->desc_at, err, errlen) != 0) return -1;

    if (w->num_sections == w->cap_sections) {
        w->cap_sections = w->cap_sections ? 2 * w->cap_sections : 16;
        w->names = (char(*)[CKPT_NAME_CAP])realloc_check(w->names, (size_t)w->cap_sections * CKPT_NAME_CAP);
    }
    snprintf(w->names[w->num_sections++], CKPT_NAME_CAP, "%s", o->name);
    o->open = 0;
    return 0;
}

int ckpt_writer_add(CkptWriter* w, const char* name, const void* data, size_t bytes, int elem_size, char* err, size_t errlen) {
    if (ckpt_writer_begin(w, name, bytes, elem_size, err, errlen) != 0 || ckpt_writer_put(w, data, bytes, err, errlen) != 0) return -1;
    return ckpt_writer_end(w, err, errlen);
}

int ckpt_writer_commit(CkptWriter* w, char* path_out, size_t path_cap, char* err, size_t errlen) {
    if (w->failed || w->sec.open) {
        if (w->failed) writer_fail(w, err, errlen, "earlier error");
        else writer_fail(w, err, errlen, "section '%s' still open", w->sec.name);
        writer_free(w);
        return -1;
    }
    unsigned char hdr[CKPT_HEADER_BYTES] = {0};
    put_u32(hdr + 0, CKPT_MAGIC);
    put_u32(hdr + 4, CKPT_VERSION);
    put_u32(hdr + 8, (uint32_t)w->num_sections);
    put_u32(hdr + 12, CKPT_DESC_BYTES);
    put_u32(hdr + 16, CKPT_SHUFFLE_BLOCK);
    put_u64(hdr + 20, (uint64_t)w->step);
    put_u64(hdr + 28, w->offset);
    put_u32(hdr + 36, (uint32_t)w->level);
    put_u32(hdr + 1020, ckpt_crc32(0, hdr, 1020));
    int rc = pwrite_all(w, hdr, sizeof hdr, 0, err, errlen);
    if (rc == 0 && fsync(w->fd) != 0) rc = writer_fail(w, err, errlen, "fsync failed: %s", strerror(errno));
    if (rc == 0) {
        int fd = w->fd;
        w->fd = -1;
        if (close(fd) != 0) rc = writer_fail(w, err, errlen, "close failed: %s", strerror(errno));
    }
    if (rc == 0 && rename(w->tmp_path, w->final_path) != 0)
        rc = writer_fail(w, err, errlen, "rename to %s failed: %s", w->final_path, strerror(errno));
    if (rc == 0) { // make the rename itself durable
        int dfd = open(w->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0 || (fsync(dfd) != 0 && errno != EINVAL)) {
            td_error(err, errlen, "%s: written, but fsync of directory %s failed: %s", w->final_path, w->dir, strerror(errno));
            rc = -1;
        }
        if (dfd >= 0) close(dfd);
    }
    if (rc == 0 && path_out) snprintf(path_out, path_cap, "%s", w->final_path);
    writer_free(w);
    return rc;
}

#define CKPT_KEPT_SUFFIX ".tdck.kept"

int ckpt_name_kept(const char* name) { return strncmp(name, "ckpt_", 5) == 0 && strstr(name, CKPT_KEPT_SUFFIX) != NULL; }

int ckpt_keep_aside(const char* path, char* kept, size_t cap, char* err, size_t errlen) {
    struct stat st;
    kept[0] = 0;
    if (lstat(path, &st) != 0) return 0;
    errno = EEXIST; // (when all 1000 names are taken)
    for (int k = 1; k <= 1000; k++) {
        int n = k == 1 ? snprintf(kept, cap, "%s.kept", path) : snprintf(kept, cap, "%s.kept-%d", path, k);
        if (n < 0 || (size_t)n >= cap) break;
        if (lstat(kept, &st) == 0) continue;
        if (errno == ENOENT && rename(path, kept) == 0) return 1;
        break;
    }
    kept[0] = 0;
    return td_error(err, errlen, "%s is there already and cannot be kept aside: %s", path, strerror(errno));
}

void ckpt_writer_abort(CkptWriter* w) {
    if (!w) return;
    if (!w->failed) unlink(w->tmp_path);
    writer_free(w);
}

// ----------------------------------------------------------------------------------------------
// reader

static int pread_full(int fd, void* buf, size_t n, uint64_t at, size_t* got) {
    unsigned char* p = (unsigned char*)buf;
    *got = 0;
    while (*got < n) {
        ssize_t k = pread(fd, p + *got, n - *got, (off_t)(at + *got));
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return -1;
        if (k == 0) break;
        *got += (size_t)k;
    }
    return 0;
}

static const char* foreign_magic(uint32_t magic) {
    if (magic == 20240326u) return " (an llm.c model file)";
    if (magic == 20240520u) return " (an llm.c token shard)";
    return "";
}

typedef struct {
    uint64_t at;               // file offset of the payload
    uint32_t crc_comp, crc_raw; // as recorded in the descriptor
} PayloadLoc;

// Parses and checks the header and every descriptor (CRCs, sizes, truncation, trailing bytes)
// without touching the payloads; fills c->sections (data NULL) and loc. 0, or -1 + err.
static int read_layout(int fd, const char* path, uint64_t size, Ckpt* c, PayloadLoc* loc, char* err, size_t errlen) {
    unsigned char hdr[CKPT_HEADER_BYTES];
    size_t got;
    if (pread_full(fd, hdr, sizeof hdr, 0, &got) != 0) {
        td_error(err, errlen, "%s: read failed: %s", path, strerror(errno));
        return -1;
    }
    if (got == 0) {
        td_error(err, errlen, "%s: truncated (empty file)", path);
        return -1;
    }
    if (got >= 4 && get_u32(hdr) != CKPT_MAGIC) {
        td_error(err, errlen, "%s: not a tdpipe checkpoint (magic 0x%08x%s, expected 0x%08x)", path, get_u32(hdr), foreign_magic(get_u32(hdr)), CKPT_MAGIC);
        return -1;
    }
    if (got >= 8 && get_u32(hdr + 4) != CKPT_VERSION) {
        td_error(err, errlen, "%s: version %u not supported (this build reads %d)", path, get_u32(hdr + 4), CKPT_VERSION);
        return -1;
    }
    if (got < sizeof hdr) {
        td_error(err, errlen, "%s: truncated (header needs %zu more bytes)", path, sizeof hdr - got);
        return -1;
    }
    if (get_u32(hdr + 1020) != ckpt_crc32(0, hdr, 1020)) {
        td_error(err, errlen, "%s: header CRC mismatch (file damaged)", path);
        return -1;
    }
    uint32_t nsec = get_u32(hdr + 8);
    uint64_t step = get_u64(hdr + 20), file_bytes = get_u64(hdr + 28);
    if (nsec > CKPT_MAX_SECTIONS || get_u32(hdr + 12) != CKPT_DESC_BYTES || get_u32(hdr + 16) != CKPT_SHUFFLE_BLOCK ||
        step > (uint64_t)0x7fffffffffffffffull || get_u32(hdr + 36) > CKPT_LEVEL_HUFFMAN) {
        td_error(err, errlen, "%s: header fields invalid (sections %u, descriptor %u bytes, shuffle block %u, level %u)", path, nsec,
                get_u32(hdr + 12), get_u32(hdr + 16), get_u32(hdr + 36));
        return -1;
    }
    c->step = (long)step;
    c->zlib_level = (int)get_u32(hdr + 36);
    c->sections = (CkptSection*)calloc_check(nsec ? nsec : 1, sizeof(CkptSection));
    c->num_sections = (int)nsec;

    uint64_t pos = CKPT_HEADER_BYTES;
    for (uint32_t i = 0; i < nsec; i++) {
        unsigned char d[CKPT_DESC_BYTES];
        if (size < pos + CKPT_DESC_BYTES) {
            td_error(err, errlen, "%s: truncated (descriptor of section %u of %u needs %llu more bytes)", path, i + 1, nsec,
                    (unsigned long long)(pos + CKPT_DESC_BYTES - (size > pos ? size : pos)));
            return -1;
        }
        if (pread_full(fd, d, sizeof d, pos, &got) != 0 || got != sizeof d) {
            td_error(err, errlen, "%s: read failed at byte %llu: %s", path, (unsigned long long)pos, got == sizeof d ? strerror(errno) : "file shrank");
            return -1;
        }
        if (get_u32(d + 76) != ckpt_crc32(0, d, 76)) {
            td_error(err, errlen, "%s: descriptor of section %u of %u: CRC mismatch (file damaged)", path, i + 1, nsec);
            return -1;
        }
        CkptSection* s = &c->sections[i];
        memcpy(s->name, d, CKPT_NAME_CAP);
        s->name[CKPT_NAME_CAP - 1] = 0;
        uint32_t elem = get_u32(d + 32), flags = get_u32(d + 36);
        uint64_t raw = get_u64(d + 40), comp = get_u64(d + 48);
        int reserved_zero = 1;
        for (int k = 64; k < 76; k++) reserved_zero &= d[k] == 0;
        if (d[CKPT_NAME_CAP - 1] != 0 || !valid_name(s->name) || !valid_elem_size((int)elem) || flags > 1 || !reserved_zero ||
            raw / ZLIB_MAX_RATIO > comp + 1) {
            td_error(err, errlen, "%s: descriptor of section %u of %u invalid (elem size %u, flags %u, %llu raw from %llu compressed bytes)",
                    path, i + 1, nsec, elem, flags, (unsigned long long)raw, (unsigned long long)comp);
            return -1;
        }
        for (uint32_t k = 0; k < i; k++)
            if (strcmp(c->sections[k].name, s->name) == 0) {
                td_error(err, errlen, "%s: section '%s' appears twice", path, s->name);
                return -1;
            }
        s->elem_size = (int)elem;
        s->shuffled = (int)flags;
        s->bytes = (size_t)raw;
        s->comp_bytes = (size_t)comp;
        pos += CKPT_DESC_BYTES;
        loc[i].at = pos;
        loc[i].crc_comp = get_u32(d + 56);
        loc[i].crc_raw = get_u32(d + 60);
        if (size - pos < comp) {
            td_error(err, errlen, "%s: truncated (section '%s' needs %llu more bytes)", path, s->name, (unsigned long long)(comp - (size - pos)));
            return -1;
        }
        pos += comp;
    }
    if (pos < size) {
        td_error(err, errlen, "%s: %llu bytes of trailing data after the last section", path, (unsigned long long)(size - pos));
        return -1;
    }
    if (pos != file_bytes) {
        td_error(err, errlen, "%s: header says %llu bytes but the sections end at byte %llu", path, (unsigned long long)file_bytes, (unsigned long long)pos);
        return -1;
    }
    return 0;
}

// what read_payload does with a section's bytes besides checking the compressed CRC: keep them
// (s->data), hand them to a sink block by block, or nothing (then they are not decompressed)
typedef struct {
    int keep;
    const CkptSink* sink;
    unsigned char* raw; // (CKPT_SHUFFLE_BLOCK) a sink's unshuffled block
} PayloadUse;

// Streams one payload: CRC of the compressed bytes always; to keep it or give it to a sink,
// inflates and unshuffles it and checks the raw CRC. The compressed CRC is judged first so that a
// damaged file is reported as damaged even when inflate trips over the damage before the CRC is complete.
static int read_payload(int fd, const char* path, CkptSection* s, PayloadLoc loc, PayloadUse use, z_stream* zs, unsigned char* inbuf, unsigned char* blk, char* err, size_t errlen) {
    unsigned char* dst = NULL; // (s->bytes,) when kept
    int decode = use.keep || use.sink;
    int blocks = s->shuffled || use.sink; // decoded a block at a time through blk (else straight into dst)
    uint32_t crc_raw = 0;                 // a sink's: of the blocks as they pass
    if (use.keep) {
        dst = (unsigned char*)malloc(s->bytes ? s->bytes : 1);
        if (!dst) {
            td_error(err, errlen, "%s: section '%s': out of memory for %zu bytes", path, s->name, s->bytes);
            return -1;
        }
    }
    if (decode) {
        if (inflateReset(zs) != Z_OK) {
            free(dst);
            td_error(err, errlen, "%s: zlib inflateReset failed", path);
            return -1;
        }
    }
    const char* bad = NULL;  // first decoding problem, reported only if the compressed CRC holds
    size_t produced = 0;     // raw bytes decoded so far
    size_t blk_start = 0, blk_fill = 0; // the block being filled (shuffled or for a sink): its raw offset and fill
    int zret = Z_OK;
    uint32_t crc = 0;
    uint64_t at = loc.at;
    for (size_t remaining = s->comp_bytes; remaining > 0;) {
        size_t n = remaining < IO_CHUNK ? remaining : IO_CHUNK, got;
        if (pread_full(fd, inbuf, n, at, &got) != 0 || got != n) {
            td_error(err, errlen, "%s: section '%s': read failed at byte %llu: %s", path, s->name, (unsigned long long)at, got == n ? strerror(errno) : "file shrank");
            free(dst);
            return -1;
        }
        crc = ckpt_crc32(crc, inbuf, n);
        if (decode && !bad) {
            zs->next_in = inbuf;
            zs->avail_in = (uInt)n;
            while (zs->avail_in > 0 && zret != Z_STREAM_END) {
                unsigned char probe, *o;
                size_t cap, blen = 0;
                if (blocks) {
                    blen = block_len(s->bytes, blk_start);
                    o = blk + blk_fill;
                    cap = blen - blk_fill;
                } else {
                    o = dst + produced;
                    cap = s->bytes - produced;
                }
                int probing = cap == 0; // output is full: the rest may only be the stream's trailer
                if (probing) {
                    o = &probe;
                    cap = 1;
                }
                if (cap > (1u << 30)) cap = 1u << 30;
                zs->next_out = o;
                zs->avail_out = (uInt)cap;
                zret = inflate(zs, Z_NO_FLUSH);
                if (zret != Z_OK && zret != Z_STREAM_END) {
                    bad = zs->msg ? zs->msg : "zlib inflate error";
                    break;
                }
                size_t out = cap - zs->avail_out;
                if (probing && out > 0) {
                    bad = "decompresses to more bytes than its descriptor says";
                    break;
                }
                produced += out;
                if (blocks) {
                    blk_fill += out;
                    if (blk_fill == blen && blen > 0) {
                        const unsigned char* raw = blk; // (blen) the block's raw bytes
                        if (s->shuffled) {
                            unsigned char* to = use.sink ? use.raw : dst + blk_start;
                            unshuffle_block(to, blk, blen, s->elem_size);
                            raw = to;
                        }
                        if (use.sink) {
                            crc_raw = ckpt_crc32(crc_raw, raw, blen);
                            use.sink->put(use.sink->ctx, blk_start, raw, blen);
                        }
                        blk_start += blen;
                        blk_fill = 0;
                    }
                }
            }
            if (!bad && zret == Z_STREAM_END && zs->avail_in > 0) bad = "bytes after the end of the zlib stream";
        }
        remaining -= n;
        at += n;
    }
    if (crc != loc.crc_comp) {
        td_error(err, errlen, "%s: section '%s': CRC mismatch (file damaged)", path, s->name);
        free(dst);
        return -1;
    }
    if (decode) {
        if (!bad && zret != Z_STREAM_END) bad = "zlib stream ends early";
        if (!bad && produced != s->bytes) bad = "decompressed size differs from its descriptor";
        if (bad) {
            td_error(err, errlen, "%s: section '%s': corrupt compressed data (%s)", path, s->name, bad);
            free(dst);
            return -1;
        }
        if ((use.sink ? crc_raw : ckpt_crc32(0, dst, s->bytes)) != loc.crc_raw) {
            td_error(err, errlen, "%s: section '%s': CRC of the decompressed data mismatch (written damaged)", path, s->name);
            free(dst);
            return -1;
        }
        s->data = dst;
    }
    return 0;
}

// st (may be NULL) receives the identity of the file that was read. load: keep the sections of at
// most keep_max bytes; sinks (n_sinks): the sections streamed to them (each must be present), the
// other sections then not read at all
static int read_container(const char* path, Ckpt* out, int load, size_t keep_max, const CkptSink* sinks, int n_sinks, struct stat* st, char* err,
                          size_t errlen) {
    memset(out, 0, sizeof *out);
    long long size;
    int fd = td_open_regular(path, "checkpoint", &size, err, errlen);
    if (fd < 0) return -1;
    if (st && fstat(fd, st) != 0) memset(st, 0, sizeof *st);
    PayloadLoc* loc = (PayloadLoc*)calloc_check(CKPT_MAX_SECTIONS, sizeof(PayloadLoc));
    int rc = read_layout(fd, path, (uint64_t)size, out, loc, err, errlen);
    out->file_bytes = (size_t)size;
    for (int k = 0; rc == 0 && k < n_sinks; k++)
        if (!ckpt_section_entry(out, sinks[k].name)) rc = td_error(err, errlen, "%s: checkpoint has no section '%s'", path, sinks[k].name);
    if (rc == 0 && out->num_sections > 0) {
        unsigned char* inbuf = (unsigned char*)malloc_check(IO_CHUNK);
        unsigned char* blk = (unsigned char*)malloc_check(CKPT_SHUFFLE_BLOCK);
        unsigned char* raw = n_sinks ? (unsigned char*)malloc_check(CKPT_SHUFFLE_BLOCK) : NULL;
        z_stream zs;
        memset(&zs, 0, sizeof zs);
        int inflating = (load || n_sinks) && inflateInit(&zs) == Z_OK;
        if ((load || n_sinks) && !inflating) rc = td_error(err, errlen, "%s: zlib inflateInit failed", path);
        for (int i = 0; rc == 0 && i < out->num_sections; i++) {
            CkptSection* sec = &out->sections[i];
            PayloadUse use = {load && sec->bytes <= keep_max, NULL, raw};
            for (int k = 0; k < n_sinks; k++)
                if (strcmp(sinks[k].name, sec->name) == 0) use.sink = &sinks[k];
            if (use.sink) use.keep = 0;
            else if (n_sinks) continue; // streaming: the others were checked when the file was chosen
            rc = read_payload(fd, path, sec, loc[i], use, &zs, inbuf, blk, err, errlen);
        }
        if (inflating) inflateEnd(&zs);
        free(inbuf);
        free(blk);
        free(raw);
    }
    free(loc);
    close(fd);
    if (rc != 0) ckpt_free(out);
    return rc;
}

int ckpt_read(const char* path, Ckpt* out, char* err, size_t errlen) { return read_container(path, out, 1, SIZE_MAX, NULL, 0, NULL, err, errlen); }

int ckpt_verify(const char* path, char* err, size_t errlen) {
    Ckpt c;
    int rc = read_container(path, &c, 0, 0, NULL, 0, NULL, err, errlen);
    ckpt_free(&c);
    return rc;
}

int ckpt_read_sinks(const char* path, const CkptSink* sinks, int n, char* err, size_t errlen) {
    Ckpt c;
    int rc = read_container(path, &c, 0, 0, sinks, n, NULL, err, errlen);
    ckpt_free(&c);
    return rc;
}

const CkptSection* ckpt_section_entry(const Ckpt* c, const char* name) {
    for (int i = 0; i < c->num_sections; i++)
        if (strcmp(c->sections[i].name, name) == 0) return &c->sections[i];
    return NULL;
}

const void* ckpt_section(const Ckpt* c, const char* name, size_t* bytes) {
    const CkptSection* e = ckpt_section_entry(c, name);
    if (bytes) *bytes = e ? e->bytes : 0;
    return e ? e->data : NULL;
}

void ckpt_free(Ckpt* c) {
    if (!c) return;
    for (int i = 0; i < c->num_sections && c->sections; i++) free(c->sections[i].data);
    free(c->sections);
    memset(c, 0, sizeof *c);
}

// ----------------------------------------------------------------------------------------------
// directory: listing, pruning, newest valid

typedef struct {
    long step;
    char path[PATH_CAP];
} CkptEntry;

static int entry_newer_first(const void* a, const void* b) {
    long x = ((const CkptEntry*)a)->step, y = ((const CkptEntry*)b)->step;
    return x < y ? 1 : x > y ? -1 : 0;
}

long ckpt_name_step(const char* name) {
    if (strncmp(name, "ckpt_", 5) != 0) return -1;
    const char* p = name + 5;
    long step = 0;
    int digits = 0;
    while (*p >= '0' && *p <= '9' && digits < 18) {
        step = step * 10 + (*p++ - '0');
        digits++;
    }
    return (digits > 0 && strcmp(p, ".tdck") == 0) ? step : -1;
}

int ckpt_is_temp_name(const char* name) {
    size_t n = strlen(name);
    char inner[64]; // the final name inside ".<final name>.tmp"
    if (n < 6 || n - 5 >= sizeof inner || name[0] != '.' || strcmp(name + n - 4, ".tmp") != 0) return 0;
    memcpy(inner, name + 1, n - 5);
    inner[n - 5] = 0;
    return ckpt_name_step(inner) >= 0;
}

// checkpoints of dir, newest first. 0, 1 when dir does not exist, -1 + err when it cannot be listed
static int list_ckpts(const char* dir, CkptEntry** out, int* n, char* err, size_t errlen) {
    *out = NULL;
    *n = 0;
    DIR* d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return 1;
        td_error(err, errlen, "%s: cannot list checkpoint directory: %s", dir, strerror(errno));
        return -1;
    }
    int cap = 0;
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        long step = ckpt_name_step(e->d_name);
        if (step < 0) continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            *out = (CkptEntry*)realloc_check(*out, (size_t)cap * sizeof(CkptEntry));
        }
        (*out)[*n].step = step;
        snprintf((*out)[*n].path, PATH_CAP, "%s/%s", dir, e->d_name);
        (*n)++;
    }
    closedir(d);
    if (*n > 1) qsort(*out, (size_t)*n, sizeof(CkptEntry), entry_newer_first);
    return 0;
}

// A checkpoint that resume would accept: it passes ckpt_verify and its header's step is its
// name's. st receives the identity of the file that was judged.
static int entry_valid(const CkptEntry* e, struct stat* st) {
    Ckpt c;
    int ok = read_container(e->path, &c, 0, 0, NULL, 0, st, NULL, 0) == 0 && c.step == e->step;
    ckpt_free(&c);
    return ok;
}

int ckpt_prune(const char* dir, int keep, char* err, size_t errlen) {
    if (keep < 1) {
        td_error(err, errlen, "%s: --keep %d: must keep at least 1 checkpoint", dir, keep);
        return -1;
    }
    CkptEntry* es;
    int n;
    int r = list_ckpts(dir, &es, &n, err, errlen);
    if (r != 0) {
        if (r == 1) td_error(err, errlen, "%s: cannot prune: directory does not exist", dir);
        return -1;
    }
    int rc = 0, kept = 0;
    for (int i = 0; i < n; i++) {
        struct stat judged, now;
        if (!entry_valid(&es[i], &judged)) continue; // not a checkpoint of ours: never deleted, never counted
        if (kept < keep) {
            kept++;
            continue;
        }
        // only the very file that was verified: not one that replaced it since
        if (lstat(es[i].path, &now) != 0 || !S_ISREG(now.st_mode) || now.st_dev != judged.st_dev || now.st_ino != judged.st_ino) continue;
        if (unlink(es[i].path) != 0 && rc == 0) {
            td_error(err, errlen, "%s: cannot delete old checkpoint: %s", es[i].path, strerror(errno));
            rc = -1;
        }
    }
    free(es);
    return rc;
}

static void note_add(char* note, size_t cap, const char* fmt, ...)
#ifdef __GNUC__
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static void note_add(char* note, size_t cap, const char* fmt, ...) {
    if (!note || cap == 0) return;
    size_t len = strnlen(note, cap);
    if (len + 1 >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(note + len, cap - len, fmt, ap);
    va_end(ap);
}

int ckpt_find_latest(const char* dir, size_t keep_max, Ckpt* out, char* path_out, size_t path_cap, char* note, size_t note_cap) {
    memset(out, 0, sizeof *out);
    if (note && note_cap) note[0] = 0;
    CkptEntry* es;
    int n;
    char e[PATH_CAP + 512];
    int r = list_ckpts(dir, &es, &n, e, sizeof e);
    if (r < 0) {
        note_add(note, note_cap, "%s\n", e);
        return -1;
    }
    if (r == 1 || n == 0) {
        note_add(note, note_cap, "%s: no checkpoint%s\n", dir, r == 1 ? " (directory does not exist)" : "");
        free(es);
        return 1;
    }
    for (int i = 0; i < n; i++) {
        if (read_container(es[i].path, out, 1, keep_max, NULL, 0, NULL, e, sizeof e) == 0) {
            if (out->step == es[i].step) {
                if (path_out && path_cap) snprintf(path_out, path_cap, "%s", es[i].path);
                if (i > 0) note_add(note, note_cap, "resuming from %s, the newest checkpoint that passes its checks\n", es[i].path);
                free(es);
                return 0;
            }
            snprintf(e, sizeof e, "%s: header says step %ld but the name says %ld", es[i].path, out->step, es[i].step);
            ckpt_free(out);
        }
        note_add(note, note_cap, "skipping checkpoint %s\n", e); // (e says why: damaged, truncated, unreadable)
    }
    note_add(note, note_cap, "%s: none of its %d checkpoint%s passes its checks\n", dir, n, n == 1 ? "" : "s");
    free(es);
    return -1;
}
