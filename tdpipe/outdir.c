// The run's output folder: its lock, archiving an earlier run, removing temporary files, cutting
// log.jsonl back on resume, and checking output paths (see outdir.h).
#define _GNU_SOURCE // memmem
#include "outdir.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "llmc/checkpoint.h"
#include "llmc/common.h"

#define LOCK_INFO_CAP 512
#define TRIM_SUFFIX ".tmp"

static int join(char* out, size_t cap, const char* dir, const char* name) {
    size_t a = strlen(dir), b = strlen(name);
    if (a + b + 2 > cap) return -1;
    memcpy(out, dir, a);
    out[a] = '/';
    memcpy(out + a + 1, name, b + 1);
    return 0;
}

static int name_order(const void* a, const void* b) { return strcmp(*(char* const*)a, *(char* const*)b); }

// a file is created in dir and removed again: root passes access(2) checks on a read-only mount too
// path's folder into dir (cap >= strlen(path) + 2): "." for a bare name, "/" for one in the root;
// returns the name after the folder, in path
static const char* split_dir(const char* path, char* dir, size_t cap) {
    snprintf(dir, cap, "%s", path);
    char* slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, cap, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
    return slash ? path + (slash - dir) + 1 : path;
}

static int probe_writable(const char* dir, const char* shown, char* err, size_t errlen) {
    char probe[OUTDIR_PATH_CAP];
    snprintf(probe, sizeof probe, "%s/.tdpipe-probe-%ld", dir, (long)getpid());
    if (strlen(dir) + 40 >= sizeof probe) return td_error(err, errlen, "%s: path too long", shown);
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return td_error(err, errlen, "%s: cannot write in folder %s: %s", shown, dir, strerror(errno));
    close(fd);
    unlink(probe);
    return 0;
}

static int fsync_dir(const char* dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd) != 0 && errno != EINVAL ? -1 : 0;
    close(fd);
    return rc;
}

// mkdir -p
static int make_dirs(const char* dir, char* err, size_t errlen) {
    char path[OUTDIR_PATH_CAP];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) return td_error(err, errlen, "%s: path too long", dir);
    for (char* p = path + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(path, 0755); // an error shows in the last mkdir or the stat below
            *p = '/';
        }
    if (mkdir(path, 0755) != 0 && errno != EEXIST) return td_error(err, errlen, "%s: cannot create the folder: %s", dir, strerror(errno));
    struct stat st;
    if (stat(path, &st) != 0) return td_error(err, errlen, "%s: cannot create the folder: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return td_error(err, errlen, "%s: exists and is not a directory", dir);
    return 0;
}

// ----------------------------------------------------------------------------------------------
// the lock

// The holder's line "<pid> <host> <time>" into info; 1 when it names a live holder. The holder
// writes it right after taking the lock, so until then the file is empty or still names an
// earlier holder that has died (its lock died with it): neither is taken for an answer.
static int read_owner(int fd, const char* my_host, char* info, size_t cap, long* pid, char* host, char* since) {
    ssize_t n = pread(fd, info, cap - 1, 0);
    info[n > 0 ? n : 0] = 0;
    info[strcspn(info, "\n")] = 0;
    if (sscanf(info, "%ld %255s %127[^\n]", pid, host, since) != 3 || *pid <= 0) return 0;
    return strcmp(host, my_host) != 0 || kill((pid_t)*pid, 0) == 0 || errno == EPERM;
}

