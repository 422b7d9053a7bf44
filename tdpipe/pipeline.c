// Whole-pipeline services at consistency points: evaluation, sampling, gathering the model,
// consistency checks (see pipeline.h).
#include "pipeline.h"
#include <math.h>
#include <string.h>
#include "llmc/checkpoint.h"
#include "llmc/common.h"
#include "llmc/sampler.h"

enum { TAG_EVAL_LOSS = 11, TAG_TOKEN = 12, TAG_CRC = 13, TAG_GATHER = 14 };

static void send_blocking(Comm* c, const void* buf, size_t bytes, int peer, int tag) {
    CommRequest r;
    memset(&r, 0, sizeof(r));
    comm_isend(c, buf, bytes, peer, tag, &r);
    comm_wait(c, &r);
}

// one forward of slot through every stage (its tokens already loaded on the first stage), passing
// activations along the link as the executor does; returns the last stage's mean loss
static float forward_through(Pipeline* pl, int slot, int targets_valid) {
    Stage* st = pl->stage;
    int s = pl->comm->stage;
    size_t bytes = stage_msg_bytes(st, slot);
    CommRequest r;
    memset(&r, 0, sizeof(r));
    if (s > 0) {
        comm_link_irecv(pl->comm, pl->link, COMM_LINK_NEIGHBOURS, stage_input_buf(st, slot), bytes, s - 1, &r);
        comm_wait(pl->comm, &r);
    }
    Op now = {.kind = OP_F, .step = st->version, .mb = slot, .version = st->version}; // the current weights
    float loss = stage_forward(st, &now, slot, targets_valid);
    if (s < pl->P - 1) {
        comm_link_isend(pl->comm, pl->link, COMM_LINK_NEIGHBOURS, stage_output_buf(st, slot), bytes, s + 1, &r);
        comm_wait(pl->comm, &r);
    }
    return loss;
}

float pipeline_eval(Pipeline* pl, DataLoader* val, int batches, const volatile int* stop) {
    Stage* st = pl->stage;
    int s = pl->comm->stage, last = s == pl->P - 1;
    if (val) dataloader_reset(val);
    double total = 0.0;
    for (int i = 0; i < batches; i++) {
        if (stop && comm_any(pl->comm, *stop != 0)) return NAN; // a stop asked for: within one batch, on every rank together
        if (val && dataloader_next(val, stage_inputs(st, 0), stage_targets(st, 0))) td_fatal("validation data: %s", val->err);
        total += forward_through(pl, 0, last);
    }
    double mean = total / batches;
    if (pl->P > 1) {
        if (last) send_blocking(pl->comm, &mean, sizeof(mean), 0, TAG_EVAL_LOSS);
        if (s == 0) comm_recv(pl->comm, &mean, sizeof(mean), pl->P - 1, TAG_EVAL_LOSS);
    }
    return pl->comm->world_rank == 0 ? (float)mean : 0.0f;
}

void pipeline_sample(Pipeline* pl, int first, int n, float temperature, uint64_t seed, int* out) {
    if (pl->comm->replica != 0) return;
    Stage* st = pl->stage;
    int s = pl->comm->stage, last = s == pl->P - 1;
    int T = st->T, V = st->cfg.vocab_size;
    stage_reserve_sample(st);
    int* ids = stage_inputs(st, STAGE_SAMPLE_SLOT); // (T) one row
    float* probs = last ? (float*)malloc_check(V * sizeof(float)) : NULL; // (V)
    Rng rng;
    rng_init(&rng, seed);
    for (int i = 0; i < T; i++) ids[i] = first;
    if (s == 0) out[0] = first;
    for (int t = 1; t < n && t < T; t++) {
        forward_through(pl, STAGE_SAMPLE_SLOT, 0);
        int next = 0;
        if (last) {
            stage_probs(st, STAGE_SAMPLE_SLOT, t - 1, probs);
            next = sample_token(probs, V, temperature, &rng);
        }
        if (pl->P > 1) {
            if (last) send_blocking(pl->comm, &next, sizeof(next), 0, TAG_TOKEN);
            if (s == 0) comm_recv(pl->comm, &next, sizeof(next), pl->P - 1, TAG_TOKEN);
        }
        if (s == 0) {
            ids[t] = next;
            out[t] = next;
        }
    }
    free(probs);
}

