// Runs a Schedule over a cost model (per-stage op times, point-to-point latency or message times on
// links that overlap compute, a data-parallel average, seeded multiplicative jitter) without any
// model or threads: every op's start and end, makespan, per-stage busy time and bubble, utilisation.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "tdpipe/schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

// Op times per virtual stage q = chunk * P + s: P of them, P * chunks for an interleaved schedule.
// The fields after seed are optional: left zero, a run is what it was without them.
typedef struct {
    const double* t_f;  // (P*chunks) forward time of each (virtual) stage
    const double* t_b;  // (P*chunks) full backward; NULL: t_bi + t_bw
    const double* t_bi; // (P*chunks) zero-bubble input-gradient backward; NULL: t_b / 2
    const double* t_bw; // (P*chunks) zero-bubble weight-gradient backward; NULL: t_b / 2
    const double* t_u;  // (P) optimizer update; NULL: 0
    double latency;     // added to every dependency that crosses stages (P2P send; U's global exchange)
    double jitter_cv;   // β: each op's time is multiplied by a Gamma(1/β², β²) draw (mean 1, CV β); 0 = none
    uint64_t seed;      // jitter seed
    // messages on their own stream (ScheduleComm): each holds the link between its two stages for its
    // time, in the order sent, while both stages compute; the op that needs it waits for its arrival
    const double* t_msg_f; // (P*chunks - 1) activation from virtual stage q to q+1; NULL: latency instead
    const double* t_msg_b; // (P*chunks - 1) input gradient from q+1 to q; NULL: latency instead
    const double* t_dp;    // (P) each stage's data-parallel gradient average per step, before its U; NULL: none
    int dp_overlap;        // 1: the average streams beside the step's last backward; 0: it starts after it
    const double* b_send;  // (P*chunks) share of a B op's time after which its input gradient leaves (the
                           // executor's: BI's share); NULL: at B's end, as Megatron-LM sends it
    // the stages share this many cores (ranks oversubscribing a host): k ops computing at once each
    // run at min(1, cores / k) of a core (processor sharing), so the op times above are each op's
    // work on a core of its own; 0 (or >= P): every stage has its own
    int cores;
} SimCost;

typedef struct {
    int P;
    double makespan;    // last op end - first op start, over the whole pipeline
    double utilisation; // Σ busy / (P * makespan)
    double steady_utilisation; // the trainer's measure: per step, Σ busy / Σ time since each stage's
                               // previous update, averaged over steps 2..n-1 (all of them if n < 3)
    double* busy;       // (P) time each stage spends computing
    double* bubble;     // (P) 1 - busy / makespan
    double* steady_bubble; // (P) each stage's alone as steady_utilisation counts it (log.jsonl's bubble_per_stage)
    int* n_ops;         // (P) copy of the schedule's list lengths
    Op** ops;           // (P)[n_ops[s]] the ops in the order they ran: the schedule's lists, except
                        // that tdpipe's event-driven policy reorders them under jittered op times
    double** start;     // (P)[n_ops[s]] start of each op, aligned with ops
    double** end;       // (P)[n_ops[s]]
} SimResult;

#define SIM_SHARE_ITERS 200 // most runs the shared-cores fixed point takes (below)

// Runs sch as the executor would: synchronous lists in order, tdpipe by its event-driven policy.
// With cost->cores, each op's time is its work over its mean rate in the timeline it runs in, found
// by damped fixed-point iteration (at most SIM_SHARE_ITERS runs). Returns 0, or -1 with a message
// (a missing op time, or a deadlock naming the stuck stage, its op and what it waits for).
// Deterministic for a seed. Free the result with simulator_free.
int simulator_run(SimResult* res, const Schedule* sch, const SimCost* cost, char* err, size_t errlen);
void simulator_free(SimResult* res);

// --aew auto's choice: tdpipe's steady utilisation for W = 0 .. W_max (util, W_max + 1 entries)
// simulated with per-stage forward and backward times t_f, t_b (P), the share of each backward
// after which its input gradient leaves b_send (P; NULL: at its end) and jitter beta (mean of
// SIM_WINDOW_SEEDS seeds, SIM_WINDOW_STEPS steps), and the smallest W within `within` (0.01: one
// point) of the best of them. Returns that W, or -1 with a message.
#define SIM_WINDOW_SEEDS 8
#define SIM_WINDOW_STEPS 8
int simulator_choose_window(int P, int M, const double* t_f, const double* t_b, const double* b_send, double beta, int W_max,
                            double within, double* util, char* err, size_t errlen);
// the steady utilisation of tdpipe with window W for the same inputs (as simulator_choose_window sees it)
double simulator_window_utilisation(int P, int M, const double* t_f, const double* t_b, const double* b_send, double beta, int W,
                                    char* err, size_t errlen);

// share (P + 1): of the time from the first to the last end of the F and B ops of steps [step_lo,
// step_hi] (0-based), the part during which k = 0..P of them compute at once
void simulator_at_once(const SimResult* res, int step_lo, int step_hi, double* share);

// the jitter factor of op on stage s: a function of (seed, s, op kind, step, micro-batch) only,
// so the same op gets the same factor under every schedule (common random numbers)
double simulator_jitter(uint64_t seed, int s, const Op* op, double cv);

#ifdef __cplusplus
}
#endif
