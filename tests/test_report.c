// Tests of tdpipe/report.c's log.jsonl records: each key and its unit against a record written out
// by hand (README's "Outputs": loss, grad_norm, lr, ms, tok_per_s, bubble, staleness, per
// stage lists; dp_* in ms at D > 1; rollbacks), and the average step leaving out the first.
#include "tdpipe/report.h"
#include "tests/test.h"
#include <math.h>
#include <string.h>

// the whole of a small file
static void slurp(const char* path, char* buf, size_t cap) {
    FILE* f = fopen(path, "rb");
    size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
    buf[n] = 0;
    if (f) fclose(f);
}

int main(void) {
    test_dir_make("test_report");
    const char* path = test_path("log.jsonl");
    Reporter rep = {.log = fopen(path, "w"), .log_path = path, .total_steps = 10, .tokens_per_step = 1000, .P = 2};
    double bubble[2] = {0.25, 0.5}, bytes[2] = {1000, 2000}, wait[2] = {0.002, 0.004}, span[2] = {0.01, 0.02};
    int stale[2] = {1, 0};
    // step 1: 0.5 s for 1000 tokens = 2000 tok/s, 500 ms; step 2 with D 2: the average's figures in ms
    StepReport r1 = {.step = 1, .loss = 2.5f, .norm = 0.75f, .lr = 0.125f, .seconds = 0.5, .P = 2, .bubble = bubble, .staleness = stale,
                     .bubble_all = 0.375, .staleness_max = 1, .b_simple = NAN, .D = 1, .dp_entropy = NAN};
    StepReport r2 = r1;
    r2.step = 2, r2.seconds = 0.25, r2.D = 2, r2.dp_bytes = bytes, r2.dp_wait = wait, r2.dp_span = span;
    report_step(&rep, &r1);
    report_step(&rep, &r2);
    report_val(&rep, 2, 2.25f, 2.0);
    report_rollback(&rep, 3, 2, "the loss \"spiked\"", 4, 2, 0);
    CHECK(report_close_log(&rep) == 0, "log.jsonl written and closed");
    char got[4096];
    slurp(path, got, sizeof got);
    const char* want =
        "{\"step\": 1, \"loss\": 2.5, \"grad_norm\": 0.75, \"lr\": 0.125, \"ms\": 500.000, \"tok_per_s\": 2000.0, \"bubble\": 0.3750, "
        "\"staleness\": 1, \"bubble_per_stage\": [0.2500, 0.5000], \"staleness_per_stage\": [1, 0]}\n"
        "{\"step\": 2, \"loss\": 2.5, \"grad_norm\": 0.75, \"lr\": 0.125, \"ms\": 250.000, \"tok_per_s\": 4000.0, \"bubble\": 0.3750, "
        "\"staleness\": 1, \"bubble_per_stage\": [0.2500, 0.5000], \"staleness_per_stage\": [1, 0], \"dp_bytes\": [1000, 2000], "
        "\"dp_wait_ms\": [2.000, 4.000], \"dp_span_ms\": [10.000, 20.000]}\n"
        "{\"step\": 2, \"val_loss\": 2.25, \"val_gap\": 0.25}\n"
        "{\"step\": 3, \"rollback\": \"the loss 'spiked'\", \"back_to\": 2, \"aew_from\": 4, \"aew_to\": 2, \"rollbacks_in_row_at_w0\": 0}\n";
    int same = strcmp(got, want) == 0;
    CHECK(same, "the records, key by key and in their units, as written by hand%s%s%s", same ? "" : ":\n", same ? "" : got,
          same ? "" : "  want: the record in tests/test_report.c");
    // the average step leaves the first (start-up) out: step 2's 0.25 s alone
    CHECK(rep.seconds_n == 1 && rep.seconds_sum == 0.25, "average step: steps after the first (%d steps, %g s)", rep.seconds_n, rep.seconds_sum);
    // a step of more than 2^31 tokens (B 8, T 1024, M 300000): its rate, not an int's wrapped one
    const char* big_path = test_path("big.jsonl");
    Reporter big = {.log = fopen(big_path, "w"), .log_path = big_path, .total_steps = 1, .tokens_per_step = 8.0 * 1024 * 300000, .P = 2};
    StepReport rb = r1;
    rb.seconds = 1024.0;
    report_step(&big, &rb);
    CHECK(report_close_log(&big) == 0, "the big step's log written and closed");
    slurp(big_path, got, sizeof got);
    CHECK(strstr(got, "\"tok_per_s\": 2400000.0,") != NULL, "2,457,600,000 tokens in 1024 s: 2400000.0 tok/s in the record: %s", got);
    return test_summary();
}
