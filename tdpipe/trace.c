// Pipeline operation events and their Chrome trace JSON (see trace.h).
#include "trace.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/common.h"

void trace_init(Trace* t, int enabled) {
    memset(t, 0, sizeof(*t));
    t->enabled = enabled;
}

void trace_add(Trace* t, const TraceEvent* e) {
    if (!t->enabled) return;
    if (t->n == t->cap) { // grows geometrically; tracing is opt-in, off the default hot path
        t->cap = t->cap ? 2 * t->cap : 4096;
        t->events = (TraceEvent*)realloc_check(t->events, t->cap * sizeof(TraceEvent));
    }
    t->events[t->n++] = *e;
}

// ", \"key\": microseconds since t0", or nothing for a time not set (0)
static void put_time(FILE* f, const char* key, double at, double t0) {
    if (at > 0) fprintf(f, ", \"%s\": %.3f", key, (at - t0) * 1e6);
}

int trace_write_json(const char* path, const TraceEvent* events, size_t n, char* err, size_t errlen) {
    FILE* f = fopen(path, "w");
    if (!f) {
        snprintf(err, errlen, "--trace %s: cannot write: %s", path, strerror(errno));
        return -1;
    }
    double t0 = n ? events[0].start : 0.0;
    for (size_t i = 0; i < n; i++)
        if (events[i].start < t0) t0 = events[i].start;
    fprintf(f, "%s\n", TRACE_JSON_HEAD);
    for (size_t i = 0; i < n; i++) {
        const TraceEvent* e = &events[i];
        // one process per replica, one thread per stage: Perfetto draws each stage as a row
        fprintf(f,
                "{\"name\": \"%s\", \"cat\": \"%c\", \"ph\": \"X\", \"pid\": %d, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f, "
                "\"args\": {\"compute_ts\": %.3f, \"compute_dur\": %.3f",
                e->name, e->name[0], e->replica, e->stage, (e->start - t0) * 1e6, (e->end - e->start) * 1e6, (e->compute_start - t0) * 1e6,
                (e->compute_end - e->compute_start) * 1e6);
        put_time(f, "awaited_ts", e->awaited, t0);
        put_time(f, "arrived_ts", e->arrived, t0);
        put_time(f, "sent_ts", e->sent, t0);
        fprintf(f, "}}%s\n", i + 1 < n ? "," : "");
    }
    fprintf(f, "]}\n");
    int failed = ferror(f); // a write that failed before the last buffer (fclose reports only its own flush)
    if (fclose(f) != 0 || failed) {
        snprintf(err, errlen, "--trace %s: write failed: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

void trace_free(Trace* t) {
    free(t->events);
    memset(t, 0, sizeof(*t));
}