int outdir_open(OutDir* od, const char* dir, char* err, size_t errlen) {
    memset(od, 0, sizeof *od);
    od->lock_fd = -1;
    char lock_path[OUTDIR_PATH_CAP];
    if (!dir[0]) return td_error(err, errlen, "'': an empty path (give the folder for log.jsonl, checkpoints and model.bin)");
    if (snprintf(od->dir, sizeof od->dir, "%s", dir) >= (int)sizeof od->dir || join(lock_path, sizeof lock_path, dir, OUTDIR_LOCK_NAME) != 0)
        return td_error(err, errlen, "%s: path too long", dir);
    if (make_dirs(dir, err, errlen) != 0 || probe_writable(dir, dir, err, errlen) != 0) return -1;
    // O_NONBLOCK until fstat has said it is a regular file (a FIFO there would take a write and refuse
    // the lock's truncation with a bare EINVAL); not truncated here: the holder's line must survive
    int fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
    struct stat lst = {0};
    if (fd < 0 && errno == ELOOP) return td_error(err, errlen, "%s: the lock file %s is a symbolic link: remove it", dir, lock_path);
    if (fd < 0) return td_error(err, errlen, "%s: cannot open the lock file %s: %s", dir, lock_path, strerror(errno));
    if (fstat(fd, &lst) != 0 || !S_ISREG(lst.st_mode)) {
        close(fd);
        return td_error(err, errlen, "%s: the lock file %s is %s, not a regular file: remove it", dir, lock_path,
                        S_ISFIFO(lst.st_mode) ? "a FIFO" : S_ISSOCK(lst.st_mode) ? "a socket" : "a device or other special file");
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        int e = errno;
        close(fd);
        return td_error(err, errlen, "%s: cannot open the lock file %s: %s", dir, lock_path, strerror(e));
    }
    char host[256] = "unknown", since[128] = "?", info[LOCK_INFO_CAP];
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "unknown");
    host[sizeof host - 1] = 0;
    for (char* p = host; *p; p++)
        if (*p == ' ' || *p == '\n') *p = '_';
    // while the holder has not yet written its line, ask again (it may also let go): 200 x 10 ms at most
    for (int tries = 0; flock(fd, LOCK_EX | LOCK_NB) != 0; tries++) {
        int e = errno;
        long pid = -1;
        char their_host[256], their_since[128];
        int named = e == EWOULDBLOCK && read_owner(fd, host, info, sizeof info, &pid, their_host, their_since);
        if (e != EWOULDBLOCK || named || tries == 200) {
            close(fd);
            if (e != EWOULDBLOCK) return td_error(err, errlen, "%s: cannot lock %s: %s", dir, lock_path, strerror(e));
            if (named)
                return td_error(err, errlen, "%s is in use by process %ld on host %s since %s (lock file %s)", dir, pid, their_host, their_since, lock_path);
            return td_error(err, errlen, "%s is in use by another process, which has not said which (lock file %s)", dir, lock_path);
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    time_t now = time(NULL);
    struct tm tm;
    if (localtime_r(&now, &tm)) strftime(since, sizeof since, "%Y-%m-%d %H:%M:%S %Z", &tm);
    int n = snprintf(info, sizeof info, "%ld %s %s\n", (long)getpid(), host, since);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, info, (size_t)n, 0) != n) {
        int e = errno;
        close(fd);
        return td_error(err, errlen, "%s: cannot write the lock file %s: %s", dir, lock_path, strerror(e));
    }
    od->lock_fd = fd;
    return 0;
}

void outdir_close(OutDir* od) {
    if (od->lock_fd < 0) return;
    if (ftruncate(od->lock_fd, 0) != 0) { /* a stale owner line is harmless: the lock is what counts */ }
    close(od->lock_fd);
    od->lock_fd = -1;
}

// ----------------------------------------------------------------------------------------------
// temporary files, an earlier run's files

static const char* const RUN_FILES[] = {"log.jsonl", "model.bin"};
static const char* const TEMP_FILES[] = {"log.jsonl" TRIM_SUFFIX, "model.bin.tmp"};
#define N_NAMED 2

static int is_named(const char* name, const char* const* names) {
    for (int i = 0; i < N_NAMED; i++)
        if (strcmp(name, names[i]) == 0) return 1;
    return 0;
}

// regular files of dir (not followed through links) whose names pass want; (*n) names, malloc'd
typedef int (*NameFilter)(const char* name);
static int list_files(const char* dir, NameFilter want, char*** names, int* n, time_t* newest, char* err, size_t errlen) {
    *names = NULL;
    *n = 0;
    if (newest) *newest = 0;
    DIR* d = opendir(dir);
    if (!d) return td_error(err, errlen, "%s: cannot list the folder: %s", dir, strerror(errno));
    int cap = 0;
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        char path[OUTDIR_PATH_CAP];
        struct stat st;
        if (!want(e->d_name) || join(path, sizeof path, dir, e->d_name) != 0 || lstat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            *names = (char**)realloc_check(*names, (size_t)cap * sizeof(char*));
        }
        (*names)[(*n)++] = strdup(e->d_name);
        if (!(*names)[*n - 1]) td_fatal("strdup failed: out of memory");
        if (newest && st.st_mtime > *newest) *newest = st.st_mtime;
    }
    closedir(d);
    if (*n > 1) qsort(*names, (size_t)*n, sizeof(char*), name_order); // readdir's order differs between file systems
    return 0;
}

