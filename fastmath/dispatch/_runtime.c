/* fastmath.dispatch._runtime: the one native thread pool under every splitter, and the one
 * pacing policy that decides when a call splits.
 *
 * The pool. A parallel call (fm_job) is `loop` over n elements, cut into pieces that the
 * calling thread and up to threads - 1 workers claim one at a time from an atomic counter,
 * so a worker that wakes late, or shares its core with another process, takes fewer pieces
 * instead of holding the call back. The caller works too, and returns once every piece has
 * run: nothing writes into an output after the call has returned.
 * Between calls a worker spins (pause instructions, reading one shared counter) for `spin`
 * nanoseconds after its last piece, then parks on a condition variable: a burst of calls
 * pays the wake-up once (a spinning worker starts in well under a microsecond; a parked
 * one takes 10-200 us to wake on a VM), and a process that stops calling burns no CPU once
 * the spin has run out. The caller takes the condition variable's lock only when a worker
 * is parked.
 * One call at a time uses the pool; a call that finds it busy (another user thread's)
 * runs in its own thread instead of waiting, so several user threads never oversubscribe
 * the cores.
 * Floating-point state: each worker takes the caller's environment (rounding, MXCSR),
 * clears its flags, and reports what its pieces raised; the caller gets their union.
 * After fork() the child has no workers: the pool is rebuilt on first use.
 * Workers are named fastmath-1, fastmath-2, ... as top -H, ps -L and each thread's comm show.
 *
 * The pacing (fm_split). A split is worth it only when it finishes sooner than the call run
 * whole would, on this machine now: a busy core, another library's threads spinning after
 * their own call (OpenBLAS's, OpenMP's), or a call too short for the handoff make it lose.
 * Every split is timed against the median of the last calls of that kernel and length
 * that ran whole, and the first and one in cpu_every (8) also against the caller's CPU time
 * for its own pieces scaled to all of them (what one thread would have taken; reading a
 * thread's CPU clock is a system call, 0.55 us on a VM); a split that lost by a twentieth
 * sends the next `skip` calls of that kernel and length whole (doubling while splits keep
 * losing, up to MOST_PAUSE, halving when one wins), and one call in SAMPLE runs whole to
 * keep that time. Each way is timed as it runs after its own kind: the first run whole
 * after a split is not kept, nor the first split after a run kept whole counted lost
 * (the output's lines moving between cores, fm_kept). A split that had to wake a parked
 * worker is not counted a loss: the wake-up is no sign of a busy core (unless the runtime
 * parked it on purpose, below); nor is one begun while another library's threads
 * still spin after their own call (foreign(): torch's OpenMP workers spin for a fraction of
 * a millisecond, and the next split or two beside them lost, then paused every later
 * call of that kernel and length although the cores were free again). A split that no
 * worker joined is not judged; where a running worker should have come (FM_ABSENT), its
 * core was taken, by another process or by a thread that spins without yielding it
 * (OpenBLAS's, 2^24 cycles after each matrix product), and a woken thread takes its core
 * back at once where a spinning one waits out a time slice: for shut_out_ns (20 ms)
 * workers then park as soon as a call is done, and the splits that wake them are judged
 * as any (FM_WOKE_ON_PURPOSE). Where such a split finds the machine oversubscribed (another
 * process busy, this process's other threads wanting CPU, the calls the pool could split a
 * small part of the program), every call runs whole for a while (consider_yield). trace()
 * records the pacing's events, to see why a program's splits lose.
 * Clocks: the real ones, or, for tests (_set_clock), Python callables returning seconds.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>
#include <numpy/ufuncobject.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "_npy_loop.h"
#include "_runtime.h"

#define MAXTHREADS 256
#define MOST_PAUSE 256
/* One call in `every` runs whole to keep that time: SAMPLE, doubling up to SAMPLE_MOST
 * while the time kept stays within an eighth of the record's (each sample is two changes
 * of way, fm_kept: 0.3 us a call of exp on 10^4 float64 at one in 64), back to SAMPLE
 * when it moves or a split loses */
#define SAMPLE 64
#define SAMPLE_MOST 512
#define SPLIT_AVERAGE 8 /* a split's weight in the splits' moving average: 1/8 */
#define MAXPACES 4096
#define FLAGS (FE_DIVBYZERO | FE_OVERFLOW | FE_UNDERFLOW | FE_INVALID | FE_INEXACT)

/* ---- clocks ------------------------------------------------------------------------ */

