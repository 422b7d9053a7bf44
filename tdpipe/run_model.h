// The run's model: a fresh GPT-2 of depth N ("-e dN") or an llm.c model file, and its split into P
// stages from the flags (--partition, --rank-speed, --rank-mem) over the FLOP model or timed passes.
#pragma once
#include <stddef.h>
#include "llmc/gpt2.h"
#include "tdpipe/args.h"
#include "tdpipe/partition.h"
#include "tdpipe/layer_costs.h"
#ifdef __cplusplus
extern "C" {
#endif

// fills cfg for -e dN (vocabulary vocab_size, from the data's tokenizer): 1 if init names a depth, 0
// if it does not (a model file), -1 with what is wrong in err (a depth outside 1..48)
int run_model_fresh_config(const char* init, int vocab_size, GPT2Config* cfg, char* err, size_t errlen);
// range r's parameters (laid out for r; no rank holds the whole model): its part of GPT-2's
// initialisation for a fresh dN, else of the -e model file (cfg already filled from the flags or the
// file's header); NULL with what is wrong in err
float* run_model_init(const TrainArgs* a, const GPT2Config* cfg, int fresh, const GPT2Range* r, char* err, size_t errlen);
// part: the layers of each of P stages. measured: NULL for the FLOP model, else (P) each stage's
// timed passes (seconds a micro-batch). 0, or -1 with what is wrong in err (naming the flag)
int run_model_partition(Partition* part, const TrainArgs* a, const GPT2Config* cfg, int P, const LayerCosts* measured, char* err, size_t errlen);
// the partition table's heading: how (the split was found), and what its predicted time counts
// (timed: seconds a micro-batch from timed passes, else FLOPs; --recompute adds the forward again)
void run_model_partition_header(FILE* f, const TrainArgs* a, const char* how, int timed);

#ifdef __cplusplus
}
#endif