void pipeline_gather(Pipeline* pl, const float* mine, float* full) { pipeline_gather_replica(pl, 0, mine, NULL, full, NULL); }

// bytes from world rank `from` into dst on rank 0: copied from mine where rank 0 holds them itself
static void gather_piece(Comm* c, void* dst, const void* mine, size_t bytes, int from) {
    if (from == 0) memcpy(dst, mine, bytes);
    else comm_world_recv(c, dst, bytes, from, TAG_GATHER);
}

// Every sending stage sends its tensors (and then the head's share) in order, one transfer each;
// world rank 0 receives them stage by stage straight into their places in full (and full_head): no
// copy of the model is staged on either side, and a tensor may be larger than one MPI message
void pipeline_gather_replica(Pipeline* pl, int replica, const float* mine, const float* head, float* full, float* full_head) {
    Stage* st = pl->stage;
    Comm* c = pl->comm;
    GPT2Piece pc[GPT2_NUM_PARAM_TENSORS];
    size_t vc = (size_t)st->cfg.padded_vocab_size * st->cfg.channels; // the head's share: (Vp, C)
    if (c->replica == replica && c->world_rank != 0) {
        gpt2_slice_pieces(&st->cfg, &st->range, pc);
        for (int i = 0; i < GPT2_NUM_PARAM_TENSORS; i++) comm_world_send(c, mine + pc[i].stage_off, pc[i].n * sizeof(float), 0, TAG_GATHER);
        if (head && st->range.has_head) comm_world_send(c, head, vc * sizeof(float), 0, TAG_GATHER);
    }
    if (c->world_rank != 0) return;
    for (int s = 0; s < pl->P; s++) {
        int from = replica * pl->P + s; // world ranks are in grid order (comm.h)
        gpt2_slice_pieces(&st->cfg, &pl->ranges[s], pc);
        for (int i = 0; i < GPT2_NUM_PARAM_TENSORS; i++) // stage s's share of tensor i: (n) floats
            gather_piece(c, full + pc[i].full_off, mine + pc[i].stage_off, pc[i].n * sizeof(float), from);
        if (head && s == pl->P - 1) gather_piece(c, full_head, head, vc * sizeof(float), from);
    }
}

const float* pipeline_whole(Pipeline* pl, const float* mine, float** buf) {
    int root = pl->comm->world_rank == 0;
    if (pl->P == 1) return root ? mine : NULL; // (the other replicas' ranks take no part in a gather either)
    if (root && !*buf) {
        GPT2Range all = {0, pl->stage->cfg.num_layers, 1, 1};
        size_t sizes[GPT2_NUM_PARAM_TENSORS];
        *buf = (float*)malloc_check(gpt2_param_sizes(&pl->stage->cfg, &all, sizes) * sizeof(float));
    }
    pipeline_gather(pl, mine, root ? *buf : NULL);
    return root ? *buf : NULL;
}

int pipeline_check_consistency(Pipeline* pl, char* msg, size_t msglen) {
    Stage* st = pl->stage;
    Comm* c = pl->comm;
    int s = c->stage, ok = 1;
    uint32_t tied = 0;
    if (pl->P > 1 && (s == 0 || s == pl->P - 1)) {
        uint32_t mine = ckpt_crc32(0, st->p.wte, st->sizes[0] * sizeof(float));
        if (s == pl->P - 1) send_blocking(c, &mine, sizeof(mine), 0, TAG_CRC);
        else {
            comm_recv(c, &tied, sizeof(tied), pl->P - 1, TAG_CRC);
            ok = tied == mine;
        }
    }
    // replicas: the average of equal values is that value; any disagreement moves it off someone's
    double crc = (double)ckpt_crc32(0, st->params, st->num_params * sizeof(float)), avg = crc;
    comm_dp_average_double(c, &avg, 1);
    if (avg != crc) ok = 0;
    int bad = comm_any(c, !ok);
    if (bad) snprintf(msg, msglen, "consistency check FAILED: %s", pl->P > 1 && s == 0 && !ok ? "the tied embedding's copies differ" : "weights differ between the first and last stage's wte or between replicas");
    else if (pl->P > 1) snprintf(msg, msglen, "consistency: tied embedding copies bitwise equal (crc %08x), %d replica(s) agree", (unsigned)tied, c->D);
    else snprintf(msg, msglen, "consistency: %d replica(s) agree", c->D);
    return !bad;
}
