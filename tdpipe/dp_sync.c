// The replicas' bucketed two-shot gradient average (see dp_sync.h). A bucket's life:
//   phase 0  waiting: backward has not completed all its units this step
//   phase 1  its blocks quantized (int8) into buf, each owner's segment sent to it, the other
//            replicas' shares of this replica's segment received into recv; fp32: each owner's pieces
//            sent from the slot itself
//   phase 2  (this replica as owner) the D shares of its segment summed in replica order, divided by
//            D, requantized with the owner's residual; the result sent to every replica, theirs
//            received into buf (fp32: into the slot)
//   phase 3  done: every block of buf (now the owners' results) written back into the slot (fp32:
//            already there)
// Messages are point-to-point, tagged by bucket and phase, so buckets move along in whatever order
// their units complete and their messages arrive on each replica; the sums do not depend on it.
#include "dp_sync.h"
#include <math.h>
#include <string.h>
#include "llmc/common.h"
#include "llmc/quant.h"

static int int8_mode(const DpSync* ds) { return ds->cfg.quant == GRAD_QUANT_INT8; }

// a block's owner: from its slice (unit, tensor) and index in it, never from where the stage starts
static int block_owner(int unit, int tensor, size_t index, int D) { return (int)(((size_t)unit * 17 + (size_t)tensor + index) % (size_t)D); }

// bytes of an owner's segment holding `blocks` blocks of `elems` elements
static size_t seg_bytes(const DpSync* ds, int blocks, size_t elems) {
    return int8_mode(ds) ? (size_t)blocks * sizeof(float) + elems : elems * sizeof(float);
}

// the slices of the stage's gradient, the LM head's share last (unit L + 2, tensor 16)
static int gradient_slices(const Stage* st, StageSlice* out) {
    int n = stage_slices(st, out);
    if (st->range.has_head) out[n++] = (StageSlice){st->cfg.num_layers + 2, 16, 0, st->sizes[0]};
    return n;
}
static int is_head(const Stage* st, const StageSlice* s) { return s->unit == st->cfg.num_layers + 2; }

// units in the order backward completes them (gpt2_backward_weight): embeddings, head, layers down
static int units_in_order(const Stage* st, int* out) {
    int n = 0, L = st->cfg.num_layers;
    if (st->range.has_embed) out[n++] = 0;
    if (st->range.has_head) out[n++] = L + 2, out[n++] = L + 1;
    for (int l = st->range.l1 - 1; l >= st->range.l0; l--) out[n++] = 1 + l;
    return n;
}