/* A clock's time in ns; -1 where it cannot be read (another thread's that has gone) */
static long long clock_of(clockid_t clock)
{
    struct timespec t;
    if (clock_gettime(clock, &t) != 0) {
        return -1;
    }
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static long long real_wall_ns(void) { return clock_of(CLOCK_MONOTONIC); }
static long long real_cpu_ns(void) { return clock_of(CLOCK_THREAD_CPUTIME_ID); }

static PyObject *fake_clocks[2]; /* wall, the caller's CPU time; set and read under the GIL */

static long long fake_ns(int which)
{
    PyGILState_STATE gil = PyGILState_Ensure(); /* a split runs without it */
    long long ns = 0;
    PyObject *fn = fake_clocks[which];
    if (fn == NULL) {
        ns = which ? real_cpu_ns() : real_wall_ns();
    }
    else {
        Py_INCREF(fn);
        PyObject *r = PyObject_CallNoArgs(fn);
        double s = r ? PyFloat_AsDouble(r) : -1.0;
        Py_XDECREF(r);
        if (PyErr_Occurred()) {
            PyErr_WriteUnraisable(fn);
        }
        else {
            ns = (long long)(s * 1e9);
        }
        Py_DECREF(fn);
    }
    PyGILState_Release(gil);
    return ns;
}

static long long fake_wall_ns(void) { return fake_ns(0); }
static long long fake_cpu_ns(void) { return fake_ns(1); }

static long long (*_Atomic wall_ns)(void) = real_wall_ns;
static long long (*_Atomic thread_cpu_ns)(void) = real_cpu_ns;

/* ---- the pool ---------------------------------------------------------------------- */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* parking and starting workers */
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
/* What the caller and the workers of a call write, a cache line for each writer: a worker
 * that spins reads the call's line, which its caller writes twice a call (start, finish),
 * and nothing else is written there; `active` has a line of its own, and so does the
 * pool's lock, which one user thread calling takes and gives back alone. (With these
 * beside each other and beside the counters and settings, a worker began its piece
 * 760-900 ns after its call began, and a call with nothing to do cost 0.58-0.65 us; with
 * the job's layout and the FP controls below, 90-450 ns and 0.32-0.36 us.) */
static struct {
    _Alignas(64) fm_job *_Atomic current;
    atomic_ulong generation; /* one more per call started */
    /* rest(): the call after which the workers park at once (no spin), until the next one */
    atomic_ulong rested;
    _Alignas(64) atomic_int active; /* workers inside a call now */
    _Alignas(64) pthread_mutex_t busy; /* held by the call using the pool */
} pool = {NULL, 0, (unsigned long)-1, 0, PTHREAD_MUTEX_INITIALIZER};
static atomic_int sleepers = 0;     /* workers parked (or about to park) */
static int nworkers = 0;            /* started (under lock) */
static atomic_int nthreads = 0;     /* per call, the caller included */
static atomic_llong spin_ns = 100000;
static atomic_ulong parks = 0, joins = 0; /* joins: counted by the callers */
static atomic_llong woken_at = 0, wake_ns = 0; /* the last broadcast; wake-ups' total time */
static atomic_ulong wakes = 0;
static atomic_ulong moves = 0; /* workers that moved off their caller's CPU (move_off) */
/* A call woke parked workers and none has run since: a split starting now runs without
 * them (a wake-up takes up to a millisecond on a VM, longer than many calls) */
static atomic_int wake_pending = 0;
static _Thread_local unsigned long late_here = 0; /* splits short of threads: late() */
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static atomic_int pacing = 1;
/* From the end of another library's parallel call until foreign_until (wall_ns), its
 * threads may still spin (torch's OpenMP workers: foreign()): a split begun then shared
 * the cores with them, and its loss says nothing of its kernel or of the machine. (That
 * library's own next call, begun before, is judged: OwnThreads paces torch's.) */
static atomic_llong foreign_from = 0, foreign_until = 0;

static int beside_foreign(long long began)
{
    return began >= atomic_load_explicit(&foreign_from, memory_order_relaxed)
           && began < atomic_load_explicit(&foreign_until, memory_order_relaxed);
}
static atomic_int cpu_every = 8;
/* Until shut_out_until (real wall ns) workers park as soon as a call is done: a split
 * found its running worker shut out of its core (FM_ABSENT), by another thread that
 * spins without yielding it (OpenBLAS's after a matrix product), and a parked worker that
 * a call wakes takes the core back at once where a spinning one waits a time slice. */
static atomic_llong shut_out_ns = 20000000, shut_out_until = 0;

/* Until shared_until (real wall ns) other threads of this process are calling too: a call
 * found the pool busy (another thread's split, or its whole run, below) and ran whole in
 * its own thread. Each such thread computes on a core of its own, as NumPy's calls from
 * several threads do, so a split takes the limit less one thread for each of them
 * (shared_callers, counted once a span), and where that leaves one, the call runs whole
 * holding the pool (FM_WHOLE_SHARED): the other threads' calls meanwhile find it busy,
 * and each such find extends the span by shared_ns (10 ms; set_shared). Splitting beside
 * them oversubscribed the cores: two threads of a program each calling np.exp on 10^4-10^5
 * float64 under the loop mode ran 0.85-0.88x as fast as plain NumPy's two, fastmath's exp
 * 0.83-0.90x (2-vCPU AMD EPYC, bench/runtime.py's `threads`), the pool's worker taking the
 * other caller's core. Once the others stop, the span runs out and splits resume. Not a
 * worker's find, nor a nested call's from the thread holding the pool. */
static atomic_llong shared_ns = 10000000, shared_until = 0; /* set_shared */
static atomic_ulong shared_span = 0; /* one more per span begun */
static atomic_int shared_callers = 0;
static atomic_ulong kept_shared = 0;
static _Thread_local unsigned long counted_in = 0; /* the span this thread was counted in */

/* Until yield_until (real wall ns) every call runs whole in its caller: the machine is
 * oversubscribed, another process busy on a core while threads of this process other
 * than the caller and the pool (BLAS's, between matrix products) want CPU too, and the
 * calls the pool could split are a small part of the program, so that little is to be
 * gained. There the pool's worker, woken beside the other process, waits behind it a
 * time slice a split (1.1 s in a 4.7 s GaussianMixture.fit, whose splittable calls are
 * 9% of it), and the scheduler, counting that wait as load on its CPU, puts OpenBLAS's
 * woken thread on the caller's CPU instead, where it spins beside the caller after every
 * product: the fit ran 0.79-0.93x of plain with splits that each won, 0.90-1.03x with
 * none. Judged where a split finds its worker shut out (FM_ABSENT), over at least
 * YIELD_SPAN_NS: `others`, CPU time of the machine outside this process (/proc/stat);
 * `foreign`, this process's less the caller's and the workers'; each a share of one CPU
 * over that span; and `share`, the span's part spent in calls the pacing saw (split or
 * kept whole: splittable_ns). Whatever the share where no CPU is left for a worker:
 * `free`, the CPUs this process may use less `others`, `foreign` and the caller's one,
 * under yield_free. A batched matrix product and a softmax of its rows (16 x 256 x 256,
 * the softmax's calls 0.1-0.3 of the time), one core of two busy: with every split the
 * pacing allowed (each winning against the whole runs it had timed) 0.81-1.02x plain,
 * with one thread 0.92-1.19x, under the share's gate alone 0.83-0.97x, with this gate too
 * 1.04-1.08x (bench/busy_workloads.py; docs/backends.md). yield_ns 0: never. */
#define YIELD_SPAN_NS 100000000LL
static atomic_llong yield_ns = 300000000, yield_until = 0, splittable_ns = 0;
static atomic_ulong yields = 0, kept_yielding = 0;
static double yield_others = 0.5, yield_foreign = 0.05, yield_share = 0.15; /* GIL's */
static double yield_free = 0.5;
static double looked[4] = {-1, -1, -1, -1}; /* the last look's others, foreign, share, free */
static pthread_t worker_ids[MAXTHREADS];
static struct {
    long long wall, process, caller, workers, machine, splittable;
    pthread_t by;
    int valid;
} usage_then;
static pthread_mutex_t usage_lock = PTHREAD_MUTEX_INITIALIZER;

/* CPU time of the whole machine, ns: /proc/stat's first line (user, nice, system, irq,
 * softirq; not idle, iowait or steal); -1 where there is none. */
static long long machine_cpu_ns(void)
{
    char buf[256];
    int fd = open("/proc/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return -1;
    }
    ssize_t got = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    unsigned long long v[7];
    if (got < 5) {
        return -1;
    }
    buf[got] = 0;
    if (strncmp(buf, "cpu ", 4) != 0
        || sscanf(buf + 4, "%llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                  &v[4], &v[5], &v[6]) != 7) {
        return -1;
    }
    static long tick;
    if (tick <= 0) {
        tick = sysconf(_SC_CLK_TCK);
    }
    return tick > 0 ? (long long)((v[0] + v[1] + v[2] + v[5] + v[6]) * (1e9 / tick)) : -1;
}

static long long workers_cpu_ns(void)
{
    long long sum = 0;
    pthread_mutex_lock(&lock);
    for (int k = 0; k < nworkers; k++) {
        clockid_t c;
        long long t;
        if (pthread_getcpuclockid(worker_ids[k], &c) == 0 && (t = clock_of(c)) >= 0) {
            sum += t;
        }
    }
    pthread_mutex_unlock(&lock);
    return sum;
}

/* the CPUs this process may use (its affinity), or those online */
static int default_threads(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
        return CPU_COUNT(&set);
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* A split found its worker shut out at `now`, or the calls run whole so far have run
 * out their time: whether the machine is oversubscribed, over the span since this thread
 * last looked (from YIELD_SPAN_NS to a second); if so, calls run whole for yield_ns (a
 * program that keeps it so splits nothing, its worker parked, at one look per window). */
static void consider_yield(long long now)
{
    if (atomic_load_explicit(&yield_ns, memory_order_relaxed) <= 0
        || pthread_mutex_trylock(&usage_lock) != 0) {
        return;
    }
    long long span = now - usage_then.wall;
    int same = usage_then.valid && pthread_equal(usage_then.by, pthread_self());
    if (same && span < YIELD_SPAN_NS) {
        pthread_mutex_unlock(&usage_lock);
        return;
    }
    long long process = clock_of(CLOCK_PROCESS_CPUTIME_ID), caller = real_cpu_ns();
    long long workers = workers_cpu_ns(), machine = machine_cpu_ns();
    long long splittable = atomic_load_explicit(&splittable_ns, memory_order_relaxed);
    if (same && span <= 1000000000LL && machine >= 0 && usage_then.machine >= 0) {
        double mine = (double)(process - usage_then.process);
        double others = ((double)(machine - usage_then.machine) - mine) / (double)span;
        double foreign = (mine - (double)(caller - usage_then.caller)
                          - (double)(workers - usage_then.workers)) / (double)span;
        double share = (double)(splittable - usage_then.splittable) / (double)span;
        double free = (double)default_threads() - others - foreign - 1.0;
        looked[0] = others, looked[1] = foreign, looked[2] = share, looked[3] = free;
        if (others >= yield_others && foreign >= yield_foreign
            && (share < yield_share || free < yield_free)) {
            atomic_store(&yield_until, now + atomic_load(&yield_ns));
            atomic_fetch_add_explicit(&yields, 1, memory_order_relaxed);
        }
    }
    usage_then.wall = now;
    usage_then.process = process;
    usage_then.caller = caller;
    usage_then.workers = workers;
    usage_then.machine = machine;
    usage_then.splittable = splittable;
    usage_then.by = pthread_self();
    usage_then.valid = 1;
    pthread_mutex_unlock(&usage_lock);
}

/* What the job would have taken in one thread: the caller's CPU time for its own pieces,
 * scaled to all of them; -1 when the caller ran none. */
static long long fm_alone_ns(const fm_job *job)
{
    return job->caller_n > 0 ? (long long)((double)job->caller_ns * job->n / job->caller_n) : -1;
}

/* The pieces of the caller's (home 0) and of each worker's range (its seat), then the
 * others' where any are left. The same thread takes the same range call after call, so
 * a program that calls again on the same arrays finds each part in the cache of the core
 * that made it: with one counter for all, the pieces fell to the threads in a new order
 * each call, and the data moved between cores every time (Intel Xeon, 2 vCPUs: exp of
 * 10^5 float32 split, VML, no faster than whole). */
static intptr_t run_pieces(fm_job *job, int home)
{
    intptr_t ran = 0;
    int homes = job->homes;
    for (int k = 0; k < homes; k++) {
        int h = (home + k) % homes;
        for (;;) {
            intptr_t start = atomic_fetch_add_explicit(&job->next[h].next, job->piece,
                                                       memory_order_relaxed);
            if (start >= job->end[h]) {
                break;
            }
            intptr_t count = job->end[h] - start < job->piece ? job->end[h] - start : job->piece;
            ran += count;
            char *args[FM_MAXARGS];
            for (int a = 0; a < job->nargs; a++) {
                args[a] = job->args[a] + start * job->steps[a];
            }
            job->loop(args, &count, job->steps, job->data);
        }
    }
    return ran;
}

/* Wait until a call newer than *seen starts: spin for spin_ns, then park. The first
 * microseconds spin on pause instructions; after that each look at the counter is
 * followed by sched_yield(), so that a thread of another pool (BLAS's, after a matrix
 * product) or of another process that shares the core runs first. */
#define EAGER_NS 20000
#define ABSENT_NS EAGER_NS
/* The spin is over at `until`, or at once while workers are shut out (shut_out_until). */
static int spin_over(long long now, long long until)
{
    return now >= until || now < atomic_load_explicit(&shut_out_until, memory_order_relaxed);
}

static void wait_for_call(unsigned long *seen)
{
    long long limit = atomic_load_explicit(&spin_ns, memory_order_relaxed);
    long long start = real_wall_ns();
    long long eager = start + (EAGER_NS < limit ? EAGER_NS : limit), until = start + limit;
    int yielding = 0;
    for (unsigned spins = 1;; spins++) {
        if (atomic_load_explicit(&pool.generation, memory_order_acquire) != *seen) {
            *seen = atomic_load(&pool.generation);
            return;
        }
        if (atomic_load_explicit(&pool.rested, memory_order_relaxed) == *seen) {
            break; /* rest() since the last call: park now */
        }
        if (yielding) {
            sched_yield();
            if ((spins & 7) == 0 && spin_over(real_wall_ns(), until)) {
                break;
            }
            continue;
        }
        RELAX();
        if ((spins & 63) == 0) {
            long long now = real_wall_ns();
            yielding = now >= eager;
            if (spin_over(now, until)) {
                break;
            }
        }
    }
    pthread_mutex_lock(&lock);
    atomic_fetch_add(&sleepers, 1); /* seq_cst: a caller that misses it sees our generation */
    atomic_fetch_add_explicit(&parks, 1, memory_order_relaxed);
    int waited = 0;
    while (atomic_load(&pool.generation) == *seen) {
        pthread_cond_wait(&wake, &lock);
        waited = 1;
    }
    atomic_fetch_sub(&sleepers, 1);
    pthread_mutex_unlock(&lock);
    *seen = atomic_load(&pool.generation);
    if (waited) { /* woken by a call's broadcast: how long that took */
        atomic_fetch_add_explicit(&wake_ns, real_wall_ns() - atomic_load(&woken_at),
                                  memory_order_relaxed);
        atomic_fetch_add_explicit(&wakes, 1, memory_order_relaxed);
    }
}

/* A worker that joins a call on the CPU its caller runs on moves to another CPU it may
 * use, and may then run anywhere again. The scheduler puts a woken thread beside its
 * waker now and then, and there it stays: on a 2-vCPU VM, after pauses of 10 ms between
 * bursts of calls, the worker often woke on the caller's CPU and every split of the burst
 * ran at one core's speed or slower (exp of 10^5 float64, the numpy backend: the same
 * time as NumPy's, against 1.55x with the worker on the other CPU). One system call
 * moves it (the kernel migrates the running thread at once), and one more gives its
 * affinity back, taken only where the two meet. */
static void move_off(int cpu)
{
    cpu_set_t mine, off;
    if (sched_getaffinity(0, sizeof(mine), &mine) != 0 || !CPU_ISSET(cpu, &mine)
        || CPU_COUNT(&mine) < 2) {
        return;
    }
    off = mine;
    CPU_CLR(cpu, &off);
    if (sched_setaffinity(0, sizeof(off), &off) == 0) {
        sched_setaffinity(0, sizeof(mine), &mine);
        atomic_fetch_add_explicit(&moves, 1, memory_order_relaxed);
    }
}

/* The caller's FP controls (fm_fpctl), and a worker taking them: set only where they
 * differ from the worker's own (each setting, and glibc's fesetenv, takes tens of
 * nanoseconds), its flags cleared. */
static inline void fp_get(fm_fpctl *fp)
{
#if defined(__x86_64__)
    fp->mxcsr = __builtin_ia32_stmxcsr();
    __asm__ __volatile__("fnstcw %0" : "=m"(fp->x87));
#else
    fegetenv(fp);
#endif
}

static inline void fp_take(const fm_fpctl *fp)
{
#if defined(__x86_64__)
    unsigned int mine = __builtin_ia32_stmxcsr();
    unsigned int want = (fp->mxcsr & ~0x3fu) | (mine & 0x3fu); /* its controls, our flags */
    if (want != mine) {
        __builtin_ia32_ldmxcsr(want);
    }
    unsigned short x87;
    __asm__ __volatile__("fnstcw %0" : "=m"(x87));
    if (x87 != fp->x87) {
        __asm__ __volatile__("fldcw %0" : : "m"(fp->x87));
    }
#else
    fesetenv(fp);
#endif
    clear_raised(FLAGS);
}

static _Thread_local int is_worker;

static void *worker(void *unused)
{
    (void)unused;
    is_worker = 1;
    unsigned long seen = atomic_load(&pool.generation);
    for (;;) {
        wait_for_call(&seen);
        if (atomic_load_explicit(&wake_pending, memory_order_relaxed)) {
            atomic_store_explicit(&wake_pending, 0, memory_order_relaxed);
        }
        fm_job *job = atomic_load(&pool.current);
        if (job == NULL) {
            continue;
        }
        atomic_fetch_add(&pool.active, 1);
        /* finished meanwhile (the caller did it all), or the call's threads are all there:
         * a pool started for more threads than a later call may use (a lowered limit,
         * threadpoolctl's) keeps its extra workers out of it */
        int seat;
        if (atomic_load(&pool.current) != job || (seat = atomic_fetch_sub(&job->seats, 1)) <= 0) {
            atomic_fetch_sub(&pool.active, 1);
            continue;
        }
        atomic_fetch_add_explicit(&job->joined, 1, memory_order_relaxed);
        if (job->cpu >= 0 && sched_getcpu() == job->cpu) {
            move_off(job->cpu);
        }
        fp_take(&job->fp);
        run_pieces(job, seat % job->homes);
        int raised = fetestexcept(FLAGS);
        if (raised) {
            atomic_fetch_or(&job->flags, raised);
        }
        atomic_fetch_sub(&pool.active, 1);
    }
    return NULL;
}

static void registry_after_fork(void);

static void after_fork_in_child(void)
{
    pthread_mutex_init(&lock, NULL);
    pthread_mutex_init(&pool.busy, NULL);
    pthread_cond_init(&wake, NULL);
    atomic_store(&pool.current, NULL);
    atomic_store(&pool.active, 0);
    atomic_store(&sleepers, 0);
    nworkers = 0;
    pthread_mutex_init(&usage_lock, NULL);
    usage_then.valid = 0;
    atomic_store(&shared_until, 0); /* the parent's other threads are not the child's */
    registry_after_fork();
}

static void register_atfork(void) { pthread_atfork(NULL, NULL, after_fork_in_child); }

/* workers wanted: start any missing; how many run */
static int ensure_workers(int wanted)
{
    pthread_once(&atfork_once, register_atfork);
    if (nworkers >= wanted) {
        return wanted;
    }
    pthread_mutex_lock(&lock);
    while (nworkers < wanted) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&t, &attr, worker, NULL);
        pthread_attr_destroy(&attr);
        if (rc != 0) {
            break;
        }
#if defined(__linux__) && defined(__GLIBC__)
        /* seen as such in top -H, ps -L, py-spy and /proc/<pid>/task/<tid>/comm */
        char name[16];
        snprintf(name, sizeof name, "fastmath-%d", nworkers + 1);
        pthread_setname_np(t, name);
#endif
        worker_ids[nworkers++] = t;
    }
    pthread_mutex_unlock(&lock);
    return nworkers < wanted ? nworkers : wanted;
}

/* For threadpoolctl (its controller: fastmath/dispatch/_threads.py), by symbol. */
__attribute__((visibility("default"))) int fastmath_runtime_get_num_threads(void)
{
    return atomic_load(&nthreads);
}

__attribute__((visibility("default"))) void fastmath_runtime_set_num_threads(int n)
{
    atomic_store(&nthreads, n < 1 ? default_threads() : n > MAXTHREADS ? MAXTHREADS : n);
}

/* ---- the other fastmath processes on this machine ---------------------------------- */

/* Two processes on two cores, each calling np.exp under the loop mode (a multiprocessing
 * pool, pytest-xdist, two jobs), split each call over both cores: each one's worker takes
 * the other's core, each one's whole runs are timed while the other's worker shares its
 * core, and each pacing finds its splits faster than those whole runs, so both split on
 * and both lose (10^4 float64 0.71-0.84x, 10^5 0.78-0.88x the speed of NumPy in both,
 * 2-vCPU AMD EPYC; bench/runtime.py's `processes`). No one process can see it. So the
 * processes of one user share a registry, a page of /dev/shm (as Intel's OpenMP runtime
 * registers its processes there): a slot per process (its pid, until when it calls, the
 * CPUs it may use), written at most every REG_ACTIVE_NS / 8 as it calls and read (its
 * CPUs looked up again) at most every REG_LOOK_NS. A split takes its limit's share: the
 * limit divided among this process and the others calling now on CPUs it may use too
 * (two of two cores: none splits). A process that does not call, or calls only below a
 * split's size, is not counted, nor one of another user's or without the registry: the
 * pacing answers for those, as for any other busy process. A dead process's slot is
 * taken by the next process that needs one. FASTMATH_REGISTRY names another file, or with
 * "off" none. A file there that is not the registry (another size, no magic number) is
 * replaced, with a warning; where the file cannot be opened (no /dev/shm), or is not a
 * regular file of this user's, the runtime goes without (registry() says why). */
#define REG_VERSION 1
#define REG_SLOTS 63
#define REG_MAGIC 0x31306d7274736166ULL /* "fastrm01" */
#define REG_ACTIVE_NS 10000000LL /* a process is calling until this long after a call */
#define REG_LOOK_NS 1000000LL
#define REG_RETRY_NS 1000000000LL /* a process that found every slot taken looks again */
typedef struct {
    _Alignas(64) atomic_int pid;
    atomic_llong active_until; /* CLOCK_MONOTONIC ns, the same for every process */
    atomic_ullong cpus;        /* the CPUs it may use, CPU k as bit k % 64 */
} RegSlot;
typedef struct {
    _Alignas(64) atomic_ullong magic;
    RegSlot slot[REG_SLOTS];
} Registry;
static Registry *reg = NULL;
static char reg_path[4096] = "";
static char reg_why[4400] = "not opened";
static int reg_warn = 0; /* registry_open() found something to warn of */
static RegSlot *_Atomic reg_mine = NULL;
static atomic_llong reg_full = 0; /* when no slot was free (0: none since) */
static atomic_ullong reg_cpus = 0;
static atomic_llong reg_published = 0, reg_looked = LLONG_MIN / 2;
static atomic_int reg_others = 0;

static unsigned long long cpus_folded(void)
{
    cpu_set_t set;
    unsigned long long bits = 0;
    if (sched_getaffinity(0, sizeof(set), &set) != 0) {
        return ~0ULL;
    }
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (CPU_ISSET(c, &set)) {
            bits |= 1ULL << (c % 64);
        }
    }
    return bits;
}

/* Map the registry, creating it; a file there that is not fastmath's registry (another
 * size, another magic number) is replaced, one not a regular file of this user's left
 * alone. Returns 0, or 1 with reg_why saying what was wrong (for the warning). */
