// Tests of the output folder (tdpipe/outdir.h): the lock (held, refused with the owner, released
// on exit and on a crash, one winner among racing processes), moving an earlier run aside,
// removing temporary files, cutting log.jsonl back, output path checks, and the memory figure.
#define _GNU_SOURCE
#include "tdpipe/outdir.h"
#include "tests/test.h"
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <utime.h>

static const char* g_root; // the test folder


static void spit(const char* path, const char* text) {
    FILE* f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(1);
    }
    fputs(text, f);
    fclose(f);
}

static char* slurp(const char* path) {
    FILE* f = fopen(path, "rb");
    if (!f) return NULL;
    static char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

static int exists(const char* path) { return access(path, F_OK) == 0; }

// the one entry of dir whose name starts with prefix (into out), counting them
static int find_prefixed(const char* dir, const char* prefix, char* out, size_t cap) {
    DIR* d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent* e;
    while ((e = readdir(d)) != NULL)
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) {
            snprintf(out, cap, "%s/%s", dir, e->d_name);
            n++;
        }
    closedir(d);
    return n;
}

// a child process tries the lock: 0 it got it, 1 refused as in use, 2 other error
static int child_tries(const char* dir, char* msg, size_t cap) {
    int fds[2];
    if (pipe(fds) != 0) return 2;
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        OutDir od;
        char err[2048];
        int rc = outdir_open(&od, dir, err, sizeof err);
        if (rc != 0 && write(fds[1], err, strlen(err)) < 0) _exit(3);
        _exit(rc == 0 ? 0 : strstr(err, "is in use by") ? 1 : 2);
    }
    close(fds[1]);
    ssize_t n = read(fds[0], msg, cap - 1);
    msg[n > 0 ? n : 0] = 0;
    close(fds[0]);
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 2;
}

static void test_lock(void) {
    const char* dir = test_path("run/a/out"); // parents made too
    OutDir od;
    char err[2048], msg[2048], host[256] = "";
    gethostname(host, sizeof host);
    CHECK(outdir_open(&od, dir, err, sizeof err) == 0, "a fresh folder (and its parents) made and locked (%s)", err);
    char want[512];
    snprintf(want, sizeof want, "is in use by process %ld on host %s since ", (long)getpid(), host);
    int r = child_tries(dir, msg, sizeof msg);
    CHECK(r == 1 && strstr(msg, dir) && strstr(msg, want) && strstr(msg, "tdpipe.lock"), "a second process is refused, naming the owner: %s", msg);
    outdir_close(&od);
    r = child_tries(dir, msg, sizeof msg);
    CHECK(r == 0, "after outdir_close another process gets it (%s)", msg);

    pid_t pid = fork(); // a run that dies without closing anything
    if (pid == 0) {
        OutDir mine;
        if (outdir_open(&mine, dir, err, sizeof err) != 0) _exit(1);
        raise(SIGKILL);
        _exit(2);
    }
    int st;
    waitpid(pid, &st, 0);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "a locking child killed by SIGKILL");
    CHECK(outdir_open(&od, dir, err, sizeof err) == 0, "its lock died with it (%s)", err);
    outdir_close(&od);

    // a holder that has not written its line, over the line of an earlier holder that died
    // (pid 2^22 + 1 is above Linux's largest pid, so no process has it)
    char lock[1024], line[600];
    snprintf(lock, sizeof lock, "%s/tdpipe.lock", dir);
    snprintf(line, sizeof line, "4194305 %s 2020-01-01 00:00:00 UTC\n", host);
    spit(lock, line);
    int held[2], release[2];
    if (pipe(held) != 0 || pipe(release) != 0) exit(1);
    pid = fork();
    if (pid == 0) {
        close(held[0]);
        close(release[1]);
        int fd = open(lock, O_RDWR);
        char c = flock(fd, LOCK_EX) == 0 ? 'H' : 'X';
        if (write(held[1], &c, 1) != 1 || read(release[0], &c, 1) < 0) _exit(1); // holds until the parent closes release
        _exit(0);
    }
    close(held[1]);
    close(release[0]);
    char c;
    CHECK(read(held[0], &c, 1) == 1 && c == 'H', "a process holds the lock without saying who it is");
    r = child_tries(dir, msg, sizeof msg);
    CHECK(r == 1 && strstr(msg, "in use by another process, which has not said which") && !strstr(msg, "4194305"),
          "the dead earlier holder's line is not taken for the owner: %s", msg);
    close(release[1]);
    waitpid(pid, NULL, 0);
    close(held[0]);

    spit(test_path("plainfile"), "x");
    CHECK(outdir_open(&od, "", err, sizeof err) == -1 && strstr(err, "'': an empty path"), "an empty path: %s", err);
    CHECK(outdir_open(&od, test_path("plainfile"), err, sizeof err) == -1 && strstr(err, "exists and is not a directory"), "a file as the folder: %s", err);
    CHECK(outdir_open(&od, "/proc/tdpipe_test_outdir", err, sizeof err) == -1 && strstr(err, "cannot create the folder"), "an uncreatable folder: %s", err);
    CHECK(outdir_open(&od, "/proc", err, sizeof err) == -1 && strstr(err, "cannot write in folder /proc"), "an unwritable folder: %s", err);
    // something other than a file where the lock file goes: said, at once, with what to do
    const char* fifo_dir = test_path("fifolock");
    char lock_path[512];
    mkdir(fifo_dir, 0755);
    snprintf(lock_path, sizeof lock_path, "%s/%s", fifo_dir, OUTDIR_LOCK_NAME);
    CHECK(mkfifo(lock_path, 0644) == 0, "a FIFO named %s", OUTDIR_LOCK_NAME);
    CHECK(outdir_open(&od, fifo_dir, err, sizeof err) == -1 && strstr(err, "is a FIFO, not a regular file: remove it"), "a FIFO as the lock file: %s", err);
    unlink(lock_path);
    CHECK(symlink("/tmp", lock_path) == 0, "a symbolic link there instead");
    CHECK(outdir_open(&od, fifo_dir, err, sizeof err) == -1 && strstr(err, "is a symbolic link: remove it"), "a symbolic link as the lock file: %s", err);
}