// the blocks of bucket b (units[u0..u1) in backward's order), laid out by owner
static void bucket_build(DpSync* ds, DpBucket* b, const int* units, int u0, int u1, const StageSlice* sl, int n_sl) {
    int D = ds->D;
    size_t cap = 0;
    b->n_units = u1 - u0;
    b->first_unit = units[u0];
    for (int i = u0; i < u1; i++) b->first_unit = units[i] < b->first_unit ? units[i] : b->first_unit;
    for (int s = 0; s < n_sl; s++)
        for (int i = u0; i < u1; i++)
            if (sl[s].unit == units[i]) cap += quant_blocks(sl[s].n, ds->cfg.block);
    b->blocks = (DpBlock*)calloc_check(cap ? cap : 1, sizeof(DpBlock));
    b->seg_off = (size_t*)calloc_check(D + 1, sizeof(size_t));
    b->seg_blocks = (int*)calloc_check(D, sizeof(int));
    b->seg_elems = (size_t*)calloc_check(D, sizeof(size_t));
    b->n_blocks = 0;
    for (int i = u0; i < u1; i++) // blocks in the units' order, each slice's from its start
        for (int s = 0; s < n_sl; s++) {
            if (sl[s].unit != units[i]) continue;
            for (size_t j = 0, off = 0; off < sl[s].n; j++, off += (size_t)ds->cfg.block) {
                DpBlock* blk = &b->blocks[b->n_blocks++];
                blk->src = sl[s].off + off;
                blk->len = (uint32_t)(sl[s].n - off < (size_t)ds->cfg.block ? sl[s].n - off : (size_t)ds->cfg.block);
                blk->head = is_head(ds->st, &sl[s]);
                blk->owner = block_owner(sl[s].unit, sl[s].tensor, j, D);
                blk->idx = (uint32_t)b->seg_blocks[blk->owner]++;
                blk->elem = b->seg_elems[blk->owner];
                b->seg_elems[blk->owner] += blk->len;
            }
        }
    for (int j = 0; j < D; j++) b->seg_off[j + 1] = b->seg_off[j] + seg_bytes(ds, b->seg_blocks[j], b->seg_elems[j]);
    if (int8_mode(ds)) return;
    // fp32: each run of blocks contiguous in memory (a slice, or slices that follow each other)
    // counted by owner, then cut into one piece per owner, in owner order
    size_t* count = (size_t*)calloc_check(D, sizeof(size_t));
    size_t* elem = (size_t*)calloc_check(D, sizeof(size_t));
    b->pieces = (DpPiece*)calloc_check((size_t)D * (cap ? cap : 1), sizeof(DpPiece));
    for (int i = 0, j; i < b->n_blocks; i = j) {
        const DpBlock* first = &b->blocks[i];
        size_t end = first->src;
        memset(count, 0, D * sizeof(size_t));
        for (j = i; j < b->n_blocks && b->blocks[j].src == end && b->blocks[j].head == first->head; j++) {
            count[b->blocks[j].owner] += b->blocks[j].len;
            end += b->blocks[j].len;
        }
        size_t at = first->src;
        for (int o = 0; o < D; o++) {
            if (!count[o]) continue;
            b->pieces[b->n_pieces++] = (DpPiece){at, count[o], first->head, o, elem[o]};
            at += count[o];
            elem[o] += count[o];
        }
    }
    free(count);
    free(elem);
}

// the requests a phase of bucket b posts at most: int8 a send and a receive a peer; fp32 D - 1 a piece
static size_t bucket_reqs(const DpSync* ds, const DpBucket* b) { return int8_mode(ds) ? 2 * (size_t)(ds->D - 1) : (size_t)(ds->D - 1) * b->n_pieces; }

// a bucket's host buffers: its segments (int8), the other replicas' shares of this replica's, the requests
static void bucket_buffers(const DpSync* ds, DpBucket* b) {
    int D = ds->D;
    b->buf = int8_mode(ds) ? (uint8_t*)malloc_check(b->seg_off[D] ? b->seg_off[D] : 1) : NULL;
    size_t mine = b->seg_off[ds->me + 1] - b->seg_off[ds->me];
    b->recv = (uint8_t*)malloc_check((D - 1) * mine + 1);
    b->req = (CommRequest*)calloc_check(bucket_reqs(ds, b) + 1, sizeof(CommRequest));
}

