// The dev programs' command lines, one way for all: --help (or -h) prints the usage to stdout and
// exits 0; a bad argument gets one line on stderr naming it and the problem, then the usage, and
// exit 1 (as the trainer's flags do).
#pragma once
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char* tool;  // the program's name in its messages
    const char* usage; // whole lines, each ending in '\n'
} DevCli;

// exits 0 with the usage on stdout where any argument asks for help
static inline void dev_cli_help(const DevCli* cli, int argc, char** argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(cli->usage, stdout);
            exit(0);
        }
}

static inline __attribute__((noreturn, format(printf, 2, 3))) void dev_cli_refuse(const DevCli* cli, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", cli->tool);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fputs(cli->usage, stderr);
    exit(1);
}

// the value after flag argv[i], or the refusal saying that it needs one
static inline const char* dev_cli_value(const DevCli* cli, int argc, char** argv, int i) {
    if (i + 1 >= argc) dev_cli_refuse(cli, "%s needs a value", argv[i]);
    return argv[i + 1];
}

// s, the value given for `what`, as a whole number in [lo, hi]; otherwise the refusal
static inline long dev_cli_long(const DevCli* cli, const char* what, const char* s, long lo, long hi) {
    char* end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < lo || v > hi) dev_cli_refuse(cli, "%s %s: expected a whole number from %ld to %ld", what, s, lo, hi);
    return v;
}

// s, the value given for `what`, as a finite number >= 0; otherwise the refusal
static inline double dev_cli_nonneg(const DevCli* cli, const char* what, const char* s) {
    char* end;
    double v = strtod(s, &end);
    if (end == s || *end || !(v >= 0.0) || v > 1e300) dev_cli_refuse(cli, "%s %s: expected a number >= 0", what, s);
    return v;
}
