// Instrumentation of pipeline operations: one event per op (stage, replica, name, start, end),
// written as a Chrome trace JSON that opens in Perfetto (chrome://tracing, ui.perfetto.dev).
#pragma once
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    double start, end; // seconds (monotonic clock, shared by the ranks of one host)
    double compute_start, compute_end; // the op's compute inside [start, end] (the rest is waiting)
    int stage, replica;
    char name[16];     // "F1.3", "B0.2", "U4", ...
} TraceEvent;

typedef struct {
    TraceEvent* events;
    size_t n, cap;
    int enabled;
} Trace;

void trace_init(Trace* t, int enabled);
void trace_add(Trace* t, int stage, int replica, const char* name, double start, double end, double compute_start, double compute_end);
// writes events (n) of every rank as JSON; times relative to the earliest start, the compute as
// args {"compute_ts", "compute_dur"} in the same microseconds. 0, or -1 + err
int trace_write_json(const char* path, const TraceEvent* events, size_t n, char* err, size_t errlen);
void trace_free(Trace* t);

#ifdef __cplusplus
}
#endif