void dp_sync_init_plan(DpSync* ds, const DpSyncConfig* cfg, Comm* c, Stage* st, int plan_only) {
    memset(ds, 0, sizeof(*ds));
    ds->cfg = *cfg;
    ds->comm = c;
    ds->st = st;
    ds->D = c->D;
    ds->me = c->replica;
    int Ls = st->range.l1 - st->range.l0;
    ds->n_units = st->cfg.num_layers + 3;
    StageSlice* sl = (StageSlice*)malloc_check((STAGE_MAX_SLICES(Ls) + 1) * sizeof(StageSlice));
    int n_sl = gradient_slices(st, sl);
    int* units = (int*)malloc_check((Ls + 3) * sizeof(int));
    int nu = units_in_order(st, units);
    ds->bucket_of_unit = (int*)malloc_check(ds->n_units * sizeof(int));
    for (int u = 0; u < ds->n_units; u++) ds->bucket_of_unit[u] = -1;
    ds->buckets = (DpBucket*)calloc_check(nu ? nu : 1, sizeof(DpBucket));
    for (int u0 = 0; u0 < nu;) { // whole units, in backward's order, until the bucket holds bucket_bytes
        size_t bytes = 0;
        int u1 = u0;
        while (u1 < nu && (u1 == u0 || cfg->bucket_bytes == 0 || bytes < cfg->bucket_bytes)) {
            for (int s = 0; s < n_sl; s++)
                if (sl[s].unit == units[u1]) bytes += sl[s].n * sizeof(float);
            u1++;
        }
        for (int i = u0; i < u1; i++) ds->bucket_of_unit[units[i]] = ds->n_buckets;
        bucket_build(ds, &ds->buckets[ds->n_buckets], units, u0, u1, sl, n_sl);
        if (!plan_only) bucket_buffers(ds, &ds->buckets[ds->n_buckets]);
        ds->n_buckets++;
        u0 = u1;
    }
    free(sl);
    free(units);
    size_t n = st->num_params + (st->range.has_head ? st->sizes[0] : 0);
    if (int8_mode(ds) && cfg->error_feedback) {
        ds->ef_replica = (float*)calloc_check(n, sizeof(float));
        ds->ef_owner = (float*)calloc_check(n, sizeof(float));
    }
    if (!plan_only) {
        ds->scratch = (float*)malloc_check((size_t)cfg->block * sizeof(float));
        ds->shares = (const float**)malloc_check((size_t)ds->D * sizeof(float*));
    }
}

void dp_sync_init(DpSync* ds, const DpSyncConfig* cfg, Comm* c, Stage* st) { dp_sync_init_plan(ds, cfg, c, st, 0); }

void dp_sync_free(DpSync* ds) {
    for (int i = 0; i < ds->n_buckets; i++) {
        DpBucket* b = &ds->buckets[i];
        free(b->blocks);
        free(b->pieces);
        free(b->seg_off);
        free(b->seg_blocks);
        free(b->seg_elems);
        free(b->buf);
        free(b->recv);
        free(b->req);
    }
    free(ds->buckets);
    free(ds->bucket_of_unit);
    free(ds->ef_replica);
    free(ds->ef_owner);
    free(ds->scratch);
    free(ds->shares);
    memset(ds, 0, sizeof(*ds));
}

DpSyncBounds dp_sync_bounds(const DpSyncConfig* cfg, const Stage* st, int D) {
    DpSyncBounds b;
    StageSlice* sl = (StageSlice*)malloc_check((STAGE_MAX_SLICES(st->range.l1 - st->range.l0) + 1) * sizeof(StageSlice));
    size_t ns = (size_t)gradient_slices(st, sl), blk = (size_t)cfg->block;
    free(sl);
    int int8 = cfg->quant == GRAD_QUANT_INT8;
    b.elems = st->num_params + (st->range.has_head ? st->sizes[0] : 0);
    b.blocks = (b.elems + blk - 1) / blk + ns; // each slice's last block may be short
    // an owner's share: owners rotate along a slice's blocks, so each slice gives one owner at most
    // one block more than its 1 / D of them
    b.share_elems = b.elems / (size_t)D + ns * blk;
    b.share_blocks = b.blocks / (size_t)D + ns;
    b.all_bytes = int8 ? b.elems + 4 * b.blocks : 4 * b.elems;
    b.share_bytes = int8 ? b.share_elems + 4 * b.share_blocks : 4 * b.share_elems;
    b.units = (size_t)st->cfg.num_layers + 3;
    b.slices = ns;
    return b;
}