// the newest earlier-run-* subfolder, in the order outdir_archive_earlier makes them
static void test_newest_archive(void) {
    const char* dir = test_path("archives");
    char name[256] = "", p[512];
    mkdir(dir, 0755);
    CHECK(outdir_newest_archive(dir, name, sizeof name) == 0, "no earlier-run-* folder: none");
    const char* made[] = {"earlier-run-20261205-213740", "earlier-run-20261205-213740-2", "earlier-run-20261205-213740-10"};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, made[i]);
        mkdir(p, 0755);
    }
    snprintf(p, sizeof p, "%s/earlier-run-20991231-235959", dir);
    spit(p, "a file, not a folder");
    CHECK(outdir_newest_archive(dir, name, sizeof name) == 1 && !strcmp(name, made[2]), "-10 after -2 after none, a file of that name skipped: %s", name);
    snprintf(p, sizeof p, "%s/earlier-run-20261206-000000", dir);
    mkdir(p, 0755);
    CHECK(outdir_newest_archive(dir, name, sizeof name) == 1 && !strcmp(name, "earlier-run-20261206-000000"), "a later time first, whatever its suffix: %s", name);
}

// N processes released at once by one write to a shared pipe; exactly one may win
static void test_lock_race(void) {
    enum { N = 6 };
    const char* dir = test_path("race");
    int go[2], result[2], done[2];
    if (pipe(go) || pipe(result) || pipe(done)) exit(1);
    pid_t kids[N];
    for (int i = 0; i < N; i++) {
        kids[i] = fork();
        if (kids[i] == 0) {
            close(go[1]);
            close(result[0]);
            close(done[1]);
            char c;
            if (read(go[0], &c, 1) < 0) _exit(2); // EOF when the parent closes: all start together
            OutDir od;
            char err[2048];
            int rc = outdir_open(&od, dir, err, sizeof err);
            char verdict = rc == 0 ? 'W' : strstr(err, "is in use by") ? 'L' : 'X';
            if (write(result[1], &verdict, 1) != 1) _exit(2);
            if (rc == 0 && read(done[0], &c, 1) < 0) _exit(2); // hold the lock until everyone has tried
            _exit(0);
        }
    }
    close(go[0]);
    close(result[1]);
    close(done[0]);
    close(go[1]);
    int won = 0, lost = 0;
    for (int i = 0; i < N; i++) {
        char v;
        if (read(result[0], &v, 1) != 1) break;
        won += v == 'W';
        lost += v == 'L';
    }
    close(done[1]);
    for (int i = 0; i < N; i++) waitpid(kids[i], NULL, 0);
    close(result[0]);
    CHECK(won == 1 && lost == N - 1, "%d processes racing for one folder: %d got it, %d were told it is in use", N, won, lost);
}

