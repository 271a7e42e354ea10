/* The native replay of a captured kernel list (the cpu "graph") by a team of threads.
 *
 * xi_replay runs a whole op list (a decode step: ~200 kernels) in ONE OpenMP parallel region, so a
 * step costs one call from Python (cffi releases the GIL for it) and one fork/join. The list is
 * flattened into stages: each phase of a kernel with a share form (xi_common.h, "teams") is a
 * stage of independent units; a kernel without one is a stage of one unit (the whole kernel). Every
 * thread walks the stages in order: it waits until the previous stage is complete, then claims
 * units of this one from an atomic counter until none are left. Nothing is tied to a thread, so a
 * thread the OS preempts on shared cores holds up only the units it claimed: the others take the
 * rest (a static split would wait a whole time slice for it at every kernel).
 *
 * The cpu backend uses the team only with XINFER_CPU_TEAM=1 (xinfer_async/_omp.py says why); by
 * default xi_replay(plan, -1, ...) calls the kernels one by one, each opening its own region.
 *
 * A thread waiting for a stage spins at most XINFER_SPIN_US microseconds (default 20; less after
 * waits that had to sleep), then sleeps on a futex (an unbounded spin collapses when another
 * process competes for the cores).
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <omp.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "xi_common.h"

typedef struct {
    int op;     /* index in ops */
    int phase;  /* >= 0: a phase of the op's share form; XI_WHOLE: the kernel; XI_FAIL: its plan failed */
    int units;  /* independent units */
    int grain;  /* at least this many units a claim */
    int status; /* XI_FAIL: the plan's status */
} xi_stage;
#define XI_WHOLE (-1)
#define XI_FAIL (-2)

typedef struct {
    const char *name;
    xi_plan_fn plan;
    xi_run_fn run;
} xi_share_entry;

typedef struct {
    const xi_op *ops;
    int n, n_stages, any_share;
    size_t scratch; /* the largest plan's bytes */
    xi_stage stages[];
} xi_replay_plan;

typedef struct { /* one stage's counters: a cache line each */
    _Alignas(64) int claim;
    int done;
} xi_counter;

typedef struct {
    _Alignas(64) int sleepers; /* threads asleep on some stage's done */
    int status;                /* the first failure's status, set before its stage completes */
    int failed;                /* its op index */
} xi_team;

/* ------------------------------------------------------------------ */
/* spin bound */

static int spin_ns_value = -1;

static long spin_ns(void)
{
    int v = __atomic_load_n(&spin_ns_value, __ATOMIC_RELAXED);
    if (v < 0) {
        const char *s = getenv("XINFER_SPIN_US");
        long us = 20;
        if (s && *s) {
            char *end;
            const long given = strtol(s, &end, 10);
            if (*end == '\0' && given >= 0 && given <= 1000000) us = given;
        }
        v = (int)(us * 1000);
        __atomic_store_n(&spin_ns_value, v, __ATOMIC_RELAXED);
    }
    return v;
}

static inline long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* This thread's spin before it sleeps, adapted between an eighth of the bound and the bound: a wait
 * that had to sleep quarters it (the partner was not running: on oversubscribed cores a spin only
 * burns the time slice another thread needs), a wait that ends while spinning doubles it. */
static __thread long spin_cur = -1;

/* until *done == units: spin (bounded), then sleep. The completer raises done then reads sleepers,
 * the sleeper raises sleepers then reads done (seq_cst both): one of them sees the other. */