static int registry_open(void)
{
    const char *given = getenv("FASTMATH_REGISTRY");
    if (given != NULL && (given[0] == '\0' || strcmp(given, "off") == 0
                          || strcmp(given, "0") == 0)) {
        snprintf(reg_why, sizeof reg_why, "off (FASTMATH_REGISTRY=%s)", given);
        return 0;
    }
    if (given != NULL && strlen(given) >= sizeof reg_path) {
        snprintf(reg_why, sizeof reg_why, "FASTMATH_REGISTRY is too long a path");
        return 1;
    }
    if (given != NULL) {
        snprintf(reg_path, sizeof reg_path, "%s", given);
    }
    else {
        snprintf(reg_path, sizeof reg_path, "/dev/shm/fastmath-runtime-%d-%u", REG_VERSION,
                 (unsigned)getuid());
    }
    int replaced = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        int fd = open(reg_path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0) {
            int e = errno;
            snprintf(reg_why, sizeof reg_why, "cannot open %s: %s", reg_path, strerror(e));
            /* (no /dev/shm, or a read-only one: said by registry(), not warned of) */
            return given == NULL && (e == ENOENT || e == EACCES || e == EROFS) ? 0 : 1;
        }
        struct stat st;
        if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != getuid()) {
            snprintf(reg_why, sizeof reg_why, "%s is not a regular file of this user's",
                     reg_path);
            close(fd);
            return 1;
        }
        if (st.st_size == 0 && ftruncate(fd, sizeof(Registry)) != 0) {
            snprintf(reg_why, sizeof reg_why, "cannot size %s: %s", reg_path, strerror(errno));
            close(fd);
            return 0;
        }
        void *p = MAP_FAILED;
        if (st.st_size == 0 || st.st_size == (off_t)sizeof(Registry)) {
            p = mmap(NULL, sizeof(Registry), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        }
        close(fd);
        if (p != MAP_FAILED) {
            unsigned long long found = 0;
            Registry *r = p;
            if (atomic_compare_exchange_strong(&r->magic, &found, REG_MAGIC)
                    || found == REG_MAGIC) {
                reg = r;
                atomic_store(&reg_cpus, cpus_folded());
                snprintf(reg_why, sizeof reg_why, replaced ? "replaced" : "");
                return replaced;
            }
            munmap(p, sizeof(Registry));
        }
        if (attempt == 0) { /* not fastmath's registry: a new one in its place */
            unlink(reg_path);
            replaced = 1;
        }
    }
    snprintf(reg_why, sizeof reg_why, "%s is not fastmath's registry", reg_path);
    return 1;
}

/* This process's slot, claimed at its first call: a free one, or a dead process's; where
 * every slot was a live process's, again each REG_RETRY_NS while it calls (one of them
 * may have ended since) */
static RegSlot *registry_slot(long long now)
{
    RegSlot *mine = atomic_load_explicit(&reg_mine, memory_order_acquire);
    if (mine != NULL || reg == NULL) {
        return mine;
    }
    long long full = atomic_load_explicit(&reg_full, memory_order_relaxed);
    if (full != 0 && now - full < REG_RETRY_NS) {
        return NULL;
    }
    int me = getpid();
    for (int i = 0; i < REG_SLOTS; i++) {
        RegSlot *s = &reg->slot[i];
        int pid = atomic_load(&s->pid);
        if (pid == me) { /* (two threads of this process at once) */
            atomic_store(&reg_mine, s);
            return s;
        }
        if (pid != 0 && !(kill(pid, 0) != 0 && errno == ESRCH)) {
            continue;
        }
        atomic_store(&s->active_until, 0);
        if (atomic_compare_exchange_strong(&s->pid, &pid, me)) {
            atomic_store(&s->cpus, atomic_load(&reg_cpus));
            atomic_store(&reg_mine, s);
            return s;
        }
    }
    atomic_store(&reg_full, now);
    return NULL;
}

/* This process calls now (from split_or_whole and fm_begin: a call long enough to split,
 * on one thread too) */
static void registry_calls(long long now)
{
    if (reg == NULL) {
        return;
    }
    long long until = now + REG_ACTIVE_NS;
    if (until - atomic_load_explicit(&reg_published, memory_order_relaxed)
            < REG_ACTIVE_NS / 8) {
        return;
    }
    RegSlot *s = registry_slot(now);
    if (s != NULL) {
        atomic_store_explicit(&s->cpus, atomic_load_explicit(&reg_cpus, memory_order_relaxed),
                              memory_order_relaxed);
        atomic_store_explicit(&s->active_until, until, memory_order_relaxed);
        atomic_store_explicit(&reg_published, until, memory_order_relaxed);
    }
}

/* The other processes calling now on CPUs this one may use (looked up every REG_LOOK_NS) */
static int registry_others(long long now)
{
    if (reg == NULL) {
        return 0;
    }
    if (now - atomic_load_explicit(&reg_looked, memory_order_relaxed) < REG_LOOK_NS) {
        return atomic_load_explicit(&reg_others, memory_order_relaxed);
    }
    RegSlot *mine = atomic_load_explicit(&reg_mine, memory_order_relaxed);
    unsigned long long cpus = cpus_folded(); /* (the program may have changed them) */
    atomic_store_explicit(&reg_cpus, cpus, memory_order_relaxed);
    int n = 0;
    for (int i = 0; i < REG_SLOTS; i++) {
        RegSlot *s = &reg->slot[i];
        if (s != mine && atomic_load_explicit(&s->pid, memory_order_relaxed) != 0
                && atomic_load_explicit(&s->active_until, memory_order_relaxed) > now
                && (atomic_load_explicit(&s->cpus, memory_order_relaxed) & cpus)) {
            n++;
        }
    }
    atomic_store_explicit(&reg_others, n, memory_order_relaxed);
    atomic_store_explicit(&reg_looked, now, memory_order_relaxed);
    return n;
}

/* after fork(): the child is another process, with a slot of its own to claim */
static void registry_after_fork(void)
{
    atomic_store(&reg_mine, NULL);
    atomic_store(&reg_full, 0);
    atomic_store(&reg_published, 0);
    atomic_store(&reg_looked, LLONG_MIN / 2);
}

static _Thread_local int holding = 0; /* this thread holds the pool (fm_begin) */

/* A call found the pool busy: see shared_until */
static void collided(void)
{
    if (is_worker || holding) {
        return;
    }
    long long now = real_wall_ns(), span_ns = atomic_load(&shared_ns);
    long long until = atomic_load(&shared_until);
    if (now >= until) { /* a span begins */
        if (atomic_compare_exchange_strong(&shared_until, &until, now + span_ns)) {
            atomic_store(&shared_callers, 0);
            atomic_fetch_add(&shared_span, 1);
        }
    }
    else if (now + span_ns - until > span_ns / 8) { /* (not every find writes its line) */
        atomic_store(&shared_until, now + span_ns);
    }
    unsigned long span = atomic_load(&shared_span);
    if (counted_in != span) {
        counted_in = span;
        atomic_fetch_add(&shared_callers, 1);
    }
}

/* The threads a split may take now: this process's share of `threads` beside the other
 * fastmath processes calling now (registry), less one for each other thread of this
 * process calling in the span (see shared_until) */
static int beside_callers(int threads)
{
    long long until = atomic_load_explicit(&shared_until, memory_order_relaxed);
    if (until == 0 && reg == NULL) {
        return threads;
    }
    long long now = real_wall_ns();
    int processes = registry_others(now);
    if (processes > 0) { /* this process's share of its limit (registry) */
        threads /= processes + 1;
    }
    if (now < until) {
        threads -= atomic_load_explicit(&shared_callers, memory_order_relaxed);
    }
    return threads < 1 ? 1 : threads;
}

/* The pool for this thread's call, or 0 where another thread's call holds it */
static int pool_take(void)
{
    if (pthread_mutex_trylock(&pool.busy) != 0) {
        collided();
        return 0;
    }
    holding = 1;
    return 1;
}

static int fm_begin(void)
{
    if (reg != NULL) {
        registry_calls(real_wall_ns());
    }
    return pool_take();
}

static void fm_end(void)
{
    holding = 0;
    pthread_mutex_unlock(&pool.busy);
}
static int fm_threads(void) { return atomic_load_explicit(&nthreads, memory_order_relaxed); }

static int fm_start(fm_job *job, int threads)
{
    threads = beside_callers(threads);
    if (threads <= 1) {
        job->woke = 0;
        return 0;
    }
    intptr_t pieces = (job->n + job->piece - 1) / job->piece;
    job->homes = threads < FM_HOMES ? threads : FM_HOMES;
    for (int h = 0; h < job->homes; h++) {
        intptr_t end = pieces * (h + 1) / job->homes * job->piece;
        atomic_init(&job->next[h].next, pieces * h / job->homes * job->piece);
        job->end[h] = end < job->n ? end : job->n;
    }
    atomic_init(&job->flags, 0);
    atomic_init(&job->seats, threads - 1);
    atomic_init(&job->joined, 0);
    job->threads = threads;
    job->late = 0;
    job->started = real_wall_ns();
    job->absent = 0;
    job->cpu = sched_getcpu();
    fp_get(&job->fp);
    int starting = nworkers < threads - 1; /* a new thread, like a parked one, is slow to come */
    if (ensure_workers(threads - 1) == 0) {
        job->woke = 0;
        return 0;
    }
    atomic_store(&pool.current, job);
    atomic_fetch_add(&pool.generation, 1); /* seq_cst, then the sleepers read: see wait_for_call */
    job->woke = starting || atomic_load(&sleepers) > 0;
    if (job->woke) {
        long long now = real_wall_ns();
        if (now < atomic_load_explicit(&shut_out_until, memory_order_relaxed)) {
            job->woke = FM_WOKE_ON_PURPOSE;
        }
        if (atomic_load_explicit(&wake_pending, memory_order_relaxed)) {
            job->late = 1;
            late_here++;
        }
        atomic_store_explicit(&wake_pending, 1, memory_order_relaxed);
        atomic_store(&woken_at, now);
        pthread_mutex_lock(&lock);
        pthread_cond_broadcast(&wake);
        pthread_mutex_unlock(&lock);
    }
    return 1;
}

static void fm_finish(fm_job *job)
{
    job->caller_n = 0;
    job->caller_ns = 0;
    intptr_t mine;
    if (job->timed) {
        long long t0 = thread_cpu_ns();
        mine = job->caller_n = run_pieces(job, 0);
        job->caller_ns = thread_cpu_ns() - t0;
    }
    else {
        mine = run_pieces(job, 0);
    }
    /* The pool's threads took under half their share of the pieces of a split long enough
     * for running ones to come (ABSENT_NS): it ran short of them (late(), which auto's
     * learning reads). On a 2-vCPU VM, after the process slept, a worker woken on the
     * other vCPU waited runnable for 8-20 ms (nothing else ran there: the host had not
     * run that vCPU) and every split took about a whole run's time: learned then,
     * NumPy's own call won cells where the runtime's kernels were 1.5-2.5x faster.
     * (Shorter splits often end before a worker comes, with a core busy for good: the
     * learning then waited for threads at every turn, and auto ran 0.93-0.96x NumPy's
     * speed at 10^4 elements in bench/busy.py.) */
    int t = job->threads;
    if (t > 1 && !job->late && (double)(job->n - mine) * (2.0 * t) < (double)job->n * (t - 1)
            && real_wall_ns() - job->started >= ABSENT_NS) {
        late_here++;
    }
    /* Every piece is taken; workers that joined finish theirs. */
    atomic_store(&pool.current, NULL);
    for (unsigned spins = 0; atomic_load(&pool.active) > 0; spins++) {
        if (spins < 4096) {
            RELAX();
        }
        else {
            sched_yield(); /* a worker descheduled mid-piece: let it run */
        }
    }
    /* No worker came, none had to wake, and the call was long enough for a running one
     * (it looks every microsecond or so) to have come: its core is taken. (The real
     * clock: a split's length, not the pacing's clocks, which tests replace.) */
    int joined = atomic_load(&job->joined);
    if (joined) {
        atomic_fetch_add_explicit(&joins, joined, memory_order_relaxed);
    }
    job->absent = !job->woke && joined == 0
                  && real_wall_ns() - job->started >= ABSENT_NS;
    if (job->absent && atomic_load(&wall_ns) == real_wall_ns) {
        /* workers park at once for a while: see shut_out_until */
        long long now = real_wall_ns();
        atomic_store_explicit(&shut_out_until, now + atomic_load_explicit(
                                  &shut_out_ns, memory_order_relaxed), memory_order_relaxed);
        consider_yield(now);
    }
}

/* ---- pacing ------------------------------------------------------------------------ */

/* trace(): the last TRACE_N pacing events (whole runs kept, splits judged), for finding
 * out why a program's splits lose; off (one relaxed load per event) unless asked for. */
#define TRACE_N 65536
typedef struct {
    long long at, n, wall, alone, whole; /* ns; whole: the record's estimate for n */
    int kind, woke, came, lost, paused;  /* kind 0 kept whole, 1 split judged */
} TraceEvent;
static TraceEvent *trace_ring = NULL;
static atomic_int tracing = 0;
static atomic_ulong traced = 0;

/* a time per element in picoseconds as a record keeps it: rounded, from 1 to 4e9 */
static unsigned ps_kept(double ps)
{
    return ps < 1.0 ? 1u : ps > 4e9 ? 4000000000u : (unsigned)(ps + 0.5);
}

/* n elements at `ps` picoseconds each (a record's whole-run time per element), in ns */
static long long ps_times(unsigned ps, intptr_t n)
{
    return (long long)ps * (n / 1000) + (long long)ps * (n % 1000) / 1000;
}

/* whole_ps: the record's time per element (0: none); `left` is read from the record */
static void trace_event(int kind, const fm_pace *pace, intptr_t n, long long wall,
                        long long alone, unsigned whole_ps, int woke, int came, int lost)
{
    if (!atomic_load_explicit(&tracing, memory_order_relaxed) || trace_ring == NULL) {
        return;
    }
    long long whole = whole_ps ? ps_times(whole_ps, n) : -1;
    int paused = atomic_load_explicit(&pace->left, memory_order_relaxed);
    unsigned long k = atomic_fetch_add_explicit(&traced, 1, memory_order_relaxed);
    TraceEvent *e = &trace_ring[k % TRACE_N];
    *e = (TraceEvent){real_wall_ns(), n, wall, alone, whole, kind, woke, came, lost, paused};
}

static fm_pace (*paces)[FM_BUCKETS] = NULL; /* Python callers' records, by number */
static atomic_int npaces = 0;

static long long wall_ns_now(void) { return wall_ns(); }

static fm_pace *fm_pace_of(fm_pace *paces, intptr_t n)
{
    int b = 63 - __builtin_clzll((unsigned long long)(n > 0 ? n : 1));
    return &paces[b < FM_BUCKETS ? b : FM_BUCKETS - 1];
}

/* The FP error flags a caller's own bookkeeping could raise (a time in floating point) are
 * put back as they were: what the caller reads after a call must be what its pieces
 * raised. (Inexact, which nothing reads and NumPy's loops raise at will, is left: putting
 * back every flag reloaded the x87 environment on every call.) */
