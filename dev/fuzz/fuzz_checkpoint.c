// libFuzzer target: tdpipe's checkpoint container (llmc/checkpoint.c): the full reader, and the
// verifier, which must agree with it. Each input is read as it is and once more with its header,
// descriptor and payload CRCs made right, so the fuzzer also reaches the checks behind the CRCs.
#include "dev/fuzz/fuzz_file.h"
#include "llmc/checkpoint.h"

static void put32(uint8_t* p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static uint64_t get64(const uint8_t* p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

// the layout of checkpoint.h: file size and CRCs recomputed in place
static void fix_crcs(uint8_t* b, size_t n) {
    if (n < CKPT_HEADER_BYTES) return;
    for (int i = 0; i < 8; i++) b[28 + i] = (uint8_t)((uint64_t)n >> (8 * i));
    put32(b + 1020, ckpt_crc32(0, b, 1020));
    uint32_t nsec = b[8] | b[9] << 8 | b[10] << 16 | (uint32_t)b[11] << 24;
    size_t pos = CKPT_HEADER_BYTES;
    for (uint32_t s = 0; s < nsec && n - pos >= CKPT_DESC_BYTES; s++) {
        uint8_t* d = b + pos;
        uint64_t comp = get64(d + 48);
        pos += CKPT_DESC_BYTES;
        if (comp <= n - pos) put32(d + 56, ckpt_crc32(0, b + pos, (size_t)comp));
        put32(d + 76, ckpt_crc32(0, d, 76));
        if (comp > n - pos) break;
        pos += (size_t)comp;
    }
}

static void read_both_ways(const uint8_t* data, size_t n) {
    const char* path = fuzz_file(0, data, n);
    Ckpt c;
    char err[1024];
    int read_ok = ckpt_read(path, &c, err, sizeof err) == 0;
    if (read_ok)
        for (int i = 0; i < c.num_sections; i++) {
            size_t bytes;
            if (ckpt_section(&c, c.sections[i].name, &bytes) != c.sections[i].data || bytes != c.sections[i].bytes) abort();
        }
    ckpt_free(&c);
    // the verifier skips decompression: it may accept what the reader refuses, never the reverse
    if (read_ok && ckpt_verify(path, err, sizeof err) != 0) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t n) {
    read_both_ways(data, n);
    uint8_t* fixed = (uint8_t*)malloc(n ? n : 1); // (n,)
    memcpy(fixed, data, n);
    fix_crcs(fixed, n);
    read_both_ways(fixed, n);
    free(fixed);
    return 0;
}
