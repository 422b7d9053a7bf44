// Step lines, validation lines, log.jsonl records and the end-of-run table (see report.h).
#include "report.h"
#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/resource.h>
#include "llmc/common.h"
#include "tdpipe/outdir.h"

static void format_seconds(double s, char* buf, size_t cap) {
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, cap, "%ldh%02ldm", t / 3600, (t / 60) % 60);
    else if (t >= 60) snprintf(buf, cap, "%ldm%02lds", t / 60, t % 60);
    else snprintf(buf, cap, "%lds", t);
}

// a number for log.jsonl: JSON has no NaN or Infinity, so those are null
static void json_num(FILE* f, const char* key, double v) {
    if (isfinite(v)) fprintf(f, "\"%s\": %.9g", key, v);
    else fprintf(f, "\"%s\": null", key);
}

// every record is flushed as it is written (a run cut off keeps its log up to there); a write that
// fails (a full disk) is said once, naming the step whose record it was
static void log_flush(Reporter* rep, int step) {
    if (fflush(rep->log) == 0 && !ferror(rep->log)) return;
    if (rep->log_errno) return;
    rep->log_errno = errno ? errno : EIO;
    fprintf(stderr, "train_tdpipe: %s: the record of step %d could not be written (%s): the log is incomplete from there on; the run goes on and exits 1 at its end\n",
            rep->log_path, step, strerror(rep->log_errno));
}

int report_close_log(Reporter* rep) {
    if (!rep->log) return rep->log_errno ? 1 : 0;
    int failed = fclose(rep->log) != 0;
    rep->log = NULL;
    if (failed && !rep->log_errno) {
        rep->log_errno = errno ? errno : EIO;
        fprintf(stderr, "train_tdpipe: %s: closing it failed (%s): its last records may be lost\n", rep->log_path, strerror(rep->log_errno));
    }
    return rep->log_errno ? 1 : 0;
}

void report_step(void* reporter, const StepReport* r) {
    Reporter* rep = (Reporter*)reporter;
    if (r->refused || r->skipped) return; // the trainer reports the rollback instead
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
    else if (rep->windowed) printf(" | stale %d", r->staleness_max);
    if (isfinite(r->b_simple)) printf(" | B_noise %.0f", r->b_simple);
    printf(" | eta %s\n", eta);
    if (rep->log) {
        fprintf(rep->log, "{\"step\": %d, ", r->step);
        json_num(rep->log, "loss", r->loss);
        fprintf(rep->log, ", ");
        json_num(rep->log, "grad_norm", r->norm);
        fprintf(rep->log, ", \"lr\": %.9g, \"ms\": %.3f, \"tok_per_s\": %.1f, \"bubble\": %.4f, \"staleness\": %d, \"bubble_per_stage\": [", r->lr,
                r->seconds * 1e3, tok_s, r->bubble_all, r->staleness_max);
        for (int s = 0; s < r->P; s++) fprintf(rep->log, "%s%.4f", s ? ", " : "", r->bubble[s]);
        fprintf(rep->log, "], \"staleness_per_stage\": [");
        for (int s = 0; s < r->P; s++) fprintf(rep->log, "%s%d", s ? ", " : "", r->staleness[s]);
        fprintf(rep->log, "]");
        if (isfinite(r->b_simple)) fprintf(rep->log, ", \"gns_b_simple\": %.9g", r->b_simple);
        if (r->D > 1) { // per stage: bytes sent + received by its replica 0, seconds exposed, seconds in flight
            const char* keys[3] = {"dp_bytes", "dp_wait_ms", "dp_span_ms"};
            const double* vals[3] = {r->dp_bytes, r->dp_wait, r->dp_span};
            for (int i = 0; i < 3; i++) {
                fprintf(rep->log, ", \"%s\": [", keys[i]);
                for (int s = 0; s < r->P; s++) fprintf(rep->log, i ? "%s%.3f" : "%s%.0f", s ? ", " : "", i ? 1e3 * vals[i][s] : vals[i][s]);
                fprintf(rep->log, "]");
            }
            if (isfinite(r->dp_entropy)) fprintf(rep->log, ", \"dp_entropy_bits\": %.4f", r->dp_entropy);
        }
        fprintf(rep->log, "}\n");
        log_flush(rep, r->step);
    }
    fflush(stdout);
}

