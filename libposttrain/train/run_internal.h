/* The run layer's internals (include/posttrain/run.h): the pt_run handle and
 * the helpers its files share.  Not installed. */
#ifndef PT_TRAIN_RUN_INTERNAL_H
#define PT_TRAIN_RUN_INTERNAL_H

#include "core/core.h"
#include "posttrain/run.h"

#include <stdbool.h>
#include <stdint.h>

#define PT_RUN_LOCK_NAME ".posttrain.lock"
#define PT_RUN_FORMAT 1

struct pt_run {
    pt_run_options o;      /* the options; its strings point to the copies below */
    char *dir, *metrics, *kind, *resume_from;
    char *dir_name, *metrics_name, *resume_name, *save_name, *mismatch_name;
    char *ckpt_dir;        /* DIR/checkpoints */
    char *resume;          /* the checkpoint the run continues from, or NULL */
    char *last_ckpt;       /* the last complete checkpoint, or NULL */
    int lock_fd;           /* DIR/.posttrain.lock, locked */
    int mfd;               /* the metrics file, locked, O_APPEND */
    bool m_created;        /* the open created the metrics file */
    int64_t good;          /* the offset after the metrics file's last whole row */
    int64_t rows;          /* rows this run wrote */
    int m_errno;           /* a failed row's errno (later rows fail at once), or 0 */
    double lost_seconds;   /* pt_run_load: the dropped rows' step_seconds */
    int64_t lost_steps;
    double opened_at;      /* pt_run_open's wall clock (Unix seconds) */
    double last_row_time;  /* the latest "time" of the metrics file's rows before a trim, or 0 */
    double relaunch_seconds; /* pt_run_load: opened_at - last_row_time (>= 0), or 0 */
    double work_seconds;   /* pt_run_note_step */
    int64_t work_steps;
    int64_t save_every;    /* the interval in force (save_auto: 0 until chosen) */
    int64_t last_save;     /* the step of the last complete checkpoint, or -1 */
    double save_seconds;   /* the last pt_run_save's duration */
    pt_dist *dist;         /* the job (borrowed), or NULL */
    pt_goodput *gp;        /* the goodput accountant (borrowed), or NULL */
    int rank, size;        /* this process in the job: 0 and 1 without one */
    int rollbacks;         /* pt_run_rollback calls since the last passing replica check */
    int64_t step;          /* steps done: the state pt_run_load or pt_run_rollback restored, + 1 a
                              pt_run_step_time (the notes of a replica mismatch name it) */
};

/* A note (pt_run_options.notes) of `level`, printf-formatted, on rank 0. */
void pt__run__note(const pt_run *r, int level, const char *fmt, ...) PT_PRINTF(3, 4);

/* run_dir.c: the overlap checks of the outputs against the inputs; the
 * locks, leftovers and start modes of pt_run_open; retention. */
int pt__run__check_outputs(const pt_run *r);
int pt__run__open_dir(pt_run *r);
int pt__run__lock_metrics(int *fd, bool *created, const char *path, const char *name);
int pt__run__retain(pt_run *r);
/* The highest step of DIR/checkpoints/step-N (its path into *path, malloc'd),
 * or -1 (*path NULL). */
int64_t pt__run__latest(const char *ckpt_dir, char **path);
/* "step-00000012" -> 12; -1 for any other name. */
int64_t pt__run__step_of(const char *name);
/* rm -r (no symlink followed); 0 or -1 with errno. */
int pt__run__remove_tree(const char *dir);

/* run_metrics.c: the metrics file of a run. */
int pt__run__metrics_open(pt_run *r, bool fresh);
int pt__run__metrics_trim(pt_run *r, int64_t step);
void pt__run__metrics_close(pt_run *r);

/* run_job.c: a job's side of the run.  share_open: rank 0's outcome of
 * pt_run_open (`st`) and its resume directory to every rank.  agree: every
 * rank's status in, the same outcome out (this rank's own message kept).
 * goodput_extra: host_extra with the accountant's totals as "goodput"
 * (*out NULL without an accountant).  goodput_restore: the checkpoint's
 * "goodput" into the accountant, removed from *extra.  share_interval:
 * rank 0's save_every to every rank. */
int pt__run__share_open(pt_run *r, int st);
int pt__run__agree(pt_run *r, int st);
int pt__run__goodput_extra(pt_run *r, const char *host_extra, char **out);
void pt__run__goodput_restore(pt_run *r, char **extra);
int pt__run__share_lost(pt_run *r);
int pt__run__share_interval(pt_run *r);

/* run_state.c: a kind's name is 1..63 of [a-z0-9_.-]. */
bool pt__run__kind_ok(const char *kind);

#endif