static void wait_done(xi_team *t, int *done, int units)
{
    if (__atomic_load_n(done, __ATOMIC_ACQUIRE) == units) return;
    const long bound = spin_ns(), floor = bound / 8;
    if (spin_cur < floor || spin_cur > bound) spin_cur = bound;
    long start = -1;
    for (unsigned i = 1; spin_cur > 0; i++) {
        if (__atomic_load_n(done, __ATOMIC_ACQUIRE) == units) {
            spin_cur = spin_cur * 2 + 1000 < bound ? spin_cur * 2 + 1000 : bound;
            return;
        }
        if ((i & 63) == 0) { /* a clock read every 64 pauses */
            const long now = now_ns();
            if (start < 0) start = now;
            else if (now - start >= spin_cur) break;
        }
        cpu_relax();
    }
    spin_cur = spin_cur / 4 > floor ? spin_cur / 4 : floor;
    __atomic_add_fetch(&t->sleepers, 1, __ATOMIC_SEQ_CST);
    int v;
    while ((v = __atomic_load_n(done, __ATOMIC_SEQ_CST)) != units)
        syscall(SYS_futex, done, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0);
    __atomic_sub_fetch(&t->sleepers, 1, __ATOMIC_SEQ_CST);
}

/* ------------------------------------------------------------------ */
/* scratch */

typedef struct {
    void *p;
    size_t n;
} xi_buf;

static __thread xi_buf thread_buf[2];   /* xi_thread_scratch */
static __thread xi_buf team_buf;        /* the team scratch of replays this thread leads */
static __thread xi_buf counter_buf;     /* their stage counters */

static void *grow(xi_buf *b, size_t nbytes)
{
    if (nbytes == 0) nbytes = 1;
    if (nbytes > b->n) {
        void *p = NULL;
        const size_t n = (nbytes + 63) & ~(size_t)63;
        if (posix_memalign(&p, 64, n) != 0) return NULL;
        free(b->p);
        b->p = p;
        b->n = n;
    }
    return b->p;
}

void *xi_thread_scratch(int slot, size_t nbytes)
{
    return grow(&thread_buf[slot & 1], nbytes);
}

/* ------------------------------------------------------------------ */
/* share forms by kernel name, registered by constructors at load (XI_REGISTER_SHARE) */

#define XI_SHARES 256
static xi_share_entry shares[XI_SHARES];
static int n_shares;

void xi_register_share(const char *name, xi_plan_fn plan, xi_run_fn run)
{
    int i = 0;
    while (i < n_shares && strcmp(shares[i].name, name) != 0) i++;
    if (i == XI_SHARES) return;
    shares[i] = (xi_share_entry){name, plan, run};
    if (i == n_shares) n_shares++;
}

void *xi_share_of(const char *name)
{
    for (int i = 0; i < n_shares; i++)
        if (strcmp(shares[i].name, name) == 0) return &shares[i];
    return NULL;
}

/* ------------------------------------------------------------------ */
/* the replay */

void *xi_replay_prepare(const xi_op *ops, int n)
{
    long n_stages = 0;
    for (int i = 0; i < n; i++) n_stages += ops[i].share ? XI_MAX_PHASES : 1;
    xi_replay_plan *r = (xi_replay_plan *)malloc(sizeof *r + (size_t)n_stages * sizeof(xi_stage));
    if (!r) return NULL;
    r->ops = ops;
    r->n = n;
    r->n_stages = 0;
    r->any_share = 0;
    r->scratch = 0;
    for (int i = 0; i < n; i++) {
        const xi_share_entry *e = (const xi_share_entry *)ops[i].share;
        xi_plan p;
        memset(&p, 0, sizeof p);
        int rc = XI_OK;
        if (e) {
            rc = e->plan(ops[i].c, &p);
            for (int ph = 0; rc == XI_OK && ph < p.phases; ph++)
                if (p.units[ph] < 0 || p.units[ph] > INT_MAX / 2) e = NULL; /* out of range: whole */
            if (rc == XI_OK && (p.phases < 1 || p.phases > XI_MAX_PHASES)) e = NULL;
        }
        xi_stage *st = &r->stages[r->n_stages];
        if (!e) {
            *st = (xi_stage){i, XI_WHOLE, 1, 1, XI_OK};
            r->n_stages++;
        } else if (rc != XI_OK) {
            *st = (xi_stage){i, XI_FAIL, 1, 1, rc};
            r->n_stages++;
        } else {
            r->any_share = 1;
            r->scratch = p.scratch > r->scratch ? p.scratch : r->scratch;
            for (int ph = 0; ph < p.phases; ph++) {
                if (p.units[ph] == 0) continue;
                r->stages[r->n_stages++] =
                    (xi_stage){i, ph, (int)p.units[ph], p.grain[ph] > 1 ? (int)p.grain[ph] : 1, XI_OK};
            }
        }
    }
    return r;
}

