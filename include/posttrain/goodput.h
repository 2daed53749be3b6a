/*
 * libposttrain public API: a goodput accountant (docs/goodput.md).
 *
 * Goodput is the share of wall time that ends in kept training progress.
 * A pt_goodput starts a wall clock (CLOCK_MONOTONIC) when it is created; the
 * host attributes time to kinds (pt_time_kind), either by adding seconds it
 * measured itself (pt_goodput_add) or by timing a section on the
 * accountant's clock (pt_goodput_begin / pt_goodput_end).  Whatever is not
 * attributed is PT_TIME_OTHER.
 *
 * Training time (PT_TIME_STEP, PT_TIME_GENERATE) is *pending* until the
 * host commits it: pt_goodput_commit when a checkpoint holding those steps
 * is complete (and at the end of the run), pt_goodput_rollback when the
 * host goes back to the last checkpoint and the pending steps are thrown
 * away (they become PT_TIME_LOST).
 *
 *     goodput = (seconds[PT_TIME_STEP] + seconds[PT_TIME_GENERATE]) / wall
 *
 * counts committed training time only; pending time is reported on its own.
 *
 * Across restarts the totals travel in the checkpoint's host JSON:
 * pt_goodput_to_json after the commit for that checkpoint, then
 * pt_goodput_restore in the resumed process.  Time the saved JSON does not
 * know (the old run's time after the checkpoint, the time to relaunch) is
 * the host's lost_seconds.
 *
 * An accountant is not thread-safe: one host thread at a time, as for every
 * other handle.
 */
#ifndef POSTTRAIN_GOODPUT_H
#define POSTTRAIN_GOODPUT_H

#include <stddef.h>
#include <stdint.h>

#include "posttrain/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a second of wall time was spent on. */
typedef enum pt_time_kind {
    PT_TIME_STEP = 0,      /* training steps: forward, backward, update (pending until committed) */
    PT_TIME_GENERATE = 1,  /* GRPO rollouts: generation and scoring (pending until committed) */
    PT_TIME_WAIT = 2,      /* waiting at collectives: all-reduce transfer and stragglers */
    PT_TIME_SAVE = 3,      /* writing checkpoints (and the replica checks before them) */
    PT_TIME_LOAD = 4,      /* reading checkpoints on resume or rollback */
    PT_TIME_STARTUP = 5,   /* loading the model and data, setting up */
    PT_TIME_EVAL = 6,      /* evaluation */
    PT_TIME_LOST = 7,      /* steps whose result was thrown away (rollback, restart) */
    PT_TIME_OTHER = 8      /* wall time nothing was attributed to (derived, never added) */
} pt_time_kind;
#define PT_TIME_KINDS 9
/* The lower-case name of a pt_time_kind value ("step", "generate", "wait",
 * "save", "load", "startup", "eval", "lost", "other"), or NULL; and the value
 * of a name (PT_EINVAL listing the accepted names otherwise).  The names are
 * the keys of pt_goodput_to_json. */
PT_API const char *pt_time_kind_name(int value);
PT_API int pt_time_kind_from_name(int *out, const char *name);

typedef struct pt_goodput pt_goodput;

/* A new accountant with nothing attributed; its wall clock starts now. */
PT_API int pt_goodput_create(pt_goodput **out);
PT_API void pt_goodput_free(pt_goodput *gp);

/* Attribute `seconds` to `kind`: PT_TIME_STEP and PT_TIME_GENERATE go to
 * pending, every other kind to its total.  PT_EINVAL naming the argument,
 * with nothing changed: PT_TIME_OTHER or a value that is not a pt_time_kind;
 * `seconds` negative, not finite, or above 1e12 (31 700 years: a unit
 * mistake). */
PT_API int pt_goodput_add(pt_goodput *gp, int kind, double seconds);

/* Time a section on the accountant's clock: pt_goodput_begin(gp, kind)
 * starts it, pt_goodput_end(gp) adds the seconds since then to that kind (as
 * pt_goodput_add would).  One section at a time: pt_goodput_begin while a
 * section is open, or pt_goodput_end with none open, is PT_ESTATE naming the
 * open section's kind; pt_goodput_begin checks `kind` as pt_goodput_add
 * does.  Until it ends, an open section's time so far is counted in its kind
 * by pt_goodput_get and pt_goodput_to_json. */
PT_API int pt_goodput_begin(pt_goodput *gp, int kind);
PT_API int pt_goodput_end(pt_goodput *gp);