static void test_temps(void) {
    const char* dir = test_path("temps");
    OutDir od;
    char err[2048];
    outdir_open(&od, dir, err, sizeof err);
    char p[1024];
    const char* gone[] = {".ckpt_00000010.tdck.tmp", ".ckpt_7.tdck.tmp", "model.bin.tmp", "log.jsonl.tmp"};
    const char* stay[] = {"ckpt_00000010.tdck", "notes.tmp", ".ckpt_x.tdck.tmp", "x.ckpt_00000010.tdck.tmp", "model.bin", "log.jsonl"};
    for (int i = 0; i < 4; i++) snprintf(p, sizeof p, "%s/%s", dir, gone[i]), spit(p, "t");
    for (int i = 0; i < 6; i++) snprintf(p, sizeof p, "%s/%s", dir, stay[i]), spit(p, "s");
    snprintf(p, sizeof p, "%s/.ckpt_00000011.tdck.tmp", dir);
    mkdir(p, 0755); // a folder with a temporary file's name is not one
    char link[1024];
    snprintf(link, sizeof link, "%s/.ckpt_00000012.tdck.tmp", dir);
    if (symlink("ckpt_00000010.tdck", link) != 0) perror(link); // nor is a symbolic link (regular files only)
    int removed = -1;
    CHECK(outdir_remove_temps(&od, &removed, err, sizeof err) == 0 && removed == 4, "4 temporary files removed (%d; %s)", removed, err);
    struct stat lst;
    int ok = exists(p) && lstat(link, &lst) == 0 && S_ISLNK(lst.st_mode);
    for (int i = 0; i < 6; i++) snprintf(p, sizeof p, "%s/%s", dir, stay[i]), ok &= exists(p);
    for (int i = 0; i < 4; i++) snprintf(p, sizeof p, "%s/%s", dir, gone[i]), ok &= !exists(p);
    CHECK(ok, "only the writers' temporary names went; checkpoints, notes.tmp, look-alikes, the folder and the link stay");
    outdir_close(&od);
}