double dp_sync_planned_bytes(const DpSyncConfig* cfg, const Stage* st, int D) {
    DpSyncBounds b = dp_sync_bounds(cfg, st, D);
    double ef = cfg->quant == GRAD_QUANT_INT8 && cfg->error_feedback ? 8.0 * b.elems : 0.0;
    double per_bucket = (double)(D + 1) * sizeof(size_t) + D * (sizeof(int) + sizeof(size_t)) + (2.0 * (D - 1) + 1) * sizeof(CommRequest) + 3.0 +
                        sizeof(DpBucket); // tables, requests, the 1-byte minimum of buf and recv
    // fp32: the pieces (D per block reserved, D at least a bucket) and D - 1 requests a piece (D a slice at most)
    double pieces = cfg->quant == GRAD_QUANT_INT8 ? 0.0 : (double)D * (b.blocks + b.units) * sizeof(DpPiece) + (double)(D - 1) * D * b.slices * sizeof(CommRequest);
    return (double)b.all_bytes + (double)(D - 1) * b.share_bytes + ef + (double)b.blocks * sizeof(DpBlock) + (double)b.units * (per_bucket + sizeof(int)) +
           4.0 * cfg->block + (double)D * sizeof(float*) + pieces;
}

double dp_sync_held_bytes(const DpSync* ds) {
    int D = ds->D;
    double bytes = (double)ds->n_units * (sizeof(int) + sizeof(DpBucket)) + (ds->scratch ? 4.0 * ds->cfg.block + (double)D * sizeof(float*) : 0.0); // (buckets: one a unit at most, reserved)
    size_t n = ds->st->num_params + (ds->st->range.has_head ? ds->st->sizes[0] : 0);
    if (ds->ef_replica) bytes += 8.0 * n;
    for (int i = 0; i < ds->n_buckets; i++) {
        const DpBucket* b = &ds->buckets[i];
        bytes += (double)(b->n_blocks ? b->n_blocks : 1) * sizeof(DpBlock) + (double)(D + 1) * sizeof(size_t) + D * (sizeof(int) + sizeof(size_t));
        if (b->pieces) bytes += (double)D * (b->n_blocks ? b->n_blocks : 1) * sizeof(DpPiece);
        if (b->recv) bytes += (b->buf ? (double)(b->seg_off[D] ? b->seg_off[D] : 1) : 0.0) + (double)(D - 1) * (b->seg_off[ds->me + 1] - b->seg_off[ds->me]) +
                              1.0 + (bucket_reqs(ds, b) + 1.0) * sizeof(CommRequest);
    }
    return bytes;
}

static double alloc_bytes(size_t bytes) { return (double)(bytes ? bytes : 1); } // (the allocations take one byte at least)

DpSyncDeviceSizes dp_sync_device_sizes(const DpSync* p) {
    DpSyncDeviceSizes z;
    memset(&z, 0, sizeof z);
    int D = p->D, me = p->me, nb = p->n_buckets;
    for (int b = 0; b < nb; b++) {
        const DpBucket* k = &p->buckets[b];
        size_t mine = k->seg_off[me + 1] - k->seg_off[me], recv = (size_t)(D - 1) * mine, acc = k->seg_elems[me] * sizeof(float);
        z.n_blocks += (size_t)k->n_blocks;
        z.n_mine += (size_t)k->seg_blocks[me];
        z.buf = k->seg_off[D] > z.buf ? k->seg_off[D] : z.buf;
        z.recv = recv > z.recv ? recv : z.recv;
        z.acc = acc > z.acc ? acc : z.acc;
    }
    size_t n = p->st->num_params + (p->st->range.has_head ? p->st->sizes[0] : 0);
    z.total = alloc_bytes(z.n_blocks * sizeof(DpBlock)) + alloc_bytes(z.n_mine * sizeof(uint32_t)) + alloc_bytes((size_t)nb * (D + 1) * sizeof(size_t)) +
              alloc_bytes((size_t)nb * D * sizeof(int)) + alloc_bytes(z.buf) + alloc_bytes(z.recv) + (int8_mode(p) ? alloc_bytes(z.acc) : 0.0) +
              (p->ef_replica ? 2.0 * alloc_bytes(n * sizeof(float)) : 0.0) + alloc_bytes(DP_SYNC_DEVICE_COUNTERS * sizeof(unsigned long long));
    return z;
}

