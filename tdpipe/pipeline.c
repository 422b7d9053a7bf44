// Whole-pipeline services at consistency points: evaluation, sampling, gathering the model,
// consistency checks (see pipeline.h).
#include "pipeline.h"
#include <math.h>
#include <string.h>
#include "llmc/checkpoint.h"
#include "llmc/common.h"
#include "llmc/sampler.h"

enum { TAG_EVAL_LOSS = 11, TAG_TOKEN = 12, TAG_CRC = 13 };

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

void pipeline_gather_replica(Pipeline* pl, int replica, const float* mine, const float* head, float* full, float* full_head) {
    Stage* st = pl->stage;
    Comm* c = pl->comm;
    size_t n = st->num_params, vc = head && st->range.has_head ? st->sizes[0] : 0;
    float* buf = NULL; // (n + vc) what this rank sends
    if (c->replica == replica) {
        buf = (float*)malloc_check((n + vc + 1) * sizeof(float));
        memcpy(buf, mine, n * sizeof(float));
        if (vc) memcpy(buf + n, head, vc * sizeof(float));
    }
    size_t* counts = (size_t*)calloc_check(c->world_size, sizeof(size_t));
    float* all = (float*)comm_gatherv_to_root(c, buf, buf ? (n + vc) * sizeof(float) : 0, counts);
    if (c->world_rank == 0) {
        const float* it = all; // only the replica's stages sent, world ranks replica * P + s, in stage order
        size_t vc_all = (size_t)st->cfg.padded_vocab_size * st->cfg.channels;
        for (int s = 0; s < pl->P; s++) {
            size_t got = counts[replica * pl->P + s] / sizeof(float);
            gpt2_unslice_params(&st->cfg, &pl->ranges[s], it, full);
            if (s == pl->P - 1 && full_head) memcpy(full_head, it + got - vc_all, vc_all * sizeof(float)); // the head's share after its params
            it += got;
        }
    }
    free(all);
    free(counts);
    free(buf);
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