#define KEEP_FLAGS_BEGIN int kept_flags_ = fetestexcept(ERRORS);
#define KEEP_FLAGS_END clear_raised(ERRORS & ~kept_flags_);

/* the median of a record's last whole runs' time per element (ps; 0: none yet) */
static unsigned fm_one_thread_ps(fm_pace *pace)
{
    unsigned v[FM_KEEP];
    int m = 0;
    for (int k = 0; k < FM_KEEP; k++) {
        unsigned x = atomic_load_explicit(&pace->whole[k], memory_order_relaxed);
        if (x > 0) {
            int j = m++;
            for (; j > 0 && v[j - 1] > x; j--) {
                v[j] = v[j - 1];
            }
            v[j] = x;
        }
    }
    return m ? v[m / 2] : 0;
}

/* A run of n elements kept whole took ns: its time per element joins the last FM_KEEP,
 * unless the run before it was a split. Then the lines of the output the split's other
 * threads wrote (a call's output is often the buffer the last call of its size freed)
 * come back to this core, which is the price of the change, not of a run kept whole: exp
 * on 10^4 float64 ran whole in 9.2-13.6 us after a split and 6.3-6.4 us after a whole
 * run, split in 4.1-4.5 us after a split and 7.3-17.9 us after a whole run
 * (bench/runtime.py --sections changes; Intel Xeon, 2 threads). Such a run is not kept,
 * and a sample runs whole once more (`since` goes on). */
static void fm_kept(fm_pace *paces, intptr_t n, long long ns)
{
    KEEP_FLAGS_BEGIN
    fm_pace *pace = fm_pace_of(paces, n);
    atomic_fetch_add_explicit(&splittable_ns, ns, memory_order_relaxed);
    if (atomic_exchange_explicit(&pace->last, FM_RAN_WHOLE, memory_order_relaxed)
        == FM_RAN_SPLIT) {
        trace_event(2, pace, n, ns, -1, 0, 0, 0, 0);
    }
    else {
        unsigned v = ps_kept(ns * 1e3 / (double)(n > 0 ? n : 1));
        unsigned was = fm_one_thread_ps(pace);
        int every = atomic_load_explicit(&pace->every, memory_order_relaxed);
        every = was > 0 && 8.0 * fabs((double)v - was) <= was
                ? (every < SAMPLE ? SAMPLE : every < SAMPLE_MOST ? 2 * every : SAMPLE_MOST)
                : SAMPLE;
        atomic_store_explicit(&pace->every, every, memory_order_relaxed);
        int k = atomic_fetch_add_explicit(&pace->kept, 1, memory_order_relaxed);
        atomic_store_explicit(&pace->whole[k % FM_KEEP], v, memory_order_relaxed);
        atomic_store_explicit(&pace->since, 0, memory_order_relaxed);
        trace_event(0, pace, n, ns, -1, 0, 0, 0, 0);
    }
    KEEP_FLAGS_END
}

/* job run whole in this thread, timed as a call of `size` elements */
static void run_whole(fm_pace *paces, fm_job *job, intptr_t size)
{
    long long t0 = wall_ns();
    intptr_t n = job->n;
    job->loop(job->args, &n, job->steps, job->data);
    fm_kept(paces, size, wall_ns() - t0);
}

/* A caller's own thread count, within the runtime's limit (threadpoolctl's, say). */
static int within(int threads)
{
    int limit = fm_threads();
    return threads > 0 && threads < limit ? threads : limit;
}

/* Whether a call of n elements of this kernel splits now (FM_SPLIT) or runs whole: during
 * a pause after a lost split (FM_WHOLE_PACED) or to keep the time of a whole run
 * (FM_WHOLE_SAMPLED); a whole run is timed and handed to fm_kept, a split to fm_judge.
 * *timed: the split is one of those also judged against the caller's CPU time. */
static int fm_decide(fm_pace *paces, intptr_t n, int *timed)
{
    fm_pace *pace = fm_pace_of(paces, n);
    *timed = 0;
    if (!atomic_load_explicit(&pacing, memory_order_relaxed)) {
        return FM_SPLIT;
    }
    int left = atomic_load_explicit(&pace->left, memory_order_relaxed);
    int since = atomic_fetch_add_explicit(&pace->since, 1, memory_order_relaxed);
    int every = atomic_load_explicit(&pace->every, memory_order_relaxed);
    int sample = since >= (every < SAMPLE ? SAMPLE : every)
                 || (since > 0 && atomic_load_explicit(&pace->kept, memory_order_relaxed) == 0);
    if (left > 0) {
        atomic_fetch_sub_explicit(&pace->left, 1, memory_order_relaxed);
        return FM_WHOLE_PACED;
    }
    long long yielding = atomic_load_explicit(&yield_until, memory_order_relaxed);
    if (yielding > 0) { /* see consider_yield */
        long long now = real_wall_ns();
        if (now >= yielding) {
            consider_yield(now);
            long long until = atomic_load(&yield_until);
            if (now >= until) { /* over: the next shut-out split looks again */
                atomic_compare_exchange_strong(&yield_until, &until, 0);
            }
            yielding = until;
        }
        if (now < yielding) {
            atomic_fetch_add_explicit(&kept_yielding, 1, memory_order_relaxed);
            return FM_WHOLE_PACED;
        }
    }
    if (sample) {
        return FM_WHOLE_SAMPLED;
    }
    if (beside_callers(fm_threads()) <= 1) {
        atomic_fetch_add_explicit(&kept_shared, 1, memory_order_relaxed);
        return FM_WHOLE_SHARED;
    }
    *timed = atomic_fetch_add_explicit(&pace->splits, 1, memory_order_relaxed)
             % atomic_load_explicit(&cpu_every, memory_order_relaxed) == 0;
    return FM_SPLIT;
}

/* A split of n elements took `wall` ns; `alone`: what one thread would have taken (-1:
 * not measured); `came`: whether its pool threads came (fm_came()). It lost if it took
 * longer than the kernel's recent whole runs at this length, or more than a twentieth
 * over `alone`, or if no worker came where a running one should have (FM_ABSENT): then
 * the next `skip` calls run whole. A split no worker joined otherwise (FM_UNSEEN) ran
 * whole, in the caller: it is judged neither way (counted won, it halved the pause: with
 * one core busy a worker woken after a pause often came too late, and log on 10^6
 * float64 elements split every third to fifth call, each 8% slower than a whole run). */
static void fm_judge(fm_pace *paces, intptr_t n, long long wall, long long alone, int woke,
                     int came)
{
    if (!atomic_load_explicit(&pacing, memory_order_relaxed)) {
        return;
    }
    if (came != FM_CAME && atomic_load(&wall_ns) != real_wall_ns) {
        came = FM_UNKNOWN; /* made-up clocks (tests): whether a worker came is the
                            * machine's doing, which they do not replace */
    }
    fm_pace *pace = fm_pace_of(paces, n);
    unsigned whole = fm_one_thread_ps(pace);
    /* what the call would have taken whole, for consider_yield's share */
    atomic_fetch_add_explicit(&splittable_ns, whole > 0 ? ps_times(whole, n) : wall,
                              memory_order_relaxed);
    if (came == FM_UNSEEN || came == FM_ABSENT) {
        /* an absent worker: workers park at once for a while (fm_finish), so the next
         * split wakes one, which takes its core back; that split is judged */
        trace_event(1, pace, n, wall, alone, 0, woke, came, 0);
        return;
    }
    KEEP_FLAGS_BEGIN
    int after_whole = atomic_exchange_explicit(&pace->last, FM_RAN_SPLIT, memory_order_relaxed)
                      == FM_RAN_WHOLE;
    int skip = atomic_load_explicit(&pace->skip, memory_order_relaxed);
    skip = skip < 1 ? 1 : skip;
    /* the splits' moving average: a split lost to the whole runs only where it and that
     * average took a twentieth longer than they do. A split's time has a long tail (exp
     * on 10^4 float64, split after split: median 4.7 us, a quarter over 6.5, whole 6.5
     * us; Intel Xeon, 2 threads): judged one by one, a fifth of the splits lost, each
     * loss costing a pause and two changes of way (fm_kept), and the split calls ran
     * slower than whole ones. A split counts at most three times the average (one of
     * 35-60 us in a few thousand, a descheduled thread's, lost alone); a busy core's
     * splits still move it within two to four; a fast split after a slow spell wins. */
    double this_ps = (double)wall * 1000.0 / (double)(n > 0 ? n : 1);
    unsigned avg = atomic_load_explicit(&pace->split, memory_order_relaxed);
    if (!after_whole) { /* the change of way's cost is not the split's (fm_kept) */
        avg = ps_kept(avg ? avg + (fmin(this_ps, 3.0 * avg) - avg) / SPLIT_AVERAGE : this_ps);
        atomic_store_explicit(&pace->split, avg, memory_order_relaxed);
    }
    int lost = (alone >= 0 && wall * 100 > alone * 105)
               || (whole > 0 && this_ps > whole * 1.05 && (avg == 0 || avg > whole * 1.05));
    if (lost && (woke == 1 || after_whole || beside_foreign(wall_ns() - wall))) {
        /* A worker had parked (the calls kept whole by a pause leave it time to): its
         * wake-up, 30 us to over a millisecond on a VM, is no sign of a busy core, and
         * counting it a loss made every pause end in another, longer one. Likewise a
         * split begun while another library's threads spun, and the first split after a
         * run kept whole: the output's lines move to the other threads' cores (see
         * fm_kept), and counting it lost kept exp on 10^4 float64 whole half the time in
         * the loop mode (7.2 us a call; 5.9 us split). The next split decides. */
    }
    else if (lost) {
        atomic_store_explicit(&pace->every, SAMPLE, memory_order_relaxed);
        atomic_store_explicit(&pace->left, skip, memory_order_relaxed);
        atomic_store_explicit(&pace->skip, skip < MOST_PAUSE ? 2 * skip : MOST_PAUSE,
                              memory_order_relaxed);
    }
    else {
        atomic_store_explicit(&pace->skip, skip > 1 ? skip / 2 : 1, memory_order_relaxed);
    }
    trace_event(1, pace, n, wall, alone, whole, woke, came, lost);
    KEEP_FLAGS_END
}

/* fm_split, or with `whole` 0, fm_split_or_say: a run to keep whole is the caller's; or
 * with `size` > 0, fm_split_exact: the job's pieces as given, paced as `size` elements. */
static int split_or_whole(fm_pace *paces, fm_job *job, int threads, int whole,
                          intptr_t size)
{
    threads = within(threads);
    if (reg != NULL) { /* (a process on one thread calls too: its core is taken) */
        registry_calls(real_wall_ns());
    }
    if (threads <= 1 || !pool_take()) {
        return FM_NOT_RUN;
    }
    intptr_t paced_as = size > 0 ? size : job->n;
    if (size == 0) { /* the pieces cut to the call (fm_split_exact: as given) */
        if (job->piece * threads > job->n) { /* short of a piece per thread: equal shares */
            job->piece = (job->n + threads - 1) / threads;
        }
        intptr_t widest = 1;
        for (int k = 0; k < job->nargs; k++) {
            intptr_t step = job->steps[k] < 0 ? -job->steps[k] : job->steps[k];
            widest = step > widest ? step : widest;
        }
        if (job->piece > FM_PIECE_BYTES / widest) {
            job->piece = FM_PIECE_BYTES / widest > 1 ? FM_PIECE_BYTES / widest : 1;
        }
        job->piece = (job->piece + 63) & ~(intptr_t)63; /* pieces start 64-element aligned */
    }
    int how = fm_decide(paces, paced_as, &job->timed);
    if (how == FM_WHOLE_SHARED) { /* whole, the pool held: see shared_until */
        run_whole(paces, job, paced_as);
        fm_end();
        return how;
    }
    if (how != FM_SPLIT) {
        fm_end();
        if (whole) {
            run_whole(paces, job, paced_as);
        }
        return how;
    }
    int paced = atomic_load_explicit(&pacing, memory_order_relaxed);
    long long t0 = paced ? wall_ns() : 0;
    int ran = fm_start(job, threads);
    if (ran) {
        fm_finish(job);
    }
    fm_end();
    if (!ran) {
        return FM_NOT_RUN;
    }
    if (paced) {
        long long wall = wall_ns() - t0;
        fm_judge(paces, paced_as, wall, job->timed ? fm_alone_ns(job) : -1, job->woke,
                 fm_came(job));
    }
    int raised = atomic_load(&job->flags);
    if (raised) {
        feraiseexcept(raised);
    }
    return FM_SPLIT;
}

static int fm_split(fm_pace *paces, fm_job *job, int threads)
{
    return split_or_whole(paces, job, threads, 1, 0);
}

static int fm_split_or_say(fm_pace *paces, fm_job *job, int threads)
{
    return split_or_whole(paces, job, threads, 0, 0);
}

static int fm_split_exact(fm_pace *paces, fm_job *job, int threads, intptr_t size)
{
    return split_or_whole(paces, job, threads, 1, size > 0 ? size : job->n);
}

/* A Python caller's records (new_pace()), for the other extensions; NULL for a bad number. */
static fm_pace *fm_pace_by_id(int id)
{
    return id >= 0 && id < atomic_load(&npaces) ? paces[id] : NULL;
}

static PyObject *pace_dict(fm_pace *paces_of, intptr_t n);

static fm_api api = {FM_API_VERSION, fm_split, fm_begin, fm_start, fm_finish, fm_end,
                     fm_threads, fm_pace_of, fm_decide, fm_kept, fm_judge,
                     fm_pace_by_id, wall_ns_now, fm_alone_ns, pace_dict, fm_split_or_say,
                     fm_split_exact};

/* ---- NumPy's strided loops, for the numpy backend -------------------------------- */

/* Whether n elements of x (of xs bytes each, contiguous) and of out overlap other than
 * exactly (in place): pieces run in any order would then read what others wrote. */
static int partly_overlaps(const char *xp, npy_intp xs, const char *op, npy_intp os,
                           npy_intp n)
{
    return !(xp == op && xs == os) && xp < op + n * os && op < xp + n * xs;
}

static void strided(char **args, intptr_t const *count, intptr_t const *steps, void *data)
{
    CallInfo *info = data;
    info->strided_loop(info->context, args, (npy_intp *)count, (npy_intp *)steps,
                       info->auxdata);
}


/* unary(loops, x, out, pace, min_split, piece, threads) -> NumPy's FP flag bits, or None;
 * x: one array, or a tuple of one or two (a two-argument ufunc's operands, of one dtype) */