double dp_sync_device_planned_bytes(const DpSyncConfig* cfg, const Stage* st, int D) {
    DpSyncBounds b = dp_sync_bounds(cfg, st, D);
    int int8 = cfg->quant == GRAD_QUANT_INT8;
    double ef = int8 && cfg->error_feedback ? 8.0 * b.elems : 0.0;
    return (double)b.blocks * sizeof(DpBlock) + (double)b.share_blocks * sizeof(uint32_t) + (double)b.units * ((D + 1) * sizeof(size_t) + D * sizeof(int)) +
           (double)b.all_bytes + (double)(D - 1) * b.share_bytes + (int8 ? 4.0 * b.share_elems : 0.0) + ef + DP_SYNC_DEVICE_COUNTERS * 8.0 + 16.0;
}

// ---- one bucket's phases -------------------------------------------------------------------------

static float* src_of(const DpSync* ds, const DpBlock* blk) { return (blk->head ? ds->head : ds->grads) + blk->src; }
static float* residual_of(float* ef, const DpSync* ds, const DpBlock* blk) {
    return ef + (blk->head ? ds->st->num_params : 0) + blk->src;
}

// where block blk's scale and values sit in segment `seg` (int8)
static float* seg_scales(uint8_t* seg) { return (float*)seg; }
static int8_t* seg_q(const DpBucket* b, int owner, uint8_t* seg) { return (int8_t*)(seg + b->seg_blocks[owner] * sizeof(float)); }

// the other replicas in a fixed order, and the index of replica j's share in recv
static int peer_index(const DpSync* ds, int j) { return j < ds->me ? j : j - 1; }

static int tag_of(int bucket, int phase) { return 2 * bucket + phase; }

static void count(DpSync* ds, size_t bytes) { ds->stats.bytes += (double)bytes; }

// ---- fp32: pieces moved from and into the slot ------------------------------------------------------

static float* piece_of(const DpSync* ds, const DpPiece* pc) { return (pc->head ? ds->head : ds->grads) + pc->src; }
// where replica j's share of this replica's piece pc lands in recv
static float* piece_share(const DpSync* ds, DpBucket* b, const DpPiece* pc, int j) {
    return (float*)b->recv + (size_t)peer_index(ds, j) * b->seg_elems[ds->me] + pc->elem;
}

// phase 0 -> 1 (fp32): every other owner's pieces sent from the slot; the shares of this replica's received
static void pieces_post(DpSync* ds, DpBucket* b, int bi) {
    int r = 0;
    for (int i = 0; i < b->n_pieces; i++) {
        const DpPiece* pc = &b->pieces[i];
        size_t bytes = pc->len * sizeof(float);
        if (pc->owner != ds->me) {
            comm_dp_isend(ds->comm, piece_of(ds, pc), bytes, pc->owner, tag_of(bi, 0), &b->req[r++]);
            count(ds, bytes);
            continue;
        }
        for (int j = 0; j < ds->D; j++) {
            if (j == ds->me) continue;
            comm_dp_irecv(ds->comm, piece_share(ds, b, pc, j), bytes, j, tag_of(bi, 0), &b->req[r]);
            snprintf(b->req[r++].what, sizeof(b->req[0].what), "replica %d's share of gradient bucket %d", j, bi);
            count(ds, bytes);
        }
    }
    b->n_req = r;
}

// out (n) = (x_0 + x_1 + ... + x_{D-1}) / D elementwise, x_q = share[q]: COMM_ORDERED_AVERAGE's order and
// division, through scratch (chunk floats) a chunk at a time, so out may be one of the shares
static void average_ordered(float* out, const float* const* share, int D, size_t n, float* scratch, size_t chunk) {
    for (size_t c0 = 0; c0 < n; c0 += chunk) {
        size_t m = n - c0 < chunk ? n - c0 : chunk;
        memcpy(scratch, share[0] + c0, m * sizeof(float));
        for (int q = 1; q < D; q++) {
            const float* x = share[q] + c0;
            for (size_t e = 0; e < m; e++) scratch[e] += x[e];
        }
        for (size_t e = 0; e < m; e++) out[c0 + e] = scratch[e] / (float)D;
    }
}

