// The run's output folder (-o): it belongs to one run at a time (a lock); a fresh run moves an
// earlier run's files aside, left-over temporary files go, a resumed run's log.jsonl is cut back
// to its checkpoint; output paths are checked at start; and the memory this process may use.
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define OUTDIR_LOCK_NAME "tdpipe.lock"
#define OUTDIR_ARCHIVE_PREFIX "earlier-run-"
#define OUTDIR_PATH_CAP 4096

typedef struct {
    char dir[OUTDIR_PATH_CAP]; // the folder, as given
    int lock_fd;               // dir/tdpipe.lock, flock'ed while open; -1 when not held
} OutDir;

// Creates dir (and its parents) if missing, checks that it is a directory that can be written
// (a probe file is made and removed), and takes its lock: an exclusive flock on dir/tdpipe.lock,
// which then says "<pid> <host> <start time>". When another process holds it: -1 with "<dir> is
// in use by process 1234 on host x since 2025-01-01 12:00:00 UTC (lock file <dir>/tdpipe.lock)".
// The lock ends with outdir_close or with the process, however it ends (the kernel drops a flock
// with its last descriptor). 0, or -1 + err.
int outdir_open(OutDir* od, const char* dir, char* err, size_t errlen);
// Releases the lock (the lock file stays, emptied: deleting it would let two runs lock two files).
void outdir_close(OutDir* od);

// Removes the temporary files of writes that were killed: the checkpoint writer's
// (ckpt_is_temp_name), model_file_save's "model.bin.tmp" and outdir_trim_log's "log.jsonl.tmp",
// regular files only; nothing else. *removed (may be NULL) counts them. 0, or -1 + err.
int outdir_remove_temps(const OutDir* od, int* removed, char* err, size_t errlen);

// For a fresh run: moves an earlier run's files (regular files named ckpt_<step>.tdck, log.jsonl,
// model.bin) into a new subfolder dir/earlier-run-YYYYmmdd-HHMMSS (the local time the newest of
// them was written; "-2", "-3", ... when that exists). Deletes nothing. Returns how many files
// moved (0: there were none, and no subfolder is made) with note = one line saying where they
// went, or -1 + err (files moved before the failure stay in the subfolder, and err names it).
int outdir_archive_earlier(const OutDir* od, char* note, size_t notelen, char* err, size_t errlen);

// The newest subfolder dir/earlier-run-* (by name: their times sort as they were made) into name;
// 1 when there is one, else 0. For a resume that finds no checkpoint, to say where they went.
int outdir_newest_archive(const char* dir, char* name, size_t cap);

// For a resumed run: cuts the log at path (log.jsonl) back to the records with "step" <= step, so
// no step appears twice once the run goes on; a last line without its newline (a write that was
// cut off) goes too, and lines without a step stay. Crash-safe: the kept lines are written to
// path.tmp, fsynced and renamed over path; the file is left as it is when nothing goes. A missing
// file is fine. keep (or NULL): lines that hold it stay whatever their step (a rollback, which cuts
// back the steps it undid, keeps the records of earlier rollbacks). *dropped (may be NULL) counts the
// whole lines removed (past the step); *torn (may be NULL) is 1 when a cut-off last line went. 0, or -1 + err.
int outdir_trim_log(const char* path, long step, const char* keep, int* dropped, int* torn, char* err, size_t errlen);

// For an output file given by a flag (--trace FILE): checks at start that it can be written
// later: its folder exists, is a directory and can be written (probe file), and path itself is
// not a directory, nor a FIFO that no process reads (writing would wait forever). 0, or -1 with
// "<path>: <problem>".
int outdir_check_file_writable(const char* path, char* err, size_t errlen);
// The same, for a file the run will write over whole (--trace): also refused where path is one of
// od's run files (log.jsonl, model.bin, a checkpoint, the lock, their temporaries), by name whether
// it exists yet or not, or where it holds something that does not start with `head` (what this
// program writes there): an input (-e, a shard, a config) or another file named by mistake.
int outdir_check_file_replaceable(const OutDir* od, const char* path, const char* head, char* err, size_t errlen);

// For any run, at start: model.bin is written at the end as model.bin.tmp renamed over model.bin,
// so a directory at model.bin, or anything but a regular file at model.bin.tmp (which
// outdir_remove_temps leaves), would fail that write after the whole run has trained. 0, or -1 with
// "<dir>/model.bin: <problem>".
int outdir_check_model_file(const OutDir* od, char* err, size_t errlen);

typedef struct {
    uint64_t mem_available; // MemAvailable of /proc/meminfo, bytes
    uint64_t cgroup_room;   // the tightest memory cgroup's limit minus its use (less reclaimable file cache); UINT64_MAX: no limit
    uint64_t bytes;         // what this process may still use: the smaller of the two
    char source[640];       // which bound decided, with its figures
} OutdirMemory;

// The memory this process may use: MemAvailable, capped by every memory cgroup it is in, up to
// the root (cgroup v2 memory.max - memory.current, v1 memory.limit_in_bytes -
// memory.usage_in_bytes, each less inactive_file from memory.stat), so a run can be refused
// before it reserves more. 0, or -1 + err when /proc/meminfo cannot be read.
int outdir_memory_available(OutdirMemory* m, char* err, size_t errlen);
// The same with root prefixed to /proc and /sys/fs/cgroup (tests give it a tree of their own)
int outdir_memory_available_at(const char* root, OutdirMemory* m, char* err, size_t errlen);

#ifdef __cplusplus
}
#endif