void xi_replay_free(void *plan)
{
    free(plan);
}

/* one thread's walk over the stages */
static void walk(const xi_replay_plan *r, xi_counter *cnt, void *scratch, xi_team *t, int nth)
{
    const xi_op *ops = r->ops;
    for (int s = 0; s < r->n_stages; s++) {
        const xi_stage *st = &r->stages[s];
        if (s > 0) wait_done(t, &cnt[s - 1].done, r->stages[s - 1].units);
        if (__atomic_load_n(&t->status, __ATOMIC_ACQUIRE)) return;
        const xi_op *op = &ops[st->op];
        const int units = st->units;
        /* alone: the phase in one call; in a team ~4 claims a thread (a claim of a q8 matrix product
         * quantizes its activations again, and each claim is an atomic on a shared line) */
        const int fair = nth <= 1 ? units : (units + 4 * nth - 1) / (4 * nth);
        const int grain = st->grain > fair ? st->grain : fair;
        for (;;) {
            const int u0 = __atomic_fetch_add(&cnt[s].claim, grain, __ATOMIC_RELAXED);
            if (u0 >= units) break;
            const int u1 = u0 + grain < units ? u0 + grain : units;
            if (st->phase >= 0) {
                ((const xi_share_entry *)op->share)->run(op->b, op->c, scratch, st->phase, u0, u1);
            } else {
                const int rc = st->phase == XI_WHOLE ? op->kernel(op->b, op->c) : st->status;
                if (rc) { /* one unit: only this thread writes these */
                    t->failed = st->op;
                    __atomic_store_n(&t->status, rc, __ATOMIC_RELEASE);
                }
            }
            if (__atomic_add_fetch(&cnt[s].done, u1 - u0, __ATOMIC_SEQ_CST) == units &&
                __atomic_load_n(&t->sleepers, __ATOMIC_SEQ_CST))
                syscall(SYS_futex, &cnt[s].done, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
        }
    }
}

int xi_replay(const void *plan, int nthreads, int *failed)
{
    const xi_replay_plan *r = (const xi_replay_plan *)plan;
    if (!r->any_share || nthreads < 0) { /* each kernel alone, opening its own parallel region */
        for (int i = 0; i < r->n; i++) {
            const int rc = r->ops[i].kernel(r->ops[i].b, r->ops[i].c);
            if (rc) {
                if (failed) *failed = i;
                return rc;
            }
        }
        return XI_OK;
    }
    xi_counter *cnt = (xi_counter *)grow(&counter_buf, (size_t)(r->n_stages > 0 ? r->n_stages : 1) * sizeof(xi_counter));
    void *scratch = grow(&team_buf, r->scratch);
    if (!cnt || !scratch) { /* fails where the first op needing memory would */
        for (int s = 0; s < r->n_stages; s++)
            if (!cnt || r->stages[s].phase >= 0) {
                if (failed) *failed = r->stages[s].op;
                return XI_ENOMEM;
            }
    }
    memset(cnt, 0, (size_t)r->n_stages * sizeof(xi_counter));
    xi_team t;
    memset(&t, 0, sizeof t);
    const int nth = omp_in_parallel() ? 1 : nthreads > 0 ? nthreads : omp_get_max_threads();
    if (nth <= 1) {
        walk(r, cnt, scratch, &t, 1);
    } else {
#pragma omp parallel num_threads(nth)
        walk(r, cnt, scratch, &t, omp_get_num_threads());
    }
    if (t.status && failed) *failed = t.failed;
    return t.status;
}