/* An int argument of unary(), or -1 with an error set (none of them may be negative). */
static Py_ssize_t index_arg(PyObject *o, const char *name)
{
    Py_ssize_t v;
    if (PyLong_Check(o)) {
        v = PyLong_AsSsize_t(o);
    }
    else { /* a NumPy integer, say */
        PyObject *i = PyNumber_Index(o);
        v = i != NULL ? PyLong_AsSsize_t(i) : -1;
        Py_XDECREF(i);
    }
    if (v < 0 || v > INT_MAX) {
        if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_OverflowError)
                || PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "unary(): %s must be an int from 0", name);
        }
        return -1;
    }
    return v;
}

/* unary(loops, x, out, pace, min_split, piece, threads), its arguments read as they are
 * (a call's parse was a tenth of a call on 10^4 float32 elements) */
static PyObject *py_unary(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7 || !PyTuple_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError,
                        "unary(loops: tuple, x, out, pace, min_split, piece, threads)");
        return NULL;
    }
    PyObject *loops = args[0], *xo = args[1], *oo = args[2];
    Py_ssize_t pace = index_arg(args[3], "pace"), min_split = index_arg(args[4], "min_split");
    Py_ssize_t piece = index_arg(args[5], "piece"), threads = index_arg(args[6], "threads");
    if (pace < 0 || min_split < 0 || piece < 0 || threads < 0) {
        return NULL;
    }
    if (pace >= atomic_load(&npaces)) {
        PyErr_SetString(PyExc_ValueError, "pace must come from new_pace()");
        return NULL;
    }
    PyObject *ins[2];
    int nin = 1;
    if (PyTuple_Check(xo)) {
        nin = (int)PyTuple_GET_SIZE(xo);
        if (nin < 1 || nin > 2) {
            PyErr_SetString(PyExc_ValueError, "one or two inputs");
            return NULL;
        }
        for (int k = 0; k < nin; k++) {
            ins[k] = PyTuple_GET_ITEM(xo, k);
        }
    }
    else {
        ins[0] = xo;
    }
    if (!PyArray_Check(oo)) {
        Py_RETURN_NONE;
    }
    PyArrayObject *out = (PyArrayObject *)oo;
    npy_intp n = PyArray_SIZE(out);
    if ((PyArray_FLAGS(out) & (NEED | NPY_ARRAY_WRITEABLE)) != (NEED | NPY_ARRAY_WRITEABLE)
            || n == 0) {
        Py_RETURN_NONE;
    }
    PyArrayObject *x[2];
    for (int k = 0; k < nin; k++) {
        if (!PyArray_Check(ins[k])) {
            Py_RETURN_NONE;
        }
        x[k] = (PyArrayObject *)ins[k];
        if ((PyArray_FLAGS(x[k]) & NEED) != NEED || PyArray_SIZE(x[k]) != n
                || PyArray_DESCR(x[k]) != PyArray_DESCR(x[0])) {
            Py_RETURN_NONE;
        }
    }
    CallInfo *info = NULL;
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(loops); j++) {
        PyObject *in_dt, *out_dt, *cap;
        PyObject *entry = PyTuple_GET_ITEM(loops, j); /* (read as it is: a parse a loop
                                                       * was a tenth of a short call) */
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 3) {
            PyErr_SetString(PyExc_TypeError, "loops: (in dtype, out dtype, capsule) tuples");
            return NULL;
        }
        in_dt = PyTuple_GET_ITEM(entry, 0);
        out_dt = PyTuple_GET_ITEM(entry, 1);
        cap = PyTuple_GET_ITEM(entry, 2);
        if ((PyObject *)PyArray_DESCR(x[0]) == in_dt && (PyObject *)PyArray_DESCR(out) == out_dt) {
            info = PyCapsule_GetPointer(cap, CALL_INFO);
            if (info == NULL) {
                return NULL;
            }
            break;
        }
    }
    if (info == NULL || info->strided_loop == NULL || info->requires_pyapi) {
        Py_RETURN_NONE;
    }
    fm_job job;
    char *op = PyArray_BYTES(out);
    npy_intp os = PyArray_ITEMSIZE(out);
    for (int k = 0; k < nin; k++) {
        char *xp = PyArray_BYTES(x[k]);
        npy_intp xs = PyArray_ITEMSIZE(x[k]);
        if (partly_overlaps(xp, xs, op, os, n)) {
            Py_RETURN_NONE; /* NumPy buffers it */
        }
        job.args[k] = xp;
        job.steps[k] = xs;
    }
    job.args[nin] = op;
    job.steps[nin] = os;
    job.nargs = nin + 1;
    job.loop = strided;
    job.data = info;
    job.n = n;
    threads = within(threads);
    /* four pieces a thread, so that a thread whose core is busy takes fewer; none so
     * short that claiming it costs more than a fraction of its work */
    job.piece = piece > 0 ? piece : n / (4 * threads) > 1024 ? n / (4 * threads) : 1024;
    job.timed = 0;
    int raised;
    NPY_BEGIN_THREADS_DEF;
    if (n > 500) {
        NPY_BEGIN_THREADS;
    }
    clear_raised(ERRORS);
    if (n < min_split || fm_split(paces[pace], &job, threads) == FM_NOT_RUN) {
        npy_intp count = n;
        info->strided_loop(info->context, job.args, &count, job.steps, info->auxdata);
    }
    raised = fetestexcept(ERRORS);
    if (raised) {
        feclearexcept(ERRORS);
    }
    NPY_END_THREADS;
    return PyLong_FromLong(info->no_floatingpoint_errors ? 0 : fpe_bits(raised));
}

/* ---- is every element finite? ----------------------------------------------------- */

/* A float's magnitude bits plus the smallest exponent step carry into the sign bit exactly
 * when the exponent is all ones (inf or NaN): one add and one or an element, which every
 * SIMD width vectorizes. */
typedef struct {
    atomic_int seen; /* a piece saw an inf or a NaN */
} Scan;

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define WIDE __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define WIDE
#endif

/* The magnitude bits (M) and the smallest exponent step (S) of float32 and float64, for
 * this test here and in the vector loops below */
#define M32 0x7fffffffu
#define S32 0x00800000u
#define M64 0x7fffffffffffffffULL
#define S64 0x0010000000000000ULL

WIDE static void scan64(char **args, intptr_t const *count, intptr_t const *steps, void *data)
{
    (void)steps;
    const uint64_t *b = (const uint64_t *)args[0];
    uint64_t acc = 0;
    for (intptr_t i = 0; i < *count; i++) {
        acc |= (b[i] & M64) + S64;
    }
    if (acc >> 63) {
        atomic_store_explicit(&((Scan *)data)->seen, 1, memory_order_relaxed);
    }
}

WIDE static void scan32(char **args, intptr_t const *count, intptr_t const *steps, void *data)
{
    (void)steps;
    const uint32_t *b = (const uint32_t *)args[0];
    uint32_t acc = 0;
    for (intptr_t i = 0; i < *count; i++) {
        acc |= (b[i] & M32) + S32;
    }
    if (acc >> 31) {
        atomic_store_explicit(&((Scan *)data)->seen, 1, memory_order_relaxed);
    }
}

static fm_pace scan_paces[2][FM_BUCKETS];
#define SCAN_MIN_SPLIT (1 << 16) /* elements: below, one thread reads them faster */

/* finite(a) -> bool, or None where a is not a contiguous float32/float64 array */
static PyObject *py_finite(PyObject *self, PyObject *arg)
{
    if (!PyArray_Check(arg)) {
        Py_RETURN_NONE;
    }
    PyArrayObject *a = (PyArrayObject *)arg;
    int t = PyArray_TYPE(a);
    if ((t != NPY_FLOAT64 && t != NPY_FLOAT32) || (PyArray_FLAGS(a) & NEED) != NEED) {
        Py_RETURN_NONE;
    }
    Scan scan;
    atomic_init(&scan.seen, 0);
    fm_job job;
    job.loop = t == NPY_FLOAT64 ? scan64 : scan32;
    job.data = &scan;
    job.args[0] = PyArray_BYTES(a);
    job.steps[0] = PyArray_ITEMSIZE(a);
    job.nargs = 1;
    job.n = PyArray_SIZE(a);
    job.piece = 1 << 15;
    job.timed = 0;
    if (job.n == 0) {
        Py_RETURN_TRUE;
    }
    Py_BEGIN_ALLOW_THREADS
    if (job.n < SCAN_MIN_SPLIT || fm_split(scan_paces[t == NPY_FLOAT64], &job, 0) == FM_NOT_RUN) {
        intptr_t n = job.n;
        job.loop(job.args, &n, job.steps, job.data);
    }
    Py_END_ALLOW_THREADS
    return PyBool_FromLong(!atomic_load(&scan.seen));
}

/* ---- MKL's vector math (VML) -------------------------------------------------------- */

/* VML's 64-bit-count entry points (vmdExp_64 and the like): one or two inputs, one output,
 * the mode last. Their addresses come from the loaded libmkl_rt (backends/mkl.py). */
typedef void (*vml1_fn)(int64_t n, const void *a, void *r, int64_t mode);
typedef void (*vml2_fn)(int64_t n, const void *a, const void *b, void *r, int64_t mode);
typedef int (*set_local_fn)(int n); /* MKL_Set_Num_Threads_Local: returns the previous */
/* vmlSetErrStatus: sets this thread's VML status, returns the one it replaces. Its argument
 * is an MKL_INT, 32 or 64 bits by the library's interface: 0 passed as 64 bits reads as 0
 * either way. */
typedef int (*status_fn)(int64_t status);

/* The libraries (their MKL_Set_Num_Threads_Local) whose VML a pool thread has set to run
 * on that thread alone, for good: libmkl_rt's, and torch's own copy of MKL, linked into
 * libtorch_cpu (backends/torch.py). */
#define SINGLE_MAX 4
static _Thread_local set_local_fn worker_single[SINGLE_MAX];

typedef struct {
    void *fn;
    set_local_fn set;
    status_fn status; /* NULL: the output is looked at (see vml_piece) */
    int nin, check, wide;
    int bits; /* 0: VML's entry point; 512 or 256: a vector function (see vector()) */
    int64_t mode;
    Scan scan;
} Vml;

/* ---- vector functions: SLEEF's, which torch's own loops call (backends/torch.py) ---- */

/* A function of one SIMD register of floats (Sleef_log1pf16_u10avx512f and the like) over a
 * piece: whole registers, then the tail through one register of zeros (as torch's loops
 * do), for the very bits torch's loop gives every element. Returns whether a result was
 * an inf or a NaN, with `check` (the scan's test on each register as it is made: no pass
 * over the output). */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
/* Bytes ahead of the loop that the input is fetched from memory and the output's lines
 * fetched for writing (PREFETCHW). Without it, past the caches, the loop's time swung
 * 2x with where the output lay against the input: Sleef_expm1d8_u10avx512f over 4*10^6
 * float64 elements took 3.0-4.7 ns an element by the distance between them modulo 4 KiB
 * (the same in torch's own loop), with it 2.4 at every distance (Intel Xeon, AVX-512; 64
 * elements ahead, 2.65-3.1). VML's own loop showed no such swing (vmdExpm1: 0.95-1.06). */
#define PREFETCH_AHEAD 2048
#define VECTOR_LOOP(NAME, TARGET, T, U, VEC, IVEC, LOAD, STORE, CAST, SET1, AND, ADD, SIGNS, \
                    MAG, STEP)                                                              \
    __attribute__((target(TARGET))) static int NAME(void *fn, const char *a, char *r,     \
                                                     intptr_t n, int check)              \
    {                                                                                    \
        VEC (*f)(VEC) = (VEC(*)(VEC))fn;                                                \
        enum { L = sizeof(VEC) / sizeof(T) };                                           \
        const T *x = (const T *)a;                                                      \
        T *o = (T *)r;                                                                  \
        const IVEC mag = SET1(MAG), step = SET1(STEP), sign = SET1(~(U)(MAG));          \
        int found = 0; /* set once, at the first inf or NaN made (no more looks then) */ \
        intptr_t i = 0;                                                                 \
        for (; i + L <= n; i += L) {                                                    \
            __builtin_prefetch((const char *)(x + i) + PREFETCH_AHEAD, 0, 3);           \
            __builtin_prefetch((char *)(o + i) + PREFETCH_AHEAD, 1, 3);                 \
            VEC y = f(LOAD(x + i));                                                     \
            STORE(o + i, y);                                                            \
            if (check && SIGNS(ADD(AND(CAST(y), mag), step), sign)) {                   \
                found = 1;                                                              \
                check = 0;                                                              \
            }                                                                           \
        }                                                                               \
        U seen = 0;                                                                     \
        if (i < n) {                                                                    \
            T buf[L] = {0};                                                             \
            memcpy(buf, x + i, (size_t)(n - i) * sizeof(T));                            \
            STORE(buf, f(LOAD(buf)));                                                   \
            memcpy(o + i, buf, (size_t)(n - i) * sizeof(T));                            \
            for (intptr_t k = 0; check && k < n - i; k++) {                             \
                U b;                                                                    \
                memcpy(&b, &buf[k], sizeof b);                                          \
                seen |= (b & (U)MAG) + (U)STEP;                                         \
            }                                                                           \
        }                                                                               \
        return found || (check && (seen >> (8 * sizeof(U) - 1)));                       \
    }
#define SET1_64x4(x) _mm256_set1_epi64x((long long)(x))
/* The sign bits of a register's lanes, as a mask: each register is tested as it is made,
 * and nothing is kept across the next call (every vector register is the callee's to use:
 * an accumulator in one went to the stack and back around every call, and the loop ran
 * twice as slow at 10^7 float64, 4.3 ns an element against 2.2; Intel Xeon) */
#define SIGNS512_32(v, s) _mm512_test_epi32_mask((v), (s))
#define SIGNS512_64(v, s) _mm512_test_epi64_mask((v), (s))
#define SIGNS256_32(v, s) ((void)(s), _mm256_movemask_ps(_mm256_castsi256_ps(v)))
#define SIGNS256_64(v, s) ((void)(s), _mm256_movemask_pd(_mm256_castsi256_pd(v)))
/* The one loop at each width and float type (VS: the register type's suffix, P: the
 * intrinsics' float suffix, W: the bits of an element) */