static void test_archive(void) {
    const char* dir = test_path("arch");
    OutDir od;
    char err[2048], note[4096], p[2048], sub[1024];
    outdir_open(&od, dir, err, sizeof err);
    CHECK(outdir_archive_earlier(&od, note, sizeof note, err, sizeof err) == 0 && note[0] == 0 &&
              find_prefixed(dir, OUTDIR_ARCHIVE_PREFIX, sub, sizeof sub) == 0,
          "an empty folder: nothing to move, no subfolder");
    const char* files[] = {"ckpt_00000005.tdck", "ckpt_00000010.tdck", "log.jsonl", "model.bin", "ckpt_00000010.tdck.kept"};
    for (int i = 0; i < 5; i++) snprintf(p, sizeof p, "%s/%s", dir, files[i]), spit(p, files[i]);
    snprintf(p, sizeof p, "%s/notes.txt", dir);
    spit(p, "mine");
    snprintf(p, sizeof p, "%s/ckpt_00000020.tdck", dir);
    mkdir(p, 0755);
    struct utimbuf t = {1700000000, 1700000000}; // the newest file names the subfolder
    for (int i = 0; i < 5; i++) snprintf(p, sizeof p, "%s/%s", dir, files[i]), utime(p, &t);
    struct utimbuf older = {1690000000, 1690000000}; // one file older than the rest: the newest (not the first, not notes.txt) names it
    snprintf(p, sizeof p, "%s/%s", dir, files[1]), utime(p, &older);
    int n = outdir_archive_earlier(&od, note, sizeof note, err, sizeof err);
    CHECK(n == 5 && strstr(note, "2 checkpoints, 1 kept aside, log.jsonl, model.bin") && strstr(note, "nothing deleted"),
          "5 files moved (a checkpoint kept aside by a resume among them): %s", note);
    CHECK(find_prefixed(dir, OUTDIR_ARCHIVE_PREFIX, sub, sizeof sub) == 1 && strstr(note, sub), "into one subfolder %s", sub);
    char stamp[64], want_sub[1100];
    time_t newest = 1700000000;
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", localtime(&newest));
    snprintf(want_sub, sizeof want_sub, "%s/%s%s", dir, OUTDIR_ARCHIVE_PREFIX, stamp);
    CHECK(!strcmp(sub, want_sub), "named by the newest file's time: %s (want %s)", sub, want_sub);
    int ok = 1;
    for (int i = 0; i < 5; i++) {
        snprintf(p, sizeof p, "%s/%s", sub, files[i]);
        const char* got = slurp(p);
        ok &= got && strcmp(got, files[i]) == 0;
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        ok &= !exists(p);
    }
    CHECK(ok, "each file whole in the subfolder and gone from the folder");
    snprintf(p, sizeof p, "%s/notes.txt", dir);
    int stays = exists(p);
    snprintf(p, sizeof p, "%s/ckpt_00000020.tdck", dir);
    CHECK(stays && exists(p), "other files and a folder named like a checkpoint stay");
    snprintf(p, sizeof p, "%s/log.jsonl", dir);
    spit(p, "again");
    utime(p, &t);
    char sub1[1024];
    snprintf(sub1, sizeof sub1, "%s", sub);
    n = outdir_archive_earlier(&od, note, sizeof note, err, sizeof err);
    snprintf(p, sizeof p, "%s-2/log.jsonl", sub1);
    CHECK(n == 1 && exists(p) && strstr(note, "0 checkpoints, log.jsonl"), "a second earlier run of the same second goes to -2: %s", note);
    outdir_close(&od);
}

static void test_trim(void) {
    const char* log = test_path("trim.jsonl");
    const char* text = "{\"step\": 1, \"loss\": 5}\n{\"step\": 2, \"loss\": 4}\n{\"step\": 2, \"val_loss\": 4.5}\n{\"note\": \"no step\"}\n"
                       "{\"step\": 3, \"loss\": 3}\n{\"step\": 10, \"loss\": 2}\n{\"step\": 4, \"lo";
    spit(log, text);
    int dropped = -1, torn = -1;
    char err[2048];
    CHECK(outdir_trim_log(log, 2, NULL, &dropped, &torn, err, sizeof err) == 0 && dropped == 2 && torn == 1,
          "cut back to step 2: 2 whole lines dropped and the torn last one (%d, %d; %s)", dropped, torn, err);
    const char* got = slurp(log);
    CHECK(got && strcmp(got, "{\"step\": 1, \"loss\": 5}\n{\"step\": 2, \"loss\": 4}\n{\"step\": 2, \"val_loss\": 4.5}\n{\"note\": \"no step\"}\n") == 0,
          "steps 1 and 2 (with validation) and the line without a step remain:\n%s", got ? got : "(none)");
    CHECK(!exists(test_path("trim.jsonl.tmp")), "no temporary file left");
    struct stat before, after;
    stat(log, &before);
    CHECK(outdir_trim_log(log, 5, NULL, &dropped, &torn, err, sizeof err) == 0 && dropped == 0 && torn == 0, "nothing past step 5: nothing dropped");
    stat(log, &after);
    CHECK(before.st_ino == after.st_ino, "and the file is not rewritten");
    spit(log, "{\"step\": 1}\n{\"step\": 2, \"lo");
    CHECK(outdir_trim_log(log, 5, NULL, &dropped, &torn, err, sizeof err) == 0 && dropped == 0 && torn == 1 && strcmp(slurp(log), "{\"step\": 1}\n") == 0,
          "a torn last line goes even when its step is kept, counted as torn, not as past the step");
    CHECK(outdir_trim_log(test_path("none.jsonl"), 5, NULL, &dropped, NULL, err, sizeof err) == 0 && dropped == 0, "a missing log is fine");
    CHECK(outdir_trim_log(g_root, 5, NULL, &dropped, NULL, err, sizeof err) == -1 && strstr(err, "is a directory"), "a directory as the log: %s", err);
    spit(log, "{\"step\": 1}\n{\"step\": 2}\n{\"step\": 3, \"rollback\": \"a spike\", \"back_to\": 1}\n{\"step\": 2}\n{\"step\": 3}\n");
    CHECK(outdir_trim_log(log, 1, "\"rollback\":", &dropped, NULL, err, sizeof err) == 0 && dropped == 3 &&
              strcmp(slurp(log), "{\"step\": 1}\n{\"step\": 3, \"rollback\": \"a spike\", \"back_to\": 1}\n") == 0,
          "cut back to step 1 keeping the lines with \"rollback\": (an earlier rollback's record)");
}