static void free_names(char** names, int n) {
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
}

static int is_temp(const char* name) { return ckpt_is_temp_name(name) || is_named(name, TEMP_FILES); }
static int is_run_file(const char* name) { return ckpt_name_step(name) >= 0 || ckpt_name_kept(name) || is_named(name, RUN_FILES); }

int outdir_remove_temps(const OutDir* od, int* removed, char* err, size_t errlen) {
    char** names;
    int n;
    if (removed) *removed = 0;
    if (list_files(od->dir, is_temp, &names, &n, NULL, err, errlen) != 0) return -1;
    int rc = 0;
    for (int i = 0; i < n; i++) {
        char path[OUTDIR_PATH_CAP];
        join(path, sizeof path, od->dir, names[i]);
        if (unlink(path) == 0) {
            if (removed) (*removed)++;
        } else if (errno != ENOENT && rc == 0) {
            rc = td_error(err, errlen, "%s: cannot remove a left-over temporary file: %s", path, strerror(errno));
        }
    }
    free_names(names, n);
    return rc;
}

// the order subfolders were made in: by their time (YYYYmmdd-HHMMSS), then by the "-k" made when
// that time was taken (none is 1); > 0 when a was made after b
static int archive_cmp(const char* a, const char* b) {
    size_t plen = strlen(OUTDIR_ARCHIVE_PREFIX), tlen = 15;
    if (strlen(a) < plen + tlen || strlen(b) < plen + tlen) return strcmp(a, b);
    int c = strncmp(a + plen, b + plen, tlen);
    if (c != 0) return c;
    long ka = a[plen + tlen] == '-' ? strtol(a + plen + tlen + 1, NULL, 10) : 1, kb = b[plen + tlen] == '-' ? strtol(b + plen + tlen + 1, NULL, 10) : 1;
    return (ka > kb) - (ka < kb);
}

int outdir_newest_archive(const char* dir, char* name, size_t cap) {
    DIR* d = opendir(dir);
    if (!d) return 0;
    int found = 0;
    char best[256] = "";
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        char path[OUTDIR_PATH_CAP];
        struct stat st;
        if (strncmp(e->d_name, OUTDIR_ARCHIVE_PREFIX, strlen(OUTDIR_ARCHIVE_PREFIX)) != 0 || strlen(e->d_name) >= sizeof best) continue;
        if (join(path, sizeof path, dir, e->d_name) != 0 || lstat(path, &st) != 0 || !S_ISDIR(st.st_mode)) continue;
        if (!found || archive_cmp(e->d_name, best) > 0) {
            snprintf(best, sizeof best, "%s", e->d_name);
            found = 1;
        }
    }
    closedir(d);
    if (found) snprintf(name, cap, "%s", best);
    return found;
}

// dir/earlier-run-<time of newest>[-k] made anew; 0, or -1 + err
static int make_archive_dir(const char* dir, time_t newest, char* sub, size_t cap, char* err, size_t errlen) {
    char stamp[64];
    struct tm tm;
    if (!localtime_r(&newest, &tm) || strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm) == 0) snprintf(stamp, sizeof stamp, "%ld", (long)newest);
    for (int k = 1; k <= 1000; k++) {
        int w = k == 1 ? snprintf(sub, cap, "%s/%s%s", dir, OUTDIR_ARCHIVE_PREFIX, stamp)
                       : snprintf(sub, cap, "%s/%s%s-%d", dir, OUTDIR_ARCHIVE_PREFIX, stamp, k);
        if (w < 0 || (size_t)w >= cap) return td_error(err, errlen, "%s: path too long", dir);
        if (mkdir(sub, 0755) == 0) return 0;
        if (errno != EEXIST) return td_error(err, errlen, "%s: cannot create %s for the earlier run's files: %s", dir, sub, strerror(errno));
    }
    return td_error(err, errlen, "%s: 1000 folders %s%s* exist already", dir, OUTDIR_ARCHIVE_PREFIX, stamp);
}