// phase 1 -> 2 (fp32): this replica's pieces averaged in place in replica order; sent to every other
// replica, theirs received into the slot (their sends from there are done: phase 1 is complete)
static void pieces_reduce(DpSync* ds, DpBucket* b, int bi) {
    int D = ds->D, me = ds->me, r = 0;
    const float** share = ds->shares;
    for (int i = 0; i < b->n_pieces; i++) {
        const DpPiece* pc = &b->pieces[i];
        float* x = piece_of(ds, pc);
        size_t bytes = pc->len * sizeof(float);
        if (pc->owner != me) {
            comm_dp_irecv(ds->comm, x, bytes, pc->owner, tag_of(bi, 1), &b->req[r]);
            snprintf(b->req[r++].what, sizeof(b->req[0].what), "replica %d's averaged blocks of gradient bucket %d", pc->owner, bi);
            count(ds, bytes);
            continue;
        }
        for (int q = 0; q < D; q++) share[q] = q == me ? x : piece_share(ds, b, pc, q);
        average_ordered(x, share, D, pc->len, ds->scratch, (size_t)ds->cfg.block);
        for (int j = 0; j < D; j++) {
            if (j == me) continue;
            comm_dp_isend(ds->comm, x, bytes, j, tag_of(bi, 1), &b->req[r++]);
            count(ds, bytes);
        }
    }
    b->n_req = r;
}

// ---- int8 (and the blocks' layout) ----------------------------------------------------------------

// phase 0 -> 1: this replica's gradient into buf by owner; each owner's segment on its way
static void bucket_post(DpSync* ds, int bi) {
    DpBucket* b = &ds->buckets[bi];
    if (ds->t_first == 0.0) ds->t_first = now_seconds();
    b->phase = 1;
    if (!int8_mode(ds)) {
        pieces_post(ds, b, bi);
        return;
    }
    for (int i = 0; i < b->n_blocks; i++) {
        const DpBlock* blk = &b->blocks[i];
        uint8_t* seg = b->buf + b->seg_off[blk->owner];
        const float* x = src_of(ds, blk);
        int8_t* q = seg_q(b, blk->owner, seg) + blk->elem;
        float* s = seg_scales(seg) + blk->idx;
        ds->stats.nonfinite += ds->ef_replica ? quant_int8_ef(x, residual_of(ds->ef_replica, ds, blk), blk->len, blk->len, q, s)
                                              : quant_int8(x, blk->len, blk->len, q, s);
        if (ds->measure_entropy) quant_histogram_add(q, blk->len, ds->hist);
    }
    size_t mine = b->seg_off[ds->me + 1] - b->seg_off[ds->me];
    for (int j = 0; j < ds->D; j++) {
        if (j == ds->me) continue;
        int p = peer_index(ds, j);
        size_t bytes = b->seg_off[j + 1] - b->seg_off[j];
        comm_dp_isend(ds->comm, b->buf + b->seg_off[j], bytes, j, tag_of(bi, 0), &b->req[p]);
        comm_dp_irecv(ds->comm, b->recv + p * mine, mine, j, tag_of(bi, 0), &b->req[ds->D - 1 + p]);
        snprintf(b->req[ds->D - 1 + p].what, sizeof(b->req[0].what), "replica %d's share of gradient bucket %d", j, bi);
        count(ds, bytes + mine);
    }
    b->n_req = 2 * (ds->D - 1);
}

