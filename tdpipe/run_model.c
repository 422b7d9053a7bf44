// The run's model (see run_model.h): a fresh dN or an llm.c model file, and its split over stages.
#include "tdpipe/run_model.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/common.h"
#include "llmc/model_file.h"

static int round_up(int x, int m) { return (x + m - 1) / m * m; }

int run_model_fresh_config(const char* init, int vocab_size, GPT2Config* cfg, char* err, size_t errlen) {
    if (init[0] != 'd') return 0;
    char* end;
    long depth = strtol(init + 1, &end, 10);
    if (end == init + 1 || *end != '\0') return 0;
    if (depth < 1 || depth > 48) {
        snprintf(err, errlen, "-e %s: depth must be 1..48", init);
        return -1;
    }
    // llm.c's shapes: d12 = GPT-2 124M (C 768, 12 heads), d24 = 350M, d36 = 774M, d48 = 1558M; below 12, C = 64 N
    int C = depth <= 12 ? 64 * (int)depth : depth <= 24 ? 1024 : depth <= 36 ? 1280 : 1600;
    cfg->num_layers = (int)depth;
    cfg->channels = C;
    cfg->num_heads = C / 64;
    cfg->max_seq_len = 1024;
    cfg->vocab_size = vocab_size;
    cfg->padded_vocab_size = round_up(vocab_size, 128);
    return 1;
}

float* run_model_init(const TrainArgs* a, const GPT2Config* cfg, int fresh, const GPT2Range* r, char* err, size_t errlen) {
    size_t sizes[GPT2_NUM_PARAM_TENSORS];
    float* params = (float*)malloc_check(gpt2_param_sizes(cfg, r, sizes) * sizeof(float));
    if (fresh) {
        gpt2_init_range(cfg, r, params, (unsigned long long)a->seed);
        return params;
    }
    char why[1024];
    if (model_file_load_range(a->init, cfg, r, params, why, sizeof(why))) {
        snprintf(err, errlen, "-e: %s", why);
        free(params);
        return NULL;
    }
    return params;
}

// "1,1,0.5,1" -> *out: P finite numbers in (0, hi] (scaled by `unit`); empty -> NULL (the default).
// 0, or -1 with what is wrong in err
static int parse_per_rank(const char* flag, const char* list, int P, double hi, double unit, double** out, char* err, size_t errlen) {
    *out = NULL;
    if (!list[0]) return 0;
    double* v = (double*)malloc_check(P * sizeof(double));
    const char* it = list;
    for (int i = 0; i < P; i++) {
        char* end;
        v[i] = strtod(it, &end);
        if (end == it || !(v[i] > 0) || !(v[i] <= hi) || (*end != ',' && *end != '\0') || (*end == '\0' && i != P - 1) || (*end == ',' && i == P - 1)) {
            snprintf(err, errlen, P == 1 ? "--%s %s: expected %d positive number up to %g (one per stage)"
                                          : "--%s %s: expected %d positive numbers up to %g separated by commas, one per stage",
                     flag, list, P, hi);
            free(v);
            return -1;
        }
        v[i] *= unit;
        it = end + 1;
    }
    *out = v;
    return 0;
}

void run_model_partition_header(FILE* f, const TrainArgs* a, const char* how, int timed) {
    fprintf(f, "partition (%s; predicted %s of forward + backward%s%s, memory per stage):\n", how, timed ? "seconds" : "time in FLOPs",
            a->recompute ? " + the forward again" : "", timed ? " a micro-batch" : "");
}