#define LOOP512(NAME, T, U, VS, P, W, M, S)                                                  \
    VECTOR_LOOP(NAME, "avx512f,prfchw", T, U, __m512##VS, __m512i, _mm512_loadu_##P,         \
                _mm512_storeu_##P, _mm512_cast##P##_si512, _mm512_set1_epi##W,              \
                _mm512_and_si512, _mm512_add_epi##W, SIGNS512_##W, M, S)
#define LOOP256(NAME, T, U, VS, P, W, SET1, M, S)                                            \
    VECTOR_LOOP(NAME, "avx2,fma,prfchw", T, U, __m256##VS, __m256i, _mm256_loadu_##P,        \
                _mm256_storeu_##P, _mm256_cast##P##_si256, SET1, _mm256_and_si256,         \
                _mm256_add_epi##W, SIGNS256_##W, M, S)
LOOP512(vec512f, float, uint32_t, , ps, 32, M32, S32)
LOOP512(vec512d, double, uint64_t, d, pd, 64, M64, S64)
LOOP256(vec256f, float, uint32_t, , ps, 32, _mm256_set1_epi32, M32, S32)
LOOP256(vec256d, double, uint64_t, d, pd, 64, SET1_64x4, M64, S64)

static int vector_supported(int bits)
{
    __builtin_cpu_init();
    return bits == 512 ? __builtin_cpu_supports("avx512f")
         : bits == 256 ? __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") : 0;
}

static int vector_piece(const Vml *v, char **args, intptr_t n, int check)
{
    if (v->bits == 512) {
        return (v->wide ? vec512d : vec512f)(v->fn, args[0], args[1], n, check);
    }
    return (v->wide ? vec256d : vec256f)(v->fn, args[0], args[1], n, check);
}
#else
static int vector_supported(int bits)
{
    (void)bits;
    return 0;
}

static int vector_piece(const Vml *v, char **args, intptr_t n, int check)
{
    (void)v, (void)args, (void)n, (void)check;
    return 0;
}
#endif

static void worker_alone(set_local_fn set)
{
    for (int k = 0; k < SINGLE_MAX; k++) {
        if (worker_single[k] == set) {
            return;
        }
        if (worker_single[k] == NULL) {
            set(1);
            worker_single[k] = set;
            return;
        }
    }
    set(1); /* more libraries than places: set it at every piece */
}

/* VML's statuses (mkl_vml_defines.h) that an element NumPy raises a flag on gives:
 * VML_STATUS_ERRDOM, _SING and _OVERFLOW (invalid, divide-by-zero, overflow) */
#define VML_FLAGGED(st) ((st) >= 1 && (st) <= 3)

/* One piece: VML on it, in this thread alone (MKL's own threads would compete with the
 * pool's for the same cores), then, where the caller asks, what NumPy's flags could be:
 * VML keeps no FP flags NumPy's follow, and only an inf or a NaN in the output can show
 * that NumPy would have raised one (backends/_flags.py). With v->status, VML's own status
 * of the piece answers (this thread's, read and cleared after the piece: no pass over the
 * output); a status of an error NumPy raises no flag for (underflow: VML keeps only the
 * last error, so an overflow before it would be hidden) sends the piece to the look. The
 * status is trusted only where every special value NumPy flags sets it, on this machine,
 * in a thread of its own (backends/_vml.py). Else the output is looked at while it is in
 * cache (CHECK_BLOCK). A vector function's registers are looked at as they are made. */
#define CHECK_BLOCK (16 << 10) /* bytes of output VML makes before they are looked at */
static void vml_piece(char **args, intptr_t const *count, intptr_t const *steps, void *data)
{
    Vml *v = data;
    if (is_worker && v->set != NULL) {
        worker_alone(v->set); /* a pool thread: for good */
    }
    int check = v->check && !atomic_load_explicit(&v->scan.seen, memory_order_relaxed);
    if (v->bits) {
        if (vector_piece(v, args, *count, check)) {
            atomic_store_explicit(&v->scan.seen, 1, memory_order_relaxed);
        }
        return;
    }
    if (check && v->status != NULL) {
        v->status(0); /* (a call that was not looked at leaves its errors in the thread) */
        ((vml1_fn)v->fn)(*count, args[0], args[1], v->mode);
        int st = v->status(0);
        if (VML_FLAGGED(st)) {
            atomic_store_explicit(&v->scan.seen, 1, memory_order_relaxed);
        }
        else if (st != 0) {
            (v->wide ? scan64 : scan32)(&args[1], count, &steps[1], &v->scan);
        }
        return;
    }
    /* looked at in blocks that VML has just written to the core's L1 cache: looked at
     * after the whole piece, from L2, the look cost 6.5-8.4 us of a 31-33 us call of exp
     * on 10^5 float64 (Intel Xeon), in blocks 5.6-6.0 */
    intptr_t block = check ? CHECK_BLOCK / steps[v->nin] : *count;
    for (intptr_t done = 0; done < *count; done += block) {
        intptr_t n = *count - done < block ? *count - done : block;
        char *a = args[0] + done * steps[0], *r = args[v->nin] + done * steps[v->nin];
        if (v->nin == 1) {
            ((vml1_fn)v->fn)(n, a, r, v->mode);
        }
        else {
            ((vml2_fn)v->fn)(n, a, args[1] + done * steps[1], r, v->mode);
        }
        if (check) {
            (v->wide ? scan64 : scan32)(&r, &n, &steps[v->nin], &v->scan);
        }
    }
}

static int contiguous_alike(PyArrayObject **a, int n, int *order)
{
    for (int o = 0; o < 2; o++) {
        int flag = o == 0 ? NPY_ARRAY_C_CONTIGUOUS : NPY_ARRAY_F_CONTIGUOUS;
        int all = 1;
        for (int k = 0; k < n && all; k++) {
            all = (PyArray_FLAGS(a[k]) & (flag | NPY_ARRAY_ALIGNED)) == (flag | NPY_ARRAY_ALIGNED);
        }
        if (all) {
            *order = o;
            return 1;
        }
    }
    return 0;
}

/* Elements a piece whose output is looked at takes at most. Set when the look read a
 * whole piece back (a piece of a 10^7-element call was 1.25 million elements, and forced
 * torch-cpu exp of 10^7 float64 took 1.22x raw torch's time, 1.06x with the cap; 2-core
 * AMD EPYC); the look is in blocks now (CHECK_BLOCK), but the smaller pieces still pay:
 * forced mkl exp of 10^6 float64 took 0.34-0.36 ms with them, 0.37-0.38 with the
 * runtime's 512 KB (Intel Xeon, three processes each). */
#define CHECK_PIECE 32768

/* v's function over its arrays (ins, then out) in pieces; see vml() and vector(). */
static PyObject *vml_pieces(Vml *v, PyObject *ins, PyObject *oo, int pace,
                            Py_ssize_t min_split, int threads)
{
    int nin = v->nin;
    PyArrayObject *arr[3];
    for (int k = 0; k <= nin; k++) {
        PyObject *o = k < nin ? PyTuple_GET_ITEM(ins, k) : oo;
        if (!PyArray_Check(o)) {
            Py_RETURN_NONE;
        }
        arr[k] = (PyArrayObject *)o;
    }
    PyArrayObject *out = arr[nin];
    int t = PyArray_TYPE(out), order;
    npy_intp n = PyArray_SIZE(out);
    if ((t != NPY_FLOAT64 && t != NPY_FLOAT32) || !(PyArray_FLAGS(out) & NPY_ARRAY_WRITEABLE)
            || !contiguous_alike(arr, nin + 1, &order)) {
        Py_RETURN_NONE;
    }
    for (int k = 0; k < nin; k++) {
        if (PyArray_TYPE(arr[k]) != t || PyArray_SIZE(arr[k]) != n
                || !PyArray_ISNOTSWAPPED(arr[k])
                || partly_overlaps(PyArray_BYTES(arr[k]), PyArray_ITEMSIZE(arr[k]),
                                   PyArray_BYTES(out), PyArray_ITEMSIZE(out), n)) {
            Py_RETURN_NONE; /* (a partial overlap: the caller's other path copies) */
        }
    }
    if (!PyArray_ISNOTSWAPPED(out)) {
        Py_RETURN_NONE;
    }
    v->wide = t == NPY_FLOAT64;
    if (!v->check || nin != 1) {
        v->status = NULL; /* VML's status answers for one-input calls whose flags are watched */
    }
    atomic_init(&v->scan.seen, 0);
    if (n == 0) {
        Py_RETURN_FALSE;
    }
    fm_job job;
    job.loop = vml_piece;
    job.data = v;
    job.nargs = nin + 1;
    for (int k = 0; k <= nin; k++) {
        job.args[k] = PyArray_BYTES(arr[k]);
        job.steps[k] = PyArray_ITEMSIZE(out);
    }
    job.n = n;
    threads = within(threads);
    job.piece = n / (4 * threads) > 1024 ? n / (4 * threads) : 1024;
    if (v->check && v->status == NULL && job.piece > CHECK_PIECE) { /* (the look's) */
        job.piece = CHECK_PIECE;
    }
    job.timed = 0;
    fenv_t env;
    Py_BEGIN_ALLOW_THREADS
    fegetenv(&env); /* the kernel's flags (VML raises some, in no pattern NumPy's follow) are
                     * dropped: the output shows what NumPy would raise */
    set_local_fn set = v->set;
    int before = set != NULL ? set(1) : 0; /* the caller's own setting comes back after */
    status_fn status = v->status;
    int kept = status != NULL ? status(0) : 0; /* the caller's own status, back after */
    if (n < min_split || fm_split(paces[pace], &job, threads) == FM_NOT_RUN) {
        intptr_t count = n;
        vml_piece(job.args, &count, job.steps, v);
    }
    if (status != NULL) {
        status(kept);
    }
    if (set != NULL) {
        set(before);
    }
    fesetenv(&env);
    Py_END_ALLOW_THREADS
    return PyBool_FromLong(atomic_load(&v->scan.seen));
}

static int pace_ok(int pace)
{
    return pace >= 0 && pace < atomic_load(&npaces);
}

/* vml(fn, ins, out, mode, pace, min_split, threads, check, setter=0, status=0) -> bool or
 * None */
static PyObject *py_vml(PyObject *self, PyObject *args)
{
    unsigned long long fn, setter = 0, status = 0;
    PyObject *ins, *oo;
    long long mode;
    int pace, threads, check;
    Py_ssize_t min_split;
    if (!PyArg_ParseTuple(args, "KO!OLinip|KK", &fn, &PyTuple_Type, &ins, &oo, &mode, &pace,
                          &min_split, &threads, &check, &setter, &status)) {
        return NULL;
    }
    int nin = (int)PyTuple_GET_SIZE(ins);
    if (fn == 0 || nin < 1 || nin > 2 || !pace_ok(pace)) {
        PyErr_SetString(PyExc_ValueError, "vml(function address, 1 or 2 inputs, out, mode, "
                                          "pace from new_pace(), min_split, threads, check, "
                                          "setter)");
        return NULL;
    }
    Vml v = {.fn = (void *)(uintptr_t)fn, .set = (set_local_fn)(uintptr_t)setter, .nin = nin,
             .check = check, .mode = mode, .status = (status_fn)(uintptr_t)status};
    return vml_pieces(&v, ins, oo, pace, min_split, threads);
}

/* vml_pieces on one operand x; None where v's vector function cannot run on this CPU. */
static PyObject *one_operand(Vml *v, PyObject *x, PyObject *oo, int pace, Py_ssize_t min_split,
                             int threads)
{
    if (v->bits != 0 && !vector_supported(v->bits)) {
        Py_RETURN_NONE;
    }
    PyObject *ins = PyTuple_Pack(1, x);
    if (ins == NULL) {
        return NULL;
    }
    PyObject *r = vml_pieces(v, ins, oo, pace, min_split, threads);
    Py_DECREF(ins);
    return r;
}

/* vector(fn, bits, x, out, pace, min_split, threads, check) -> bool or None */
static PyObject *py_vector(PyObject *self, PyObject *args)
{
    unsigned long long fn;
    PyObject *x, *oo;
    int bits, pace, threads, check;
    Py_ssize_t min_split;
    if (!PyArg_ParseTuple(args, "KiOOinip", &fn, &bits, &x, &oo, &pace, &min_split, &threads,
                          &check)) {
        return NULL;
    }
    if (fn == 0 || (bits != 512 && bits != 256) || !pace_ok(pace)) {
        PyErr_SetString(PyExc_ValueError, "vector(function address, bits: 512 or 256, x, out, "
                                          "pace from new_pace(), min_split, threads, check)");
        return NULL;
    }
    Vml v = {.fn = (void *)(uintptr_t)fn, .nin = 1, .check = check, .bits = bits};
    return one_operand(&v, x, oo, pace, min_split, threads);
}

/* vml_entry(spec, x, out, check) -> bool or None: vml() or vector() on one operand, its
 * settings in spec = (fn, bits, mode, setter, pace, min_split, status) (bits 0: a VML
 * entry point; status: its library's vmlSetErrStatus, or 0), for a caller that makes the
 * same call again and again (frontends/_hot.c). */
static PyObject *py_vml_entry(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyTuple_Check(args[0]) || PyTuple_GET_SIZE(args[0]) != 7) {
        PyErr_SetString(PyExc_TypeError, "vml_entry((fn, bits, mode, setter, pace, min_split, "
                                         "status), x, out, check)");
        return NULL;
    }
    PyObject *const *spec = &PyTuple_GET_ITEM(args[0], 0);
    unsigned long long fn = PyLong_AsUnsignedLongLong(spec[0]);
    long bits = PyLong_AsLong(spec[1]);
    long long mode = PyLong_AsLongLong(spec[2]);
    unsigned long long setter = PyLong_AsUnsignedLongLong(spec[3]);
    long pace = PyLong_AsLong(spec[4]);
    Py_ssize_t min_split = PyLong_AsSsize_t(spec[5]);
    unsigned long long status = PyLong_AsUnsignedLongLong(spec[6]);
    int check = PyObject_IsTrue(args[3]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    if (fn == 0 || (bits != 0 && bits != 512 && bits != 256) || !pace_ok((int)pace)) {
        PyErr_SetString(PyExc_ValueError, "vml_entry: a function address, bits 0, 256 or 512, "
                                          "a pace from new_pace()");
        return NULL;
    }
    Vml v = {.fn = (void *)(uintptr_t)fn, .set = (set_local_fn)(uintptr_t)setter, .nin = 1,
             .check = check, .mode = mode, .bits = (int)bits,
             .status = (status_fn)(uintptr_t)status};
    return one_operand(&v, args[1], args[2], (int)pace, min_split, 0);
}

/* Records given back (free_pace) are handed out again, cleared: a program that builds its
 * kernels again and again (a reload of the configuration, a test suite) never runs out. */
static int free_ids[MAXPACES];
static int nfree = 0; /* both under the GIL */

static PyObject *py_new_pace(PyObject *self, PyObject *unused)
{
    if (nfree > 0) {
        int k = free_ids[--nfree];
        memset(paces[k], 0, sizeof paces[k]);
        return PyLong_FromLong(k);
    }
    int k = atomic_load(&npaces); /* under the GIL */
    if (k >= MAXPACES) {
        PyErr_SetString(PyExc_RuntimeError, "no pacing records left");
        return NULL;
    }
    if (paces == NULL) {
        paces = calloc(MAXPACES, sizeof *paces);
        if (paces == NULL) {
            return PyErr_NoMemory();
        }
    }
    atomic_store(&npaces, k + 1);
    return PyLong_FromLong(k);
}

static PyObject *py_free_pace(PyObject *self, PyObject *args)
{
    int k;
    if (!PyArg_ParseTuple(args, "i", &k)) {
        return NULL;
    }
    if (k < 0 || k >= atomic_load(&npaces) || nfree >= MAXPACES) {
        PyErr_SetString(PyExc_ValueError, "free_pace: a number from new_pace()");
        return NULL;
    }
    for (int i = 0; i < nfree; i++) {
        if (free_ids[i] == k) {
            PyErr_SetString(PyExc_ValueError, "free_pace: given back already");
            return NULL;
        }
    }
    free_ids[nfree++] = k;
    Py_RETURN_NONE;
}

/* A record as a dict, for Python: {left, skip, since, kept, one_thread, last, every}. */
static PyObject *pace_dict(fm_pace *paces_of, intptr_t n)
{
    fm_pace *p = fm_pace_of(paces_of, n);
    unsigned ps = fm_one_thread_ps(p);
    PyObject *one = ps ? PyFloat_FromDouble((double)ps * 1e-12 * (double)n) : Py_NewRef(Py_None);
    if (one == NULL) {
        return NULL;
    }
    int last = atomic_load(&p->last);
    return Py_BuildValue("{s:i,s:i,s:i,s:i,s:N,s:s,s:i}", "left", atomic_load(&p->left), "skip",
                         atomic_load(&p->skip), "since", atomic_load(&p->since), "kept",
                         atomic_load(&p->kept), "one_thread", one, "last",
                         last == FM_RAN_SPLIT ? "split" : last == FM_RAN_WHOLE ? "whole" : "",
                         "every", atomic_load(&p->every));
}

static PyObject *py_pace(PyObject *self, PyObject *args)
{
    int pace;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "in", &pace, &n)) {
        return NULL;
    }
    if (pace < 0 || pace >= atomic_load(&npaces) || n < 1) {
        PyErr_SetString(PyExc_ValueError, "pace(number from new_pace(), n >= 1)");
        return NULL;
    }
    return pace_dict(paces[pace], n);
}