// the share of this replica's segment that replica q sent (its own for q = me)
static uint8_t* share_of(const DpSync* ds, DpBucket* b, int q) {
    size_t mine = b->seg_off[ds->me + 1] - b->seg_off[ds->me];
    return q == ds->me ? b->buf + b->seg_off[ds->me] : b->recv + peer_index(ds, q) * mine;
}

// phase 1 -> 2: every block this replica owns summed over the replicas in replica order, / D, (int8:
// requantized); the result to every other replica, theirs into buf
static void bucket_reduce(DpSync* ds, int bi) {
    DpBucket* b = &ds->buckets[bi];
    int D = ds->D, me = ds->me;
    b->phase = 2;
    if (!int8_mode(ds)) {
        pieces_reduce(ds, b, bi);
        return;
    }
    uint8_t* out = b->buf + b->seg_off[me];
    for (int i = 0; i < b->n_blocks; i++) {
        const DpBlock* blk = &b->blocks[i];
        if (blk->owner != me) continue;
        float* acc = ds->scratch;
        memset(acc, 0, blk->len * sizeof(float));
        for (int q = 0; q < D; q++) {
            uint8_t* seg = share_of(ds, b, q);
            dequant_int8_add(seg_q(b, me, seg) + blk->elem, seg_scales(seg) + blk->idx, blk->len, blk->len, acc);
        }
        for (uint32_t e = 0; e < blk->len; e++) acc[e] /= (float)D;
        int8_t* q = seg_q(b, me, out) + blk->elem;
        float* s = seg_scales(out) + blk->idx;
        ds->stats.nonfinite_avg += ds->ef_owner ? quant_int8_ef(acc, residual_of(ds->ef_owner, ds, blk), blk->len, blk->len, q, s)
                                                : quant_int8(acc, blk->len, blk->len, q, s);
    }
    size_t mine = b->seg_off[me + 1] - b->seg_off[me];
    for (int j = 0; j < D; j++) {
        if (j == me) continue;
        int p = peer_index(ds, j);
        size_t bytes = b->seg_off[j + 1] - b->seg_off[j];
        comm_dp_isend(ds->comm, out, mine, j, tag_of(bi, 1), &b->req[p]);
        comm_dp_irecv(ds->comm, b->buf + b->seg_off[j], bytes, j, tag_of(bi, 1), &b->req[D - 1 + p]);
        snprintf(b->req[D - 1 + p].what, sizeof(b->req[0].what), "replica %d's averaged blocks of gradient bucket %d", j, bi);
        count(ds, mine + bytes);
    }
    b->n_req = 2 * (D - 1);
}

// phase 2 -> 3: the owners' results into the slot, the same bits on every replica
static void bucket_unpack(DpSync* ds, int bi) {
    DpBucket* b = &ds->buckets[bi];
    b->phase = 3;
    if (!int8_mode(ds)) return; // (fp32: received into the slot)
    for (int i = 0; i < b->n_blocks; i++) {
        const DpBlock* blk = &b->blocks[i];
        uint8_t* seg = b->buf + b->seg_off[blk->owner];
        dequant_int8(seg_q(b, blk->owner, seg) + blk->elem, seg_scales(seg) + blk->idx, blk->len, blk->len, src_of(ds, blk));
    }
}

static int phase_done(DpSync* ds, DpBucket* b) {
    for (int i = 0; i < b->n_req; i++)
        if (!comm_test(ds->comm, &b->req[i])) return 0;
    return 1;
}

// ---- the step -----------------------------------------------------------------------------------------

void dp_sync_begin(DpSync* ds, int k, int step) {
    float* head;
    float* grads = stage_host_grads(ds->st, k, &head);
    dp_sync_begin_buffers(ds, grads, head, step);
    ds->k = k;
}