static void test_file_writable(void) {
    char err[2048];
    CHECK(outdir_check_file_writable(test_path("trace.json"), err, sizeof err) == 0, "a file in an existing folder (%s)", err);
    CHECK(outdir_check_file_writable(test_path("no/such/trace.json"), err, sizeof err) == -1 && strstr(err, "no/such/trace.json: its folder") &&
              strstr(err, "does not exist"),
          "a missing folder: %s", err);
    CHECK(outdir_check_file_writable(g_root, err, sizeof err) == -1 && strstr(err, "is a directory"), "a directory: %s", err);
    CHECK(outdir_check_file_writable(test_path("x/"), err, sizeof err) == -1 && strstr(err, "names a folder"), "a trailing slash: %s", err);
    CHECK(outdir_check_file_writable(test_path("plainfile/t.json"), err, sizeof err) == -1 && strstr(err, "is not a folder"), "a file as the folder: %s", err);
    CHECK(outdir_check_file_writable("/proc/trace.json", err, sizeof err) == -1 && strstr(err, "cannot write in folder /proc"), "an unwritable folder: %s", err);
    const char* fifo = test_path("trace.fifo");
    mkfifo(fifo, 0644);
    CHECK(outdir_check_file_writable(fifo, err, sizeof err) == -1 && strstr(err, "is a FIFO that no process reads"), "a FIFO without a reader: %s", err);
    int rfd = open(fifo, O_RDONLY | O_NONBLOCK);
    CHECK(outdir_check_file_writable(fifo, err, sizeof err) == 0, "a FIFO that a process reads is fine (%s)", err);
    close(rfd);
}

static void mkdirs(const char* rel) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/%s'", g_root, rel);
    if (system(cmd) != 0) exit(1);
}

// a fake root g_root/name with proc/meminfo and proc/self/cgroup as given; p: its path
static void fake_root(const char* name, const char* meminfo, const char* cgroup, char* p, size_t plen) {
    char rel[256];
    snprintf(rel, sizeof rel, "%s/proc/self", name);
    mkdirs(rel);
    snprintf(rel, sizeof rel, "%s/proc/meminfo", name);
    spit(test_path(rel), meminfo);
    snprintf(rel, sizeof rel, "%s/proc/self/cgroup", name);
    spit(test_path(rel), cgroup);
    snprintf(p, plen, "%s/%s", g_root, name);
}

