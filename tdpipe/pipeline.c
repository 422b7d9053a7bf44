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
    stage_reserve(st, 1, 1, 1, 0); // (before any step: a resumed run's owed validation)
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

// A tensor's share travels as messages of at most this many bytes, each taken by the sink before the
// next one arrives: rank 0 holds one, not the model
#define STREAM_SPAN ((size_t)8 << 20)

// n floats of world rank `from` into the sink: rank 0's own where they lie (own), another's a
// message of at most STREAM_SPAN bytes at a time, as it sends them
static void stream_piece(Comm* c, const float* own, size_t n, int from, float* span, PipelineSink sink) {
    if (from == 0) {
        if (n > 0) sink.put(sink.ctx, own, n);
        return;
    }
    for (size_t off = 0, step = STREAM_SPAN / sizeof(float); off < n; off += step) {
        size_t k = n - off < step ? n - off : step;
        comm_world_recv(c, span, k * sizeof(float), from, TAG_GATHER);
        sink.put(sink.ctx, span, k);
    }
}

// stage s's share of tensor i (n = 0 where it gives none to the stream): its layers' share of a per-layer
// tensor; of one that two stages hold whole (the tied wte: the first stage's embedding and the last's
// head), the copy of the stage tied_from names (pipeline.h)
static GPT2Piece stream_share(const Pipeline* pl, int s, int i, int tied_from) {
    GPT2Piece pc[GPT2_NUM_PARAM_TENSORS];
    for (int other = 0; other < pl->P && !gpt2_param_is_layer(i); other++) { // another stage that gives it instead
        if (other == s || (tied_from == PIPELINE_TIED_LAST ? other < s : other > s)) continue;
        gpt2_slice_pieces(&pl->stage->cfg, &pl->ranges[other], pc);
        if (pc[i].n > 0) return (GPT2Piece){0, 0, 0};
    }
    gpt2_slice_pieces(&pl->stage->cfg, &pl->ranges[s], pc);
    return pc[i];
}

static void send_piece(Comm* c, const float* x, size_t n) {
    for (size_t off = 0, step = STREAM_SPAN / sizeof(float); off < n; off += step)
        comm_world_send(c, x + off, (n - off < step ? n - off : step) * sizeof(float), 0, TAG_GATHER);
}

// Tensor by tensor, every stage's share of it in stage order (the layout's order: a tensor's layers
// are split over the stages), then the head's share. Each sender sends its pieces in that order and
// blocks on each until rank 0 takes it, so rank 0 asks each rank for its pieces in the order sent.
void pipeline_stream(Pipeline* pl, int replica, const float* mine, const float* head, int tied_from, PipelineSink sink) {
    Stage* st = pl->stage;
    Comm* c = pl->comm;
    size_t vc = (size_t)st->cfg.padded_vocab_size * st->cfg.channels; // the head's share: (Vp, C)
    if (c->replica == replica && c->world_rank != 0) {
        for (int i = 0; i < GPT2_NUM_PARAM_TENSORS; i++) {
            GPT2Piece pc = stream_share(pl, c->stage, i, tied_from);
            send_piece(c, mine + pc.stage_off, pc.n);
        }
        if (head && st->range.has_head) send_piece(c, head, vc);
    }
    if (c->world_rank != 0) return;
    float* span = pl->P > 1 || replica > 0 ? (float*)malloc_check(STREAM_SPAN) : NULL; // (STREAM_SPAN / 4) one message
    for (int i = 0; i < GPT2_NUM_PARAM_TENSORS; i++)
        for (int s = 0; s < pl->P; s++) {
            GPT2Piece pc = stream_share(pl, s, i, tied_from);
            stream_piece(c, mine + pc.stage_off, pc.n, replica * pl->P + s, span, sink); // world ranks are in grid order (comm.h)
        }
    if (head) stream_piece(c, head, vc, replica * pl->P + pl->P - 1, span, sink);
    free(span);
}

int pipeline_check_consistency(Pipeline* pl, char* msg, size_t msglen) {
    Stage* st = pl->stage;
    Comm* c = pl->comm;
    int s = c->stage, tied_ok = 1;
    uint32_t tied = 0;
    if (pl->P > 1 && (s == 0 || s == pl->P - 1)) {
        uint32_t mine = ckpt_crc32(0, st->p.wte, st->sizes[0] * sizeof(float));
        if (s == pl->P - 1) send_blocking(c, &mine, sizeof(mine), 0, TAG_CRC);
        else {
            comm_recv(c, &tied, sizeof(tied), pl->P - 1, TAG_CRC);
            tied_ok = tied == mine;
        }
    }
    // replicas: the average of equal values is that value; any disagreement moves it off someone's
    double crc = (double)ckpt_crc32(0, st->params, st->num_params * sizeof(float)), avg = crc;
    comm_dp_average_double(c, &avg, 1);
    int tied_bad = comm_any(c, !tied_ok), replicas_bad = comm_any(c, avg != crc), bad = tied_bad || replicas_bad;
    if (bad)
        snprintf(msg, msglen, "consistency check FAILED: %s%s%s", tied_bad ? "the tied embedding's copies on the first and last stage differ" : "",
                 tied_bad && replicas_bad ? ", and " : "", replicas_bad ? "the replicas' weights differ" : "");
    else if (pl->P > 1) snprintf(msg, msglen, "consistency: tied embedding copies bitwise equal (crc %08x), %d replica(s) agree", (unsigned)tied, c->D);
    else snprintf(msg, msglen, "consistency: %d replica(s) agree", c->D);
    return !bad;
}