/* One more training step done (pending): it is counted in steps_kept at the
 * next commit, or in steps_lost at the next rollback. */
PT_API int pt_goodput_step_done(pt_goodput *gp);

/* Pending STEP and GENERATE seconds become kept, and the pending steps are
 * counted as kept.  Call it when a checkpoint holding the pending steps is
 * complete, and at the end of a run.  A STEP or GENERATE section still open
 * is not committed: its time goes to pending when it ends. */
PT_API int pt_goodput_commit(pt_goodput *gp);
/* Pending STEP and GENERATE seconds become PT_TIME_LOST and the pending
 * steps are counted as lost: call it when going back to the last checkpoint. */
PT_API int pt_goodput_rollback(pt_goodput *gp);

typedef struct pt_goodput_report {
    size_t size;
    double wall;                   /* seconds since pt_goodput_create, plus the restored wall
                                      time and lost_seconds (pt_goodput_restore) */
    double seconds[PT_TIME_KINDS]; /* per pt_time_kind: committed STEP and GENERATE, every other
                                      kind's total; [PT_TIME_OTHER] = wall - all the others -
                                      pending, or 0 when that is negative */
    double pending;                /* STEP + GENERATE not yet committed or rolled back */
    double goodput;                /* (seconds[STEP] + seconds[GENERATE]) / wall; NaN when
                                      wall is 0 */
    int64_t steps_kept;            /* pt_goodput_step_done steps committed */
    int64_t steps_lost;            /* steps rolled back, or lost across a restart */
} pt_goodput_report;

PT_API int pt_goodput_report_init(pt_goodput_report *r);
/* The totals as of now (an open section counted up to now), written up to
 * r->size (a smaller, older struct gets its own fields only). */
PT_API int pt_goodput_get(pt_goodput_report *r, const pt_goodput *gp);

/* The totals as of now as a JSON object (free with pt_free), for the host
 * JSON of a checkpoint.  Nothing is committed: pending time and steps are
 * written as pending (call pt_goodput_commit first, so that the checkpoint
 * holds them).  Keys: "wall", one per kind except "other" (derived, not
 * stored) with the names of pt_time_kind_name, "pending", "steps_kept",
 * "steps_lost", "steps_pending"; numbers that read back exactly. */
PT_API int pt_goodput_to_json(char **json, const pt_goodput *gp);

/* Add the totals of a pt_goodput_to_json document to this accountant: its
 * wall time to the wall, its kinds to theirs, its pending time to
 * PT_TIME_LOST and its pending steps to steps_lost (the checkpoint it came
 * with could not contain them); then lost_seconds (time the document does
 * not know, such as the old run's time after its checkpoint and the
 * restart) to both the wall and PT_TIME_LOST, and lost_steps to steps_lost.
 * lost_seconds must be finite and in [0, 1e12], lost_steps in [0, 2^53]
 * (PT_EINVAL).  Every key of pt_goodput_to_json must be there (unknown keys
 * are ignored), the seconds numbers in [0, 1e15], the step counts integers
 * in [0, 2^53]; PT_EFORMAT "pt_goodput_restore: ..." naming the key
 * otherwise, or when the text is not one JSON object.  A second restore into
 * one accountant is PT_ESTATE.  Nothing is changed on error. */
PT_API int pt_goodput_restore(pt_goodput *gp, const char *json, double lost_seconds,
                              int64_t lost_steps);

/* Young-Daly: the working time between checkpoints that maximises goodput
 * when failures arrive at random, sqrt(2 * checkpoint_seconds *
 * mtbf_seconds) (a first-order rule, good while checkpoint_seconds is much
 * smaller than mtbf_seconds).  Both must be finite and > 0 (PT_EINVAL naming
 * the argument); PT_ERANGE if the result is not finite. */
PT_API int pt_checkpoint_interval_young_daly(double *interval_seconds, double checkpoint_seconds,
                                             double mtbf_seconds);

/* Switch sections: end the open section, if any (as pt_goodput_end), then
 * open one of `kind` (as pt_goodput_begin), or none when kind is -1.  For a
 * host whose phases follow one another (startup, steps, a save, an
 * evaluation) and that never leaves a second open.  PT_EINVAL for a kind
 * pt_goodput_begin refuses (the open section is ended all the same). */
PT_API int pt_goodput_switch(pt_goodput *gp, int kind);

/* The accountant's clock: CLOCK_MONOTONIC in seconds (the library's one
 * clock; differences between two calls are elapsed time). */
PT_API double pt_now(void);

#ifdef __cplusplus
}
#endif

#endif