/* The pacing for splitters written in Python (fastmath/dispatch/_parallel.py's pool, a
 * library's own threads): the same records and rules as the native splitters'. */
static fm_pace *pace_arg(int pace, Py_ssize_t n)
{
    fm_pace *p = fm_pace_by_id(pace);
    if (p == NULL || n < 1) {
        PyErr_SetString(PyExc_ValueError, "pace must come from new_pace(), n be >= 1");
    }
    return p;
}

static PyObject *py_decide(PyObject *self, PyObject *args)
{
    int pace, timed;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "in", &pace, &n)) {
        return NULL;
    }
    fm_pace *p = pace_arg(pace, n);
    return p == NULL ? NULL : PyLong_FromLong(fm_decide(p, n, &timed));
}

static PyObject *py_resume(PyObject *self, PyObject *args)
{
    int pace;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "in", &pace, &n)) {
        return NULL;
    }
    fm_pace *p = pace_arg(pace, n);
    if (p == NULL) {
        return NULL;
    }
    atomic_store_explicit(&fm_pace_of(p, n)->left, 0, memory_order_relaxed);
    Py_RETURN_NONE;
}

static PyObject *py_kept(PyObject *self, PyObject *args)
{
    int pace;
    Py_ssize_t n;
    double seconds;
    if (!PyArg_ParseTuple(args, "ind", &pace, &n, &seconds)) {
        return NULL;
    }
    fm_pace *p = pace_arg(pace, n);
    if (p == NULL) {
        return NULL;
    }
    fm_kept(p, n, (long long)(seconds * 1e9));
    Py_RETURN_NONE;
}

static PyObject *py_judge(PyObject *self, PyObject *args)
{
    int pace, woke = 0, came = FM_UNKNOWN;
    Py_ssize_t n;
    double wall, alone;
    if (!PyArg_ParseTuple(args, "indd|ii", &pace, &n, &wall, &alone, &woke, &came)) {
        return NULL;
    }
    if (woke < 0 || woke > FM_WOKE_ON_PURPOSE) {
        PyErr_Format(PyExc_ValueError, "woke must be False, True or WOKE_ON_PURPOSE, got %d",
                     woke);
        return NULL;
    }
    if (came < FM_UNKNOWN || came > FM_UNSEEN) {
        PyErr_Format(PyExc_ValueError, "came must be UNKNOWN, ABSENT, CAME or UNSEEN, got %d",
                     came);
        return NULL;
    }
    fm_pace *p = pace_arg(pace, n);
    if (p == NULL) {
        return NULL;
    }
    fm_judge(p, n, (long long)(wall * 1e9), alone < 0 ? -1 : (long long)(alone * 1e9), woke,
             came);
    Py_RETURN_NONE;
}

/* ---- the rest of the Python interface -------------------------------------------- */

static PyObject *py_set_threads(PyObject *self, PyObject *args)
{
    int n;
    if (!PyArg_ParseTuple(args, "i", &n)) {
        return NULL;
    }
    if (n < 0 || n > MAXTHREADS) {
        PyErr_Format(PyExc_ValueError, "threads must be 0 (all usable cores) to %d, got %d",
                     MAXTHREADS, n);
        return NULL;
    }
    atomic_store(&nthreads, n == 0 ? default_threads() : n);
    Py_RETURN_NONE;
}

static PyObject *py_threads(PyObject *self, PyObject *unused)
{
    return PyLong_FromLong(atomic_load(&nthreads));
}

static PyObject *py_rest(PyObject *self, PyObject *unused)
{
    atomic_store_explicit(&pool.rested, atomic_load(&pool.generation), memory_order_relaxed);
    Py_RETURN_NONE;
}

static PyObject *py_foreign(PyObject *self, PyObject *arg)
{
    double s = PyFloat_AsDouble(arg);
    if (s == -1.0 && PyErr_Occurred()) {
        return NULL;
    }
    if (!(s >= 0 && s <= 1.0)) {
        PyErr_SetString(PyExc_ValueError, "foreign(seconds): seconds between 0 and 1");
        return NULL;
    }
    long long now = wall_ns();
    atomic_store_explicit(&foreign_until, now + (long long)(s * 1e9), memory_order_relaxed);
    atomic_store_explicit(&foreign_from, now, memory_order_relaxed);
    Py_RETURN_NONE;
}

static PyObject *py_foreign_left(PyObject *self, PyObject *unused)
{
    long long left = atomic_load_explicit(&foreign_until, memory_order_relaxed) - wall_ns();
    return PyFloat_FromDouble(left > 0 ? (double)left * 1e-9 : 0.0);
}

static PyObject *py_late(PyObject *self, PyObject *unused)
{
    return PyLong_FromUnsignedLong(late_here);
}

/* pause_seconds() -> the time of one pause instruction (RELAX), the unit of spin loops
 * (GNU OpenMP's GOMP_SPINCOUNT counts them): the fastest of a few timed runs of 4096. */
static PyObject *py_pause_seconds(PyObject *self, PyObject *unused)
{
    static double measured = 0.0;
    if (measured == 0.0) {
        long long best = -1;
        for (int r = 0; r < 5; r++) {
            long long t0 = real_wall_ns();
            for (int k = 0; k < 4096; k++) {
                RELAX();
            }
            long long t = real_wall_ns() - t0;
            best = best < 0 || t < best ? t : best;
        }
        measured = best > 0 ? (double)best * 1e-9 / 4096 : 1e-9;
    }
    return PyFloat_FromDouble(measured);
}

static PyObject *py_set_spin(PyObject *self, PyObject *args)
{
    double s;
    if (!PyArg_ParseTuple(args, "d", &s)) {
        return NULL;
    }
    if (!(s >= 0 && s <= 1.0)) {
        PyErr_Format(PyExc_ValueError, "spin must be 0 to 1 second, got %g", s);
        return NULL;
    }
    long long before = atomic_exchange(&spin_ns, (long long)(s * 1e9));
    return PyFloat_FromDouble((double)before * 1e-9);
}

static PyObject *py_set_pacing(PyObject *self, PyObject *args)
{
    int on;
    if (!PyArg_ParseTuple(args, "p", &on)) {
        return NULL;
    }
    return PyBool_FromLong(atomic_exchange(&pacing, on));
}

static PyObject *py_set_cpu_every(PyObject *self, PyObject *args)
{
    int n;
    if (!PyArg_ParseTuple(args, "i", &n)) {
        return NULL;
    }
    if (n < 1) {
        PyErr_Format(PyExc_ValueError, "cpu_every must be at least 1, got %d", n);
        return NULL;
    }
    return PyLong_FromLong(atomic_exchange(&cpu_every, n));
}

static PyObject *py_set_clock(PyObject *self, PyObject *args)
{
    PyObject *wall, *cpu;
    if (!PyArg_ParseTuple(args, "OO", &wall, &cpu)) {
        return NULL;
    }
    int fake = wall != Py_None;
    if (fake != (cpu != Py_None) || (fake && !(PyCallable_Check(wall) && PyCallable_Check(cpu)))) {
        PyErr_SetString(PyExc_TypeError, "_set_clock(wall, cpu): two callables, or None, None");
        return NULL;
    }
    PyObject *old[2] = {fake_clocks[0], fake_clocks[1]};
    fake_clocks[0] = fake ? Py_NewRef(wall) : NULL;
    fake_clocks[1] = fake ? Py_NewRef(cpu) : NULL;
    atomic_store(&wall_ns, fake ? fake_wall_ns : real_wall_ns);
    atomic_store(&thread_cpu_ns, fake ? fake_cpu_ns : real_cpu_ns);
    /* what a busy machine opened is the machine's doing, which made-up clocks do not
     * replace: none of it carries into (or, see fm_finish, opens under) them */
    atomic_store(&shut_out_until, 0);
    atomic_store(&yield_until, 0);
    Py_XDECREF(old[0]);
    Py_XDECREF(old[1]);
    Py_RETURN_NONE;
}

static PyObject *py_set_shut_out(PyObject *self, PyObject *args)
{
    double s;
    if (!PyArg_ParseTuple(args, "d", &s)) {
        return NULL;
    }
    long long before = atomic_exchange(&shut_out_ns, (long long)(s * 1e9));
    atomic_store(&shut_out_until, 0);
    return PyFloat_FromDouble((double)before * 1e-9);
}

static PyObject *py_registry(PyObject *self, PyObject *unused)
{
    RegSlot *mine = atomic_load(&reg_mine);
    long long now = real_wall_ns();
    atomic_store(&reg_looked, LLONG_MIN / 2); /* a fresh look */
    int processes = registry_others(now);
    if (reg == NULL) {
        return Py_BuildValue("{s:O,s:s,s:O,s:i,s:O}", "path", Py_None, "why", reg_why, "slot",
                             Py_None, "processes", 0, "warn", reg_warn ? Py_True : Py_False);
    }
    PyObject *slot = mine == NULL ? Py_NewRef(Py_None) : PyLong_FromLong(mine - reg->slot);
    if (slot == NULL) {
        return NULL;
    }
    return Py_BuildValue("{s:s,s:s,s:N,s:i,s:O}", "path", reg_path, "why", reg_why, "slot", slot,
                         "processes", processes, "warn", reg_warn ? Py_True : Py_False);
}

static PyObject *py_set_shared(PyObject *self, PyObject *args)
{
    double s;
    if (!PyArg_ParseTuple(args, "d", &s)) {
        return NULL;
    }
    if (!(s >= 0.0 && s <= 3600.0)) {
        PyErr_Format(PyExc_ValueError, "set_shared: seconds must be from 0 to 3600, not %R",
                     PyTuple_GET_ITEM(args, 0));
        return NULL;
    }
    long long before = atomic_exchange(&shared_ns, (long long)(s * 1e9));
    atomic_store(&shared_until, 0);
    return PyFloat_FromDouble((double)before * 1e-9);
}

static PyObject *py_set_yield(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"seconds", "others", "foreign", "share", "free", NULL};
    double s, others = 0.5, foreign = 0.05, share = 0.15, free = 0.5;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "d|dddd", names, &s, &others, &foreign,
                                     &share, &free)) {
        return NULL;
    }
    if (!(s >= 0 && s <= 60) || !(others >= 0) || !(foreign >= 0) || !(share >= 0)
        || !(free > -1e9 && free < 1e9)) {
        PyErr_SetString(PyExc_ValueError, "set_yield(seconds, others, foreign, share, free): "
                        "seconds between 0 and 60, others, foreign and share 0 or more, free "
                        "a number of CPUs");
        return NULL;
    }
    long long before = atomic_exchange(&yield_ns, (long long)(s * 1e9));
    yield_others = others;
    yield_foreign = foreign;
    yield_share = share;
    yield_free = free;
    atomic_store(&yield_until, 0);
    pthread_mutex_lock(&usage_lock);
    usage_then.valid = 0;
    pthread_mutex_unlock(&usage_lock);
    return PyFloat_FromDouble((double)before * 1e-9);
}

static PyObject *py_trace(PyObject *self, PyObject *args)
{
    int on = -1;
    if (!PyArg_ParseTuple(args, "|p", &on)) {
        return NULL;
    }
    if (on == 1 && trace_ring == NULL) {
        trace_ring = calloc(TRACE_N, sizeof(TraceEvent));
        if (trace_ring == NULL) {
            return PyErr_NoMemory();
        }
    }
    PyObject *list = PyList_New(0);
    if (list == NULL) {
        return NULL;
    }
    unsigned long end = atomic_load(&traced);
    unsigned long begin = end > TRACE_N ? end - TRACE_N : 0;
    for (unsigned long k = begin; trace_ring != NULL && k < end; k++) {
        TraceEvent *e = &trace_ring[k % TRACE_N];
        PyObject *t = Py_BuildValue("(iLLLLLiiii)", e->kind, e->at, e->n, e->wall, e->alone,
                                    e->whole, e->woke, e->came, e->lost, e->paused);
        if (t == NULL || PyList_Append(list, t) < 0) {
            Py_XDECREF(t);
            Py_DECREF(list);
            return NULL;
        }
        Py_DECREF(t);
    }
    if (on >= 0) {
        atomic_store(&traced, 0);
        atomic_store(&tracing, on);
    }
    return list;
}

