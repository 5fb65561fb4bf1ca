/* fastmath.dispatch._runtime's C interface: the one thread pool and the one pacing policy,
 * for the other extensions (the list runner fastmath/dispatch/_lists.c, logsumexp's
 * fastmath/backends/_lse_kernel.c, the loop mode's fastmath/integrations/_loops.c), which
 * find it through the capsule FM_CAPSULE (fm_import()). See _runtime.c for how the pool
 * works. */
#ifndef FASTMATH_RUNTIME_H
#define FASTMATH_RUNTIME_H

#include <fenv.h>
#include <stdatomic.h>
#include <stdint.h>

#define FM_CAPSULE "fastmath.dispatch._runtime._C_API"
#define FM_API_VERSION 9
#define FM_MAXARGS 4
#define FM_BUCKETS 40 /* pacing records per kernel: one per power of two of the length */
#define FM_KEEP 3     /* whole runs remembered per record */

/* A spin-wait's hint to the core (a waiting thread in a loop that reads one shared word). */
#if defined(__x86_64__) || defined(__i386__)
#define RELAX() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define RELAX() __asm__ __volatile__("yield")
#else
#define RELAX() ((void)0)
#endif

/* A chunk kernel: NumPy's inner-loop signature (PyUFuncGenericFunction). */
typedef void (*fm_loop)(char **args, intptr_t const *count, intptr_t const *steps, void *data);

/* The floating-point controls a worker takes from its caller: rounding and subnormal
 * handling, and which exceptions trap. On x86-64 the two control words themselves (MXCSR,
 * the x87 control word: read in a few nanoseconds, and set in a worker only where they
 * differ, where fegetenv and fesetenv take 65-70 ns each here); elsewhere the whole
 * environment. */
#if defined(__x86_64__)
typedef struct {
    unsigned int mxcsr;
    unsigned short x87;
} fm_fpctl;
#else
typedef fenv_t fm_fpctl;
#endif

/* The bytes of its widest operand a piece holds at most: the last pieces of a long call
 * leave a thread idle for up to a piece's time, and a quarter of a thread's share (10 MB
 * of exp's 10^7 float64) was 8% of the call (6.6 ms where pieces of 512 KB took 6.1;
 * Intel Xeon, 2 threads). */
#define FM_PIECE_BYTES (512 << 10)

/* One parallel call: `loop` over n elements of args (each advanced by its step), in pieces
 * of `piece` elements claimed one at a time by the caller and the pool's threads. The
 * pieces lie in `homes` ranges, one a thread: each thread claims its own range's pieces
 * first, then the others' (set by start()). Aligned to a cache line, with what the pool's
 * threads write (the ranges' next pieces; their flags, the seats taken) on lines of their
 * own: on the caller's stack, a call's job must not share a line with the caller's other
 * locals, or every claim of a piece moves them between cores. */
#define FM_HOMES 8 /* ranges at most (threads beyond share them) */
typedef struct {
    _Alignas(64) _Atomic intptr_t next; /* the range's next piece's first element */
} fm_range; /* a line each: a thread's claims in its own range move no line between cores */
typedef struct {
    fm_range next[FM_HOMES];
    _Alignas(64) atomic_int flags; /* FP flags (FE_*) raised in the pool's threads */
    atomic_int seats;      /* set by start(): pool threads that may still join */
    atomic_int joined;     /* pool threads that joined it (the caller waited for them) */
    /* written by the caller only */
    _Alignas(64) intptr_t end[FM_HOMES]; /* each range's end (set by start()) */
    int homes;
    fm_loop loop;
    void *data;
    char *args[FM_MAXARGS];
    intptr_t steps[FM_MAXARGS];
    int nargs;
    intptr_t n, piece;
    int timed;             /* time the caller's pieces: caller_ns, caller_n */
    int woke;              /* set by start(): a worker was parked when it began */
    int threads;           /* set by start(): the caller and the pool threads it may use */
    int late;              /* set by start(): begun while a woken worker had not run */
    long long started;     /* set by start(): when it began (CLOCK_MONOTONIC, ns) */
    int cpu;               /* set by start(): the CPU the caller ran on (-1: not known) */
    int absent;            /* set by finish(): see fm_came() */
    long long caller_ns;
    intptr_t caller_n;
    fm_fpctl fp;           /* set by start(): the caller's FP controls */
} fm_job;

/* The back-off record of one kernel at one length (see fm_split in _runtime.c): `left`
 * runs still to keep whole, the next pause `skip`; `since` runs since one ran whole, and
 * the time per element of the last FM_KEEP that did (picoseconds; 0: none yet); `splits`
 * counts the splits (the first and one in every few read the caller's CPU time); `last`,
 * how its last run ran (FM_RAN_SPLIT, FM_RAN_WHOLE; 0: none yet); `every`, the calls
 * from one run kept whole to the next (0: the least); `split`, the splits' time per
 * element, a moving average (picoseconds; 0: none yet). */
typedef struct {
    atomic_int left, skip, since, kept, splits, last, every;
    atomic_uint whole[FM_KEEP];
    atomic_uint split;
} fm_pace;
enum { FM_RAN_SPLIT = 1, FM_RAN_WHOLE = 2 };