// The split's costs: from the FLOP model (measured NULL; forward + backward = 3x the forward FLOPs), or
// from each stage's timed passes (layer_costs_measure on the ranks of that stage, averaged over its
// replicas): a layer's time is the mean over stages, each stage's speed the mean over its own (unless
// --rank-speed says otherwise). Memory: 16 bytes per parameter (weights, gradient, two AdamW moments)
// plus the activations of up to P micro-batches. Under --recompute a backward runs its forward again
// (4 forwards' time where 3 were: every cost alike, so the split is the same) and a stage holds one
// micro-batch's activations whole (the kept inputs and outputs, 2 (B, T, C) a micro-batch, left out).
int run_model_partition(Partition* part, const TrainArgs* a, const GPT2Config* cfg, int P, const LayerCosts* measured, char* err, size_t errlen) {
    char why[512];
    if (P > cfg->num_layers) {
        snprintf(err, errlen, "--stages %d exceeds the model's %d layers (each stage needs at least one)", P, cfg->num_layers);
        return -1;
    }
    int solve = !strcmp(a->partition, "auto") || !strcmp(a->partition, "model");
    if (!solve && partition_parse(part, a->partition, cfg->num_layers, P, why, sizeof(why))) {
        snprintf(err, errlen, "%s", why);
        return -1;
    }
    double *speed, *mem;
    // (a speed of inf took every layer off the others: a share of 0.0%; 1e6 times another rank is already all)
    if (parse_per_rank("rank-speed", a->rank_speed, P, 1e6, 1.0, &speed, err, errlen)) {
        if (!solve) partition_free(part); // (the split --partition gave, parsed above)
        return -1;
    }
    if (parse_per_rank("rank-mem", a->rank_mem, P, 1e9, 1024.0 * 1024.0 * 1024.0, &mem, err, errlen)) {
        free(speed);
        if (!solve) partition_free(part);
        return -1;
    }
    double BT = (double)a->B * a->T, C = cfg->channels, T = a->T, Vp = cfg->padded_vocab_size;
    double again = a->recompute ? 4.0 / 3.0 : 1.0, whole = a->recompute ? 1.0 : P; // (the time's factor; micro-batches whole)
    double mean_layer = 0.0, mean_embed = 0.0, mean_head = 0.0;
    for (int s = 0; measured && s < P; s++) {
        mean_layer += measured[s].layer / P;
        mean_embed += measured[s].embed / P;
        mean_head += measured[s].head / P;
    }
    double* layer_time = (double*)malloc_check(cfg->num_layers * sizeof(double));
    double* layer_mem = (double*)malloc_check(cfg->num_layers * sizeof(double));
    for (int l = 0; l < cfg->num_layers; l++) {
        layer_time[l] = again * (measured ? mean_layer : 3.0 * (24.0 * BT * C * C + 4.0 * BT * T * C));
        layer_mem[l] = 16.0 * 12.0 * C * C + 4.0 * whole * BT * (16.0 * C + cfg->num_heads * T);
    }
    PartitionCost cost;
    memset(&cost, 0, sizeof(cost));
    cost.L = cfg->num_layers;
    cost.P = P;
    cost.layer_time = layer_time;
    cost.first_time = again * (measured ? mean_embed : 3.0 * BT * C);
    cost.last_time = again * (measured ? mean_head : 3.0 * 2.0 * BT * C * Vp);
    cost.layer_mem = layer_mem;
    cost.first_mem = 16.0 * Vp * C;
    cost.last_mem = 16.0 * Vp * C + 4.0 * 2 * BT * Vp;
    if (!speed && measured) {
        speed = (double*)malloc_check(P * sizeof(double));
        for (int s = 0; s < P; s++) speed[s] = measured[s].layer > 0 ? mean_layer / measured[s].layer : 1.0;
    }
    cost.speed = speed;
    cost.mem_limit = mem;
    int rc = 0;
    if (solve) {
        if (partition_solve(part, &cost, why, sizeof(why))) {
            snprintf(err, errlen, "--partition %s: %s", a->partition, why);
            rc = -1;
        }
    } else {
        partition_evaluate(part, &cost);
    }
    free(layer_time);
    free(layer_mem);
    free(speed);
    free(mem);
    return rc;
}