int outdir_archive_earlier(const OutDir* od, char* note, size_t notelen, char* err, size_t errlen) {
    if (note && notelen) note[0] = 0;
    char** names;
    int n;
    time_t newest;
    if (list_files(od->dir, is_run_file, &names, &n, &newest, err, errlen) != 0) return -1;
    if (n == 0) {
        free(names);
        return 0;
    }
    char sub[OUTDIR_PATH_CAP];
    if (make_archive_dir(od->dir, newest, sub, sizeof sub, err, errlen) != 0) {
        free_names(names, n);
        return -1;
    }
    int moved = 0, ckpts = 0, kept = 0, rc = 0;
    char others[64] = ""; // ", log.jsonl, model.bin" as far as they moved
    for (int i = 0; i < n && rc == 0; i++) {
        char from[OUTDIR_PATH_CAP], to[OUTDIR_PATH_CAP];
        if (join(from, sizeof from, od->dir, names[i]) != 0 || join(to, sizeof to, sub, names[i]) != 0 || rename(from, to) != 0) {
            rc = td_error(err, errlen, "%s: cannot move %s into %s (%d of the earlier run's %d files moved there; nothing deleted): %s",
                          od->dir, names[i], sub, moved, n, strerror(errno));
            break;
        }
        moved++;
        if (ckpt_name_step(names[i]) >= 0) ckpts++;
        else if (ckpt_name_kept(names[i])) kept++;
        else snprintf(others + strlen(others), sizeof others - strlen(others), ", %s", names[i]);
    }
    if (rc == 0 && (fsync_dir(od->dir) != 0 || fsync_dir(sub) != 0))
        rc = td_error(err, errlen, "%s: the earlier run's files moved to %s, but fsync of the folders failed: %s", od->dir, sub, strerror(errno));
    char kept_aside[48] = "";
    if (kept) snprintf(kept_aside, sizeof kept_aside, ", %d kept aside", kept);
    if (rc == 0 && note && notelen)
        snprintf(note, notelen, "%s: an earlier run's files (%d checkpoint%s%s%s) moved to %s/ (nothing deleted)", od->dir, ckpts,
                 ckpts == 1 ? "" : "s", kept_aside, others, sub);
    free_names(names, n);
    return rc == 0 ? moved : -1;
}

// ----------------------------------------------------------------------------------------------
// log.jsonl on resume

// the value of the line's "step" key; 0 when it has none
static int line_step(const char* line, size_t len, long* step) {
    static const char key[] = "\"step\":";
    char buf[64];
    size_t n = len < sizeof buf - 1 ? len : sizeof buf - 1; // the key comes first in every record
    memcpy(buf, line, n);
    buf[n] = 0;
    const char* k = strstr(buf, key);
    if (!k) return 0;
    char* end;
    *step = strtol(k + sizeof key - 1, &end, 10);
    return end != k + sizeof key - 1;
}

int outdir_trim_log(const char* path, long step, const char* keep, int* dropped, int* torn, char* err, size_t errlen) {
    if (dropped) *dropped = 0;
    if (torn) *torn = 0;
    struct stat st;
    if (stat(path, &st) != 0 && errno == ENOENT) return 0;
    size_t n;
    char* s = (char*)td_read_file(path, "log", &n, err, errlen); // (n,)
    if (!s) return -1;
    char* kept = (char*)malloc_check(n + 1); // (n,) the lines that stay
    size_t k = 0;
    int gone = 0, cut = 0; // lines past the step; a last line without its newline
    for (size_t i = 0; i < n;) {
        char* nl = (char*)memchr(s + i, '\n', n - i);
        size_t len = nl ? (size_t)(nl - (s + i)) + 1 : n - i;
        long t;
        int kept_anyway = nl && keep && memmem(s + i, len, keep, strlen(keep));
        if (nl && (kept_anyway || !(line_step(s + i, len, &t) && t > step))) {
            memcpy(kept + k, s + i, len);
            k += len;
        } else if (!nl) {
            cut = 1;
        } else {
            gone++;
        }
        i += len;
    }
    free(s);
    int rc = 0;
    if (gone + cut > 0) {
        char tmp[OUTDIR_PATH_CAP];
        if (snprintf(tmp, sizeof tmp, "%s%s", path, TRIM_SUFFIX) >= (int)sizeof tmp) {
            free(kept);
            return td_error(err, errlen, "%s: path too long", path);
        }
        int fd = td_create_regular(tmp, "log", err, errlen);
        size_t done = 0;
        while (fd >= 0 && done < k) {
            ssize_t w = write(fd, kept + done, k - done);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) break;
            done += (size_t)w;
        }
        if (fd < 0 || done != k || fsync(fd) != 0 || close(fd) != 0 || rename(tmp, path) != 0) {
            rc = td_error(err, errlen, "%s: cannot cut the log back to step %ld: %s (the log is as it was)", path, step, strerror(errno));
            unlink(tmp);
        } else {
            char dir[OUTDIR_PATH_CAP];
            split_dir(path, dir, sizeof dir);
            if (fsync_dir(dir) != 0) rc = td_error(err, errlen, "%s: cut back, but fsync of its folder failed: %s", path, strerror(errno));
        }
    }
    free(kept);
    if (dropped) *dropped = gone;
    if (torn) *torn = cut;
    return rc;
}