static void test_memory(void) {
    const double MiB = 1048576.0;
    OutdirMemory m;
    char err[2048], p[1024];
    fake_root("m2", "MemTotal:  2000000 kB\nMemFree: 10 kB\nMemAvailable:    1024000 kB\n", "0::/a/b\n", p, sizeof p);
    mkdirs("m2/sys/fs/cgroup/a/b");
    spit(test_path("m2/sys/fs/cgroup/a/memory.max"), "524288000\n");        // 500 MiB
    spit(test_path("m2/sys/fs/cgroup/a/memory.current"), "314572800\n");    // 300 MiB
    spit(test_path("m2/sys/fs/cgroup/a/memory.stat"), "anon 1\nfile 2\ninactive_file 104857600\nactive_file 5\n"); // 100 MiB
    spit(test_path("m2/sys/fs/cgroup/a/b/memory.max"), "max\n");
    spit(test_path("m2/sys/fs/cgroup/a/b/memory.current"), "1000\n");
    int rc = outdir_memory_available_at(p, &m, err, sizeof err);
    CHECK(rc == 0 && m.mem_available == 1024000ull * 1024 && m.cgroup_room == 300 * 1048576ull && m.bytes == m.cgroup_room &&
              strstr(m.source, "cgroup v2") && strstr(m.source, "/a/memory.max"),
          "v2: the parent's 500 MiB limit less 200 MiB in use (file cache not counted) caps MemAvailable: %.1f MiB, %s", m.bytes / MiB, m.source);
    spit(test_path("m2/sys/fs/cgroup/a/memory.max"), "max\n");
    rc = outdir_memory_available_at(p, &m, err, sizeof err);
    CHECK(rc == 0 && m.bytes == m.mem_available && m.cgroup_room == UINT64_MAX && strstr(m.source, "MemAvailable"), "no limit: MemAvailable (%s)", m.source);

    fake_root("m1", "MemAvailable: 4096000 kB\n", "5:devices:/\n4:memory:/job/gone\n0::/\n", p, sizeof p);
    mkdirs("m1/sys/fs/cgroup/memory/job");
    spit(test_path("m1/sys/fs/cgroup/memory/memory.limit_in_bytes"), "9223372036854771712\n"); // v1's "no limit"
    spit(test_path("m1/sys/fs/cgroup/memory/job/memory.limit_in_bytes"), "1073741824\n");
    spit(test_path("m1/sys/fs/cgroup/memory/job/memory.usage_in_bytes"), "536870912\n");
    spit(test_path("m1/sys/fs/cgroup/memory/job/memory.stat"), "cache 9\ninactive_file 7\ntotal_inactive_file 0\n");
    rc = outdir_memory_available_at(p, &m, err, sizeof err);
    CHECK(rc == 0 && m.bytes == 512 * 1048576ull && strstr(m.source, "cgroup v1") && strstr(m.source, "job/memory.limit_in_bytes"),
          "v1, own cgroup missing: the nearest existing ancestor's limit counts: %.1f MiB, %s", m.bytes / MiB, m.source);

    // a container's view (cgroup namespace): its own cgroup is the mount's root, whose limit counts
    // also for a process in a cgroup below it
    fake_root("m3", "MemAvailable: 4096000 kB\n", "0::/x/y\n", p, sizeof p);
    mkdirs("m3/sys/fs/cgroup/x/y");
    spit(test_path("m3/sys/fs/cgroup/memory.max"), "209715200\n");     // 200 MiB
    spit(test_path("m3/sys/fs/cgroup/memory.current"), "104857600\n"); // 100 MiB
    spit(test_path("m3/sys/fs/cgroup/x/y/memory.max"), "max\n");
    rc = outdir_memory_available_at(p, &m, err, sizeof err);
    CHECK(rc == 0 && m.bytes == 100 * 1048576ull && strstr(m.source, "m3/sys/fs/cgroup/memory.max"),
          "v2, a limit at the mount's root and the process two levels below: %.1f MiB, %s", m.bytes / MiB, m.source);
    // hybrid: cgroup v2 mounted at unified/ beside the v1 controllers
    fake_root("m4", "MemAvailable: 4096000 kB\n", "3:cpu:/job\n0::/job\n", p, sizeof p);
    mkdirs("m4/sys/fs/cgroup/unified/job");
    spit(test_path("m4/sys/fs/cgroup/unified/job/memory.max"), "314572800\n"); // 300 MiB, nothing in use
    rc = outdir_memory_available_at(p, &m, err, sizeof err);
    CHECK(rc == 0 && m.bytes == 300 * 1048576ull && strstr(m.source, "unified/job/memory.max"), "hybrid, v2 at unified/: %.1f MiB, %s",
          m.bytes / MiB, m.source);

    mkdirs("m0/proc/self");
    spit(test_path("m0/proc/meminfo"), "MemTotal: 1 kB\n");
    snprintf(p, sizeof p, "%s/m0", g_root);
    CHECK(outdir_memory_available_at(p, &m, err, sizeof err) == -1 && strstr(err, "MemAvailable"), "no MemAvailable: %s", err);

    rc = outdir_memory_available(&m, err, sizeof err);
    CHECK(rc == 0 && m.bytes > 0 && m.bytes <= m.mem_available, "this machine: %.0f MiB (%s)", m.bytes / MiB, m.source);
}

int main(void) {
    g_root = test_dir_make("test_outdir");
    test_lock();
    test_lock_race();
    test_newest_archive();
    test_temps();
    test_archive();
    test_trim();
    test_file_writable();
    test_memory();
    return test_summary();
}