void report_val(Reporter* rep, int step, float val, double floor) {
    if (floor >= 0) printf("val loss %.6f | gap to floor %.6f nats\n", val, val - floor);
    else printf("val loss %.6f\n", val);
    if (!rep->log) return;
    fprintf(rep->log, "{\"step\": %d, ", step);
    json_num(rep->log, "val_loss", val);
    if (floor >= 0) {
        fprintf(rep->log, ", ");
        json_num(rep->log, "val_gap", val - floor);
    }
    fprintf(rep->log, "}\n");
    log_flush(rep, step);
}

// a unit's name: the embeddings, a layer, the head
static void unit_name(int u, int n, char* buf, size_t cap) {
    if (u == 0) snprintf(buf, cap, "embeddings");
    else if (u == n - 1) snprintf(buf, cap, "head");
    else snprintf(buf, cap, "layer %d", u - 1);
}

void report_drift(Reporter* rep, int step, const DriftUnit* units, int n, int worst, int int8_sync) {
    const char* key = int8_sync ? "drift_int8" : "drift";
    char name[32];
    unit_name(worst, n, name, sizeof(name));
    double mean = 0.0;
    for (int u = 0; u < n; u++) mean += drift_cosine(&units[u]) / n;
    printf("%s at step %d | cosine to %s: lowest %.6f (%s), mean %.6f | relative error there %.4g\n", int8_sync ? "int8 sync" : "drift", step,
           int8_sync ? "the fp32 average of the same local gradients" : "the exact synchronous gradient", drift_cosine(&units[worst]), name, mean,
           drift_rel_err(&units[worst]));
    fflush(stdout);
    if (!rep->log) return;
    fprintf(rep->log, "{\"step\": %d, \"%s_min_cos\": %.9g, \"%s_mean_cos\": %.9g, \"%s_cos\": [", step, key, drift_cosine(&units[worst]), key, mean,
            key);
    for (int u = 0; u < n; u++) fprintf(rep->log, "%s%.9g", u ? ", " : "", drift_cosine(&units[u]));
    fprintf(rep->log, "], \"%s_rel_err\": [", key);
    for (int u = 0; u < n; u++) {
        double e = drift_rel_err(&units[u]);
        if (isfinite(e)) fprintf(rep->log, "%s%.9g", u ? ", " : "", e);
        else fprintf(rep->log, "%snull", u ? ", " : "");
    }
    fprintf(rep->log, "]}\n");
    log_flush(rep, step);
}

void report_aew_auto(const AewChoice* c) {
    int P = c->P;
    printf("aew auto: measured beta %.3f; per stage F/B ms:", c->beta);
    for (int i = 0; i < P; i++) printf(" %.2f/%.2f", 1e3 * c->times[i], 1e3 * c->times[P + i]);
    printf("; input gradient out after");
    for (int i = 1; i < P; i++) printf(" %.2f", c->times[3 * P + i]);
    printf(" of B");
    printf("\naew auto: simulated utilisation (tdpipe, these times and beta):");
    for (int w = 0; w <= c->W_max; w++) printf(" W=%d %.1f%%", w, 100.0 * c->util[w]);
    printf("\naew auto: chose W = %d (%.1f%%: the smallest within 1 point of the best up to W = %d, the staleness %s handles%s); "
           "the article's ceil(P (1 - beta)) = ceil(%d x (1 - %.3f)) = %d would give %.1f%%; the same on all %d ranks\n",
           c->W, 100.0 * c->util[c->W], c->W_max, c->comp, c->W_max > c->M ? " with the window opening after the warm-up" : "", P, c->beta,
           c->article, 100.0 * c->u_article, c->ranks);
}