// ----------------------------------------------------------------------------------------------
// output files named by flags

int outdir_check_file_replaceable(const OutDir* od, const char* path, const char* head, char* err, size_t errlen) {
    if (outdir_check_file_writable(path, err, errlen)) return -1; // (it has checked the path's length)
    char dir[OUTDIR_PATH_CAP], real_dir[PATH_MAX], real_od[PATH_MAX];
    const char* base = split_dir(path, dir, sizeof dir);
    if (realpath(dir, real_dir) && realpath(od->dir, real_od) && !strcmp(real_dir, real_od) &&
        (is_run_file(base) || is_temp(base) || !strcmp(base, OUTDIR_LOCK_NAME)))
        return td_error(err, errlen, "%s: is the run's own %s in -o %s: give the trace another name", path, base, od->dir);
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) return 0;
    size_t n = strlen(head);
    char got[64] = {0};
    FILE* f = fopen(path, "rb");
    size_t have = f ? fread(got, 1, n < sizeof got - 1 ? n : sizeof got - 1, f) : 0;
    if (f) fclose(f);
    if (have == n && !memcmp(got, head, n)) return 0;
    for (size_t i = 0; i < have; i++)
        if ((unsigned char)got[i] < 32 || (unsigned char)got[i] > 126) got[i] = '.';
    return td_error(err, errlen, "%s: exists and is not a trace (it starts \"%.*s\"): the trace would overwrite it; name a new file or remove this one",
                    path, (int)(have < 16 ? have : 16), got);
}

int outdir_check_model_file(const OutDir* od, char* err, size_t errlen) {
    for (int i = 0; i < 2; i++) { // model.bin takes a rename over anything but a directory; the temporary is opened as a regular file
        char path[OUTDIR_PATH_CAP];
        struct stat st;
        if (join(path, sizeof path, od->dir, i ? TEMP_FILES[1] : RUN_FILES[1]) != 0) return td_error(err, errlen, "%s: path too long", od->dir);
        if (lstat(path, &st) != 0 || S_ISREG(st.st_mode) || (i == 0 && !S_ISDIR(st.st_mode))) continue;
        const char* kind = S_ISDIR(st.st_mode) ? "a directory" : S_ISLNK(st.st_mode) ? "a symbolic link" : S_ISFIFO(st.st_mode) ? "a FIFO" : "a special file";
        return td_error(err, errlen, "%s: is %s, where the run writes its model at the end: move it away", path, kind);
    }
    return 0;
}

int outdir_check_file_writable(const char* path, char* err, size_t errlen) {
    if (!path[0]) return td_error(err, errlen, "(empty path): not a file name");
    char dir[OUTDIR_PATH_CAP];
    if (snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir) return td_error(err, errlen, "%s: path too long", path);
    if (path[strlen(path) - 1] == '/') return td_error(err, errlen, "%s: names a folder, not a file", path);
    split_dir(path, dir, sizeof dir);
    struct stat st;
    if (stat(dir, &st) != 0) return td_error(err, errlen, "%s: its folder %s does not exist", path, dir);
    if (!S_ISDIR(st.st_mode)) return td_error(err, errlen, "%s: %s is not a folder", path, dir);
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode)) return td_error(err, errlen, "%s: is a directory, not a file", path);
        if (S_ISFIFO(st.st_mode)) { // writing would wait for a reader forever; with one, it is a pipe like any other
            int fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
            if (fd < 0) return td_error(err, errlen, "%s: is a FIFO that no process reads", path);
            close(fd);
            return 0;
        }
    }
    return probe_writable(dir, path, err, errlen);
}
