// Step lines, validation lines, log.jsonl records and the end-of-run table (see report.h).
#include "report.h"
#include <string.h>

static void format_seconds(double s, char* buf, size_t cap) {
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, cap, "%ldh%02ldm", t / 3600, (t / 60) % 60);
    else if (t >= 60) snprintf(buf, cap, "%ldm%02lds", t / 60, t % 60);
    else snprintf(buf, cap, "%lds", t);
}

void report_step(void* reporter, const StepReport* r) {
    Reporter* rep = (Reporter*)reporter;
    double tok_s = rep->tokens_per_step / r->seconds;
    if (r->step > 1) {
        rep->seconds_sum += r->seconds;
        rep->seconds_n++;
    }
    char eta[32];
    format_seconds(rep->seconds_n ? rep->seconds_sum / rep->seconds_n * (rep->total_steps - r->step) : 0.0, eta, sizeof(eta));
    printf("step %5d/%d | loss %.6f | norm %.4f | lr %.2e | %.1f ms | %.0f tok/s", r->step, rep->total_steps, r->loss, r->norm, r->lr,
           r->seconds * 1e3, tok_s);
    if (rep->peak_flops > 0) printf(" | MFU %.1f%%", 100.0 * rep->flops_per_step / r->seconds / rep->peak_flops);
    if (rep->P > 1) printf(" | bubble %.1f%% | stale %d", 100.0 * r->bubble_all, r->staleness_max);
    printf(" | eta %s\n", eta);
    if (rep->log) {
        fprintf(rep->log, "{\"step\": %d, \"loss\": %.9g, \"grad_norm\": %.9g, \"lr\": %.9g, \"ms\": %.3f, \"tok_per_s\": %.1f, \"bubble\": %.4f, "
                          "\"staleness\": %d, \"bubble_per_stage\": [",
                r->step, r->loss, r->norm, r->lr, r->seconds * 1e3, tok_s, r->bubble_all, r->staleness_max);
        for (int s = 0; s < r->P; s++) fprintf(rep->log, "%s%.4f", s ? ", " : "", r->bubble[s]);
        fprintf(rep->log, "], \"staleness_per_stage\": [");
        for (int s = 0; s < r->P; s++) fprintf(rep->log, "%s%d", s ? ", " : "", r->staleness[s]);
        fprintf(rep->log, "]}\n");
        fflush(rep->log);
    }
    fflush(stdout);
}

void report_val(Reporter* rep, int step, float val, double floor) {
    if (floor >= 0) printf("val loss %.6f | gap to floor %.6f nats\n", val, val - floor);
    else printf("val loss %.6f\n", val);
    if (!rep->log) return;
    fprintf(rep->log, "{\"step\": %d, \"val_loss\": %.9g", step, val);
    if (floor >= 0) fprintf(rep->log, ", \"val_gap\": %.9g", val - floor);
    fprintf(rep->log, "}\n");
    fflush(rep->log);
}

StageSummary report_stage_summary(const Executor* ex) {
    StageSummary s;
    s.f_ms = ex->stats.f.n ? 1e3 * ex->stats.f.sum / ex->stats.f.n : 0.0;
    s.b_ms = ex->stats.b.n ? 1e3 * ex->stats.b.sum / ex->stats.b.n : 0.0;
    s.mem = stage_memory(ex->stage);
    return s;
}

void report_end_table(const Reporter* rep, const Partition* part, const StageSummary* per_stage) {
    printf("stage  layers    pred. share  meas. F ms  meas. B ms  act. slots      MiB  stashes      MiB  grad ring      MiB\n");
    double total_pred = 0.0;
    for (int i = 0; i < rep->P; i++) total_pred += part->time[i];
    for (int i = 0; i < rep->P; i++) {
        const StageSummary* t = &per_stage[i];
        char layers[32];
        snprintf(layers, sizeof(layers), "[%d,%d)", part->first[i], part->first[i + 1]);
        double mib = 1.0 / (1024.0 * 1024.0);
        printf("%-6d %-9s %10.1f%%  %10.2f  %10.2f  %10d %8.1f  %7d %8.1f  %9d %8.1f\n", i, layers,
               total_pred > 0 ? 100.0 * part->time[i] / total_pred : 100.0, t->f_ms, t->b_ms, t->mem.slots, t->mem.act_bytes * mib,
               t->mem.stashes, t->mem.stash_bytes * mib, t->mem.grad_slots, t->mem.grad_bytes * mib);
    }
    if (rep->seconds_n) printf("average step: %.1f ms (%d steps, first left out)\n", rep->seconds_sum / rep->seconds_n * 1e3, rep->seconds_n);
}