void report_rollback(Reporter* rep, int step, int back, const char* reason, int W_from, int W_to, int in_row) {
    if (back == step - 1)
        printf("step %5d/%d | not applied: %s | rolled back: the step's micro-batches skipped, AEW W %d -> %d%s\n", step, rep->total_steps, reason,
               W_from, W_to, in_row ? " (at W = 0)" : "");
    else {
        char undone[48];
        if (back + 1 == step - 1) snprintf(undone, sizeof undone, "step %d", back + 1);
        else snprintf(undone, sizeof undone, "steps %d..%d", back + 1, step - 1);
        printf("step %5d/%d | not applied: %s | rolled back to step %d, the consistency point (%s, computed stale, undone): %s "
               "micro-batches and this step's skipped, AEW W %d -> %d\n", step, rep->total_steps, reason, back, undone, back + 1 == step - 1 ? "its" : "their",
               W_from, W_to);
    }
    fflush(stdout);
    if (!rep->log) return;
    fprintf(rep->log, "{\"step\": %d, \"rollback\": \"", step);
    for (const char* c = reason; *c; c++) fputc(*c == '"' || *c == '\\' ? '\'' : *c, rep->log);
    fprintf(rep->log, "\", \"back_to\": %d, \"aew_from\": %d, \"aew_to\": %d, \"rollbacks_in_row_at_w0\": %d}\n", back, W_from, W_to, in_row);
    log_flush(rep, step);
}

int report_log_cut(Reporter* rep, int back, char* err, size_t errlen) {
    if (!rep->log) return 0;
    if (report_close_log(rep)) return 0; // its writes failed already (said): it stays closed, and the run exits 1 at its end
    if (outdir_trim_log(rep->log_path, back, "\"rollback\":", NULL, NULL, err, errlen)) return -1;
    if (!(rep->log = fopen(rep->log_path, "a"))) return td_error(err, errlen, "%s: cannot reopen it: %s", rep->log_path, strerror(errno));
    return 0;
}

StageSummary report_stage_summary(const Executor* ex) {
    StageSummary s;
    s.f_ms = ex->stats.f.n ? 1e3 * ex->stats.f.sum / ex->stats.f.n : 0.0;
    s.b_ms = ex->stats.b.n ? 1e3 * ex->stats.b.sum / ex->stats.b.n : 0.0;
    s.mem = stage_memory(ex->stage);
    struct rusage u;
    s.peak_rss = getrusage(RUSAGE_SELF, &u) == 0 ? 1024.0 * (double)u.ru_maxrss : 0.0; // (Linux: kilobytes)
    return s;
}

void report_end_table(const Reporter* rep, const Partition* part, const StageSummary* per_stage) {
    printf("stage  layers    pred. share  meas. F ms  meas. B ms  act. slots      MiB  stashes      MiB  grad ring      MiB  host peak MiB\n");
    double total_pred = 0.0;
    for (int i = 0; i < rep->P; i++) total_pred += part->time[i];
    for (int i = 0; i < rep->P; i++) {
        const StageSummary* t = &per_stage[i];
        char layers[32];
        snprintf(layers, sizeof(layers), "[%d,%d)", part->first[i], part->first[i + 1]);
        double mib = 1.0 / (1024.0 * 1024.0);
        printf("%-6d %-9s %10.1f%%  %10.2f  %10.2f  %10d %8.1f  %7d %8.1f  %9d %8.1f  %13.1f\n", i, layers,
               total_pred > 0 ? 100.0 * part->time[i] / total_pred : 100.0, t->f_ms, t->b_ms, t->mem.slots, t->mem.act_bytes * mib,
               t->mem.stashes, t->mem.stash_bytes * mib, t->mem.grad_slots, t->mem.grad_bytes * mib, t->peak_rss * mib);
    }
    if (rep->seconds_n) printf("average step: %.1f ms (%d steps, first left out)\n", rep->seconds_sum / rep->seconds_n * 1e3, rep->seconds_n);
}