static PyObject *py_stats(PyObject *self, PyObject *unused)
{
    unsigned long w = atomic_load(&wakes);
    long long now = real_wall_ns();
    long long left = atomic_load(&shut_out_until) - now;
    long long yielding = atomic_load(&yield_until) - now;
    long long shared = atomic_load(&shared_until) - now;
    int processes = registry_others(now);
    return Py_BuildValue("{s:i,s:k,s:k,s:i,s:d,s:k,s:d,s:k,s:d,s:k,s:k,s:d,s:(dddd),s:k,s:d,"
                         "s:i,s:i}",
                         "workers", nworkers, "parks", atomic_load(&parks), "joins",
                         atomic_load(&joins), "parked", atomic_load(&sleepers), "spin",
                         (double)atomic_load(&spin_ns) * 1e-9,
                         "wakes", w, "wake", w ? (double)atomic_load(&wake_ns) * 1e-9 / w : 0.0,
                         "moves", atomic_load(&moves), "shut_out",
                         left > 0 ? (double)left * 1e-9 : 0.0, "yields", atomic_load(&yields),
                         "kept_yielding", atomic_load(&kept_yielding), "yielding",
                         yielding > 0 ? (double)yielding * 1e-9 : 0.0, "looked", looked[0],
                         looked[1], looked[2], looked[3], "kept_shared",
                         atomic_load(&kept_shared), "shared",
                         shared > 0 ? (double)shared * 1e-9 : 0.0, "shared_callers",
                         shared > 0 ? atomic_load(&shared_callers) : 0, "processes", processes);
}

/* fixed_cost's pieces: each waits (a millisecond at most) until every thread of the call
 * holds one, so a call's time is what it takes to get all its threads going and back. */
typedef struct {
    atomic_int arrived;
    int threads;
} Gather;

static void gather(char **args, intptr_t const *count, intptr_t const *steps, void *data)
{
    (void)args, (void)count, (void)steps;
    Gather *g = data;
    atomic_fetch_add(&g->arrived, 1);
    long long until = real_wall_ns() + 1000000;
    for (unsigned spins = 0; atomic_load(&g->arrived) < g->threads; spins++) {
        if ((spins & 255) == 0 && real_wall_ns() > until) {
            return;
        }
        RELAX();
    }
}

/* fixed_cost(rounds, pause) -> seconds per call: a parallel call whose threads each take
 * one piece of no work, `pause` seconds apart (0: back to back, the workers spinning;
 * longer than the spin: they are parked each time). */
static PyObject *py_fixed_cost(PyObject *self, PyObject *args)
{
    int rounds;
    double pause;
    if (!PyArg_ParseTuple(args, "id", &rounds, &pause)) {
        return NULL;
    }
    int threads = fm_threads();
    if (rounds < 1 || threads < 2) {
        Py_RETURN_NONE;
    }
    long long total = 0;
    int done = 0;
    Py_BEGIN_ALLOW_THREADS
    for (int r = 0; r < rounds; r++) {
        if (pause > 0) {
            struct timespec nap = {(time_t)pause, (long)((pause - (time_t)pause) * 1e9)};
            nanosleep(&nap, NULL);
        }
        if (!fm_begin()) {
            continue;
        }
        Gather g = {.threads = threads};
        atomic_init(&g.arrived, 0);
        fm_job job;
        memset(&job, 0, sizeof job);
        job.loop = gather;
        job.data = &g;
        job.n = threads;
        job.piece = 1;
        long long t0 = real_wall_ns();
        if (fm_start(&job, threads)) {
            fm_finish(&job);
        }
        total += real_wall_ns() - t0;
        done++;
        fm_end();
    }
    Py_END_ALLOW_THREADS
    if (done == 0) {
        Py_RETURN_NONE;
    }
    return PyFloat_FromDouble((double)total * 1e-9 / done);
}

static PyMethodDef methods[] = {
    {"unary", (PyCFunction)(void (*)(void))py_unary, METH_FASTCALL,
     "unary(loops, x, out, pace, min_split, piece, threads) -> NumPy's FP flag bits, or None\n"
     "where it cannot take the call: NumPy's loop for x's dtype (loops: (in dtype, out\n"
     "dtype, call info) from numpy.ufunc._get_strided_loop) over contiguous x (an array, or\n"
     "a tuple of one or two of one dtype: a two-argument ufunc's operands) into out,\n"
     "split over the pool (up to `threads` threads; 0: set_threads') from min_split\n"
     "elements when pacing record `pace` says a split wins, in pieces of `piece` elements\n"
     "(0: four a thread, at least 1024)"},
    {"finite", py_finite, METH_O,
     "finite(a) -> whether every element of a is finite (no inf, no NaN), or None where a\n"
     "is not a contiguous float32/float64 array; one read, split over the pool when long"},
    {"vml", py_vml, METH_VARARGS,
     "vml(fn, ins, out, mode, pace, min_split, threads, check, setter=0, status=0) -> bool,\n"
     "or None where it cannot take the call: VML's entry point at address fn (vmdExp_64 and\n"
     "the like: one or two inputs) over contiguous float32/float64 arrays of one order, in\n"
     "VML mode `mode`, split over the pool from min_split elements as pacing record `pace`\n"
     "says; setter, the address of the same library's MKL_Set_Num_Threads_Local, runs each\n"
     "piece in its thread alone; with check, whether the output may hold an inf or a NaN\n"
     "NumPy raises a flag for: looked for piece by piece while in cache, or, with status\n"
     "(the address of the library's vmlSetErrStatus; one input), VML's own status of each\n"
     "piece, the look only where it reports an error NumPy raises no flag for"},
    {"vector", py_vector, METH_VARARGS,
     "vector(fn, bits, x, out, pace, min_split, threads, check) -> bool, or None where it\n"
     "cannot take the call (this CPU lacks the instructions, or a layout vml() declines):\n"
     "the function at address fn of one SIMD register of `bits` (512: AVX-512, 256: AVX2;\n"
     "SLEEF's Sleef_log1pf16_u10avx512f and the like) over x into out, as vml() runs VML's;\n"
     "the tail through one register of zeros"},
    {"vml_entry", (PyCFunction)(void (*)(void))py_vml_entry, METH_FASTCALL,
     "vml_entry((fn, bits, mode, setter, pace, min_split, status), x, out, check) -> bool\n"
     "or None:\n"
     "vml() (bits 0) or vector() on one operand, the runtime's thread limit"},
    {"new_pace", py_new_pace, METH_NOARGS, "new_pace() -> a new pacing record's number"},
    {"free_pace", py_free_pace, METH_VARARGS,
     "free_pace(number): a record of new_pace()'s no longer used (its owner is gone)"},
    {"pace", py_pace, METH_VARARGS,
     "pace(number, n) -> {left, skip, since, kept, one_thread, last, every}: the back-off\n"
     "record of calls of about n elements (one_thread: seconds a whole call of n takes\n"
     "lately, or None; last: how the last ran, 'split', 'whole' or ''; every: the calls from\n"
     "one run kept whole to the next, 0 before the first)"},
    {"decide", py_decide, METH_VARARGS,
     "decide(pace, n) -> SPLIT (1), or WHOLE_PACED (2) / WHOLE_SAMPLED (3) / WHOLE_SHARED (4,\n"
     "other threads of the process calling too): whether a call of n elements splits now;\n"
     "time it and hand a whole run to kept(), a split to judge()"},
    {"resume", py_resume, METH_VARARGS,
     "resume(pace, n): calls of about n elements split again now (a pause after a lost\n"
     "split ends; the next one doubles as before)"},
    {"kept", py_kept, METH_VARARGS, "kept(pace, n, seconds): a whole run of n elements took this"},
    {"judge", py_judge, METH_VARARGS,
     "judge(pace, n, wall, alone, woke=False, came=UNKNOWN): a split of n elements took\n"
     "`wall` seconds; alone: what one thread would have taken (< 0: not measured); woke: it\n"
     "woke a parked worker (WOKE_ON_PURPOSE: one parked because workers were told to park\n"
     "at once, judged as any split); came: whether the pool's threads came (CAME; ABSENT:\n"
     "none, where a running one should have, judged neither way: workers then park at\n"
     "once for a while; UNSEEN: none, where none could be told to; UNKNOWN)"},
    {"set_threads", py_set_threads, METH_VARARGS, "set_threads(n): threads per call, 0: all cores"},
    {"threads", py_threads, METH_NOARGS, "threads per call, the caller included"},
    {"rest", py_rest, METH_NOARGS,
     "rest(): the workers spinning for the next call park now (the next call wakes them)"},
    {"foreign", py_foreign, METH_O,
     "foreign(seconds): another library's threads may spin this long after the call it\n"
     "just made (a split begun meanwhile is not judged lost; see foreign_left())"},
    {"foreign_left", py_foreign_left, METH_NOARGS,
     "foreign_left() -> seconds left of the spin foreign() announced (0.0: none)"},
    {"late", py_late, METH_NOARGS,
     "late() -> how many splits made by this thread began while a worker woken by an\n"
     "earlier call had not run yet (a wake-up takes up to a millisecond on a VM: such a\n"
     "split ran without it), or ran with the pool's threads taking under half their\n"
     "share of its pieces"},
    {"pause_seconds", py_pause_seconds, METH_NOARGS,
     "pause_seconds() -> the time of one pause instruction, the unit of spin loops"},
    {"set_spin", py_set_spin, METH_VARARGS,
     "set_spin(seconds) -> previous: how long a worker spins after a call before it parks"},
    {"set_pacing", py_set_pacing, METH_VARARGS,
     "set_pacing(bool) -> previous: splits back off while they lose (on by default)"},
    {"set_cpu_every", py_set_cpu_every, METH_VARARGS,
     "set_cpu_every(n) -> previous: the first split of a kernel and length, and one in n\n"
     "after, are also judged by the caller's CPU time for its pieces (a system call a\n"
     "reading)"},
    {"_set_clock", py_set_clock, METH_VARARGS,
     "_set_clock(wall, cpu): for tests, the pacing's clocks are these callables (seconds:\n"
     "the time, and the calling thread's CPU time); None, None puts the real ones back.\n"
     "Meanwhile a split no worker joined is judged by those clocks as any other"},
    {"set_shut_out", py_set_shut_out, METH_VARARGS,
     "set_shut_out(seconds) -> previous: how long workers park at once after a split whose\n"
     "running worker was shut out of its core"},
    {"registry", py_registry, METH_NOARGS,
     "registry() -> {path, why, slot, processes, warn}: the registry of the fastmath processes\n"
     "on this machine (path None where the runtime goes without it, `why` saying why; warn:\n"
     "the file there was not fastmath's registry, replaced or left alone), this\n"
     "process's slot there (None before its first call long enough to split), and how many\n"
     "other processes call now on CPUs this one may use"},
    {"set_shared", py_set_shared, METH_VARARGS,
     "set_shared(seconds) -> previous: how long after a call found the pool busy (another\n"
     "thread's) calls run whole or on fewer threads, beside the other threads' calls; the\n"
     "span in course ends (0: never)"},
    {"set_yield", (PyCFunction)(void (*)(void))py_set_yield, METH_VARARGS | METH_KEYWORDS,
     "set_yield(seconds, others=0.5, foreign=0.05, share=0.15, free=0.5) -> previous\n"
     "seconds: how long every call runs whole once a split found its worker shut out while\n"
     "the machine outside this process used `others` of a CPU, this process's threads\n"
     "other than the caller and the pool `foreign` of one, and either the calls the pacing\n"
     "saw took under `share` of the time or the CPUs this process may use, less those and\n"
     "the caller's one, came to under `free` (0 seconds: never)"},
    {"trace", py_trace, METH_VARARGS,
     "trace([on]) -> the pacing events recorded since tracing began, oldest first (at most\n"
     "65536): (kind 0 a run kept whole / 1 a split judged / 2 a run whole after a split,\n"
     "not kept, when (ns), n, wall (ns), alone\n"
     "(ns, -1: not read), whole (the record's estimate, ns), woke, came, lost, paused);\n"
     "with `on`, the record is emptied and tracing turned on or off"},
    {"stats", py_stats, METH_NOARGS,
     "stats() -> {workers, parks, joins, parked, spin, wakes, wake, moves, shut_out, yields,\n"
     "kept_yielding, yielding, looked, kept_shared, shared, shared_callers, processes}:\n"
     "threads started, times one parked, joined a call,\n"
     "parked now; the spin (s); wake-ups from parked and their mean time (s) from a call's\n"
     "start to the worker running; times one joined a call on its caller's CPU and moved\n"
     "off it; how long (s) workers still park at once (set_shut_out); times calls began to\n"
     "run whole to yield to an oversubscribed machine, calls run whole so, how long (s) that\n"
     "lasts, and the last look's (others, foreign, share, free) (set_yield; -1.0: none\n"
     "yet); calls run whole beside other threads of the process calling too, how long (s)\n"
     "that lasts, and how many such threads were seen; other fastmath processes calling\n"
     "now on CPUs this one may use (registry())"},
    {"fixed_cost", py_fixed_cost, METH_VARARGS,
     "fixed_cost(rounds, pause) -> seconds per parallel call whose threads each take one\n"
     "piece of no work (pause: seconds between calls; None: one thread, nothing splits)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "fastmath.dispatch._runtime",
    "fastmath's native thread pool and pacing (see fastmath/dispatch/_runtime.c).", -1, methods,
};

PyMODINIT_FUNC PyInit__runtime(void)
{
    import_array();
    import_umath();
    atomic_store(&nthreads, default_threads());
    pthread_once(&atfork_once, register_atfork);
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    reg_warn = registry_open(); /* warned of by dispatch/_parallel.py, at the user's line */
    PyObject *cap = PyCapsule_New(&api, FM_CAPSULE, NULL);
    if (cap == NULL || PyModule_AddObject(m, "_C_API", cap) < 0) {
        Py_XDECREF(cap);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "SPLIT", FM_SPLIT) < 0
            || PyModule_AddIntConstant(m, "WHOLE_PACED", FM_WHOLE_PACED) < 0
            || PyModule_AddIntConstant(m, "WHOLE_SHARED", FM_WHOLE_SHARED) < 0
            || PyModule_AddIntConstant(m, "WHOLE_SAMPLED", FM_WHOLE_SAMPLED) < 0
            || PyModule_AddIntConstant(m, "UNKNOWN", FM_UNKNOWN) < 0
            || PyModule_AddIntConstant(m, "ABSENT", FM_ABSENT) < 0
            || PyModule_AddIntConstant(m, "WOKE_ON_PURPOSE", FM_WOKE_ON_PURPOSE) < 0
            || PyModule_AddIntConstant(m, "CAME", FM_CAME) < 0
            || PyModule_AddIntConstant(m, "UNSEEN", FM_UNSEEN) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