/* FM_WHOLE_SHARED: run whole because other threads of this process are calling too (each
 * on a core of its own); split() and split_or_say() have run it (holding the pool, so that
 * the other threads' calls meanwhile find it busy and the span goes on): see _runtime.c */
enum { FM_NOT_RUN = 0, FM_SPLIT = 1, FM_WHOLE_PACED = 2, FM_WHOLE_SAMPLED = 3,
       FM_WHOLE_SHARED = 4 };

/* Whether a split's pool threads came (judge()'s `came`): FM_CAME, one or more joined it;
 * FM_ABSENT, none, although none had to be woken and the call was long enough for a
 * running one to notice it (its core is taken: another process's, or the caller's own);
 * FM_UNSEEN, none, where a worker was still waking or the call was too short; FM_UNKNOWN,
 * not known (a split made outside the pool). */
enum { FM_UNKNOWN = -1, FM_ABSENT = 0, FM_CAME = 1, FM_UNSEEN = 2 };
/* fm_job.woke: 0, no worker was parked; 1, one was (its wake-up is no sign of a busy
 * core); FM_WOKE_ON_PURPOSE, it was parked because the runtime chose to park workers at
 * once (after a split whose running worker was shut out of its core): judged as any. */
#define FM_WOKE_ON_PURPOSE 2

static inline int fm_came(fm_job *job)
{
    return atomic_load(&job->joined) > 0 ? FM_CAME : job->absent ? FM_ABSENT : FM_UNSEEN;
}

typedef struct {
    int version;
    /* Run job split over the pool, or whole where the back-off of `paces` (FM_BUCKETS
     * records) says a split loses now, on up to `threads` threads within the runtime's limit
     * (0: the limit itself: set_threads(), threadpoolctl's threadpool_limits);
     * FM_NOT_RUN when the pool is busy or one thread is all there is (the caller
     * then runs it itself). The flags of a split are raised in the caller's thread. */
    int (*split)(fm_pace *paces, fm_job *job, int threads);
    /* The lower level, for a caller with work to do between starting and finishing:
     * begin() takes the pool (0: busy), start() wakes up to threads - 1 workers on job
     * (0: none could start, nothing ran), finish() runs the caller's share and waits for
     * the workers that joined, end() gives the pool back. */
    int (*begin)(void);
    int (*start)(fm_job *job, int threads);
    void (*finish)(fm_job *job);
    void (*end)(void);
    int (*threads)(void);
    fm_pace *(*pace_of)(fm_pace *paces, intptr_t n);
    /* The pacing alone, for a caller that runs its work itself: decide() says whether a
     * call of n elements splits now (FM_SPLIT; *timed: judge it against the caller's CPU
     * time too) or runs whole (FM_WHOLE_PACED, FM_WHOLE_SAMPLED); the caller times it
     * (wall_ns) and hands a whole run to kept(), a split to judge() (alone: what one
     * thread would have taken, -1 if not measured; woke: it waited for a parked worker;
     * came: fm_came(job)). */
    int (*decide)(fm_pace *paces, intptr_t n, int *timed);
    void (*kept)(fm_pace *paces, intptr_t n, long long ns);
    void (*judge)(fm_pace *paces, intptr_t n, long long wall, long long alone, int woke,
                  int came);
    fm_pace *(*pace_by_id)(int id); /* a record from new_pace(); NULL for a bad number */
    long long (*wall_ns)(void);
    long long (*alone_ns)(const fm_job *job);
    /* the record of runs of about n elements, for Python: {left, skip, since, kept,
     * one_thread (seconds, or None)} */
    PyObject *(*pace_dict)(fm_pace *paces, intptr_t n);
    /* split() where a run kept whole is the caller's to make: FM_WHOLE_PACED or
     * FM_WHOLE_SAMPLED returned, nothing run; the caller times it and hands it to kept()
     * (FM_WHOLE_SHARED: run already, as split() runs it)
     * (the loop mode runs NumPy's loop whole from its trampoline's own frame) */
    int (*split_or_say)(fm_pace *paces, fm_job *job, int threads);
    /* split() of a job whose pieces are its `piece` items exactly (split() cuts a piece to
     * whole shares, caps its bytes and rounds it to 64 items), paced as a call of `size`
     * elements (0: n): a job whose items are units of work of their own (the loop mode's
     * blocks and parts of a reduction over the first axis) */
    int (*split_exact)(fm_pace *paces, fm_job *job, int threads, intptr_t size);
} fm_api;

/* The runtime's interface, for the module init of an extension on it (include after
 * Python.h): NULL, with ImportError set, where the runtime is missing or was built with
 * another interface. */
static inline const fm_api *fm_import(void)
{
    const fm_api *api = PyCapsule_Import(FM_CAPSULE, 0);
    if (api != NULL && api->version != FM_API_VERSION) {
        PyErr_Format(PyExc_ImportError, "fastmath.dispatch._runtime has interface %d, not %d: "
                     "rebuild fastmath", api->version, FM_API_VERSION);
        return NULL;
    }
    return api;
}

#endif