void dp_sync_begin_buffers(DpSync* ds, float* grads, float* head, int step) {
    if (ds->active) td_fatal("dp_sync_begin: a sync is still running");
    ds->k = -1;
    ds->active = 1;
    ds->grads = grads;
    ds->head = head;
    ds->t_first = 0.0;
    memset(&ds->stats, 0, sizeof(ds->stats));
    ds->stats.entropy = NAN;
    ds->measure_entropy = int8_mode(ds) && step % DP_ENTROPY_EVERY == 0;
    if (ds->measure_entropy) memset(ds->hist, 0, sizeof(ds->hist));
    for (int i = 0; i < ds->n_buckets; i++) {
        ds->buckets[i].units_left = ds->buckets[i].n_units;
        ds->buckets[i].phase = 0;
    }
}

void dp_sync_unit_done(void* ctx, int unit) {
    DpSync* ds = (DpSync*)ctx;
    int bi = unit >= 0 && unit < ds->n_units ? ds->bucket_of_unit[unit] : -1;
    if (!ds->active || bi < 0) td_fatal("dp_sync_unit_done: unit %d is not being synced on this stage", unit);
    DpBucket* b = &ds->buckets[bi];
    if (--b->units_left == 0) bucket_post(ds, bi);
    dp_sync_progress(ds);
}

void dp_sync_progress(DpSync* ds) {
    if (!ds->active) return;
    for (;;) { // the lowest units first among the buckets whose shares are all here
        int best = -1;
        for (int i = 0; i < ds->n_buckets; i++) {
            DpBucket* b = &ds->buckets[i];
            if (b->phase == 2 && phase_done(ds, b)) bucket_unpack(ds, i);
            else if (b->phase == 1 && phase_done(ds, b) && (best < 0 || b->first_unit < ds->buckets[best].first_unit)) best = i;
        }
        if (best < 0) return;
        bucket_reduce(ds, best);
    }
}

void dp_sync_between(void* ds) { dp_sync_progress((DpSync*)ds); }

DpSyncStats dp_sync_finish(DpSync* ds) {
    if (!ds->active) td_fatal("dp_sync_finish: no sync was begun");
    double t0 = now_seconds();
    for (int i = 0; i < ds->n_buckets; i++) // backward did not say (a device's gradient, a gradient computed alone)
        if (ds->buckets[i].phase == 0) {
            ds->buckets[i].units_left = 0;
            bucket_post(ds, i);
        }
    for (;;) {
        dp_sync_progress(ds);
        DpBucket* pending = NULL;
        for (int i = 0; i < ds->n_buckets && !pending; i++)
            if (ds->buckets[i].phase != 3) pending = &ds->buckets[i];
        if (!pending) break;
        for (int i = 0; i < pending->n_req; i++) // every request here is posted: waiting on one cannot stall the others
            if (pending->req[i].active) {
                comm_wait(ds->comm, &pending->req[i]);
                break;
            }
    }
    double t1 = now_seconds();
    ds->stats.wait = t1 - t0;
    ds->stats.span = t1 - (ds->t_first > 0 ? ds->t_first : t0);
    if (ds->measure_entropy) ds->stats.entropy = quant_entropy_bits(ds->hist);
    if (ds->k >= 0) stage_host_grads_done(ds->st, ds->k);
    ds->active = 0;
    return ds->stats;
}

void dp_sync_clear_residuals(DpSync* ds) {
    if (!ds->ef_replica) return;
    size_t n = ds->st->num_params + (ds->st->range.has_head ? ds->st->sizes[0] : 0);
    memset(ds->ef_replica, 0, n * sizeof(float));
    memset(ds->ef_owner, 0, n * sizeof(float));
}

double dp_sync_step_bytes(const DpSync* ds) {
    double total = 0.0;
    for (int i = 0; i < ds->n_buckets; i++) {
        const DpBucket* b = &ds->buckets[i];
        double mine = (double)(b->seg_off[ds->me + 1] - b->seg_off[ds->me]), others = (double)b->seg_off[ds->D] - mine;
        total += 2.0 * (others + (ds->D - 1) * mine); // phase 1: send others', receive mine D - 1 times; phase 2: the reverse
    }
    return total;
}
