// Instrumentation of pipeline operations: one event per op (stage, replica, name, start, end),
// written as a Chrome trace JSON that opens in Perfetto (chrome://tracing, ui.perfetto.dev).
#pragma once
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif

// how every trace file this program writes begins (a trace may be written over one; nothing else)
#define TRACE_JSON_HEAD "{\"displayTimeUnit\": \"ms\", \"traceEvents\": ["

typedef struct {
    double start, end; // seconds (monotonic clock, shared by the ranks of one host)
    double compute_start, compute_end; // the op's compute inside [start, end] (the rest is waiting)
    // its input message (F off the first stage, B or BI off the last): when the stage began waiting
    // for it and when a wait saw it in; both 0 when it was in before any wait (or there is none),
    // arrived 0 alone when it came in while the stage had turned to other work (TD-Pipe's policy)
    double awaited, arrived;
    double sent;       // its own message to a neighbour posted (F: the output, B or BI: the input gradient); 0: none
    int stage, replica;
    char name[16];     // "F1.3", "B0.2", "U4", ...
} TraceEvent;

typedef struct {
    TraceEvent* events; // (cap) the first n recorded
    size_t n, cap;
    int enabled;
} Trace;

void trace_init(Trace* t, int enabled);
void trace_add(Trace* t, const TraceEvent* e);
// writes events (n) of every rank as JSON; times relative to the earliest start, the compute as
// args {"compute_ts", "compute_dur"} in the same microseconds, and where set "awaited_ts",
// "arrived_ts", "sent_ts". 0, or -1 + err
int trace_write_json(const char* path, const TraceEvent* events, size_t n, char* err, size_t errlen);
void trace_free(Trace* t);

#ifdef __cplusplus
}
#endif
