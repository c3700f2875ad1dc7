/* onef1b_loop.c - a hand-written two-rank 1F1B loop without the pipeline runtime: the
 * baseline of bench_runtime.sh's synthetic benchmark ("what the hardware gives").
 *
 * Two threads run the stdlib `onef1b` schedule for P = 2 stages and M micro-batches:
 *   rank 0: F0, then F(i+1) B(i) for i = 0..M-2, then B(M-1)
 *   rank 1: F(i) B(i) for i = 0..M-1
 * F(i) of rank 1 waits for F(i) of rank 0, B(i) of rank 0 for B(i) of rank 1. Every op
 * busy-waits its time on the monotonic clock (as the synthetic workload does); a
 * dependency is one atomic counter the producer increments and the consumer waits on
 * with the runtime's scheme (an adaptive spin, then a condition variable that the
 * producer signals only when the consumer sleeps), but none of the runtime's
 * bookkeeping: no op table, arena accounting, flight recorder, spans or message
 * queues. The difference to the runtime's iteration time is the runtime's own cost. Each iteration starts both threads at a barrier and ends
 * when both are done; the main thread times that window, as the runtime's iter_ms.
 *
 * Usage: onef1b_loop M F_US B_US ITERS
 * Prints "iter N: time X ms" per iteration. Exit 0, or 2 on a usage error. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int M, ITERS;
static double F_MS, B_MS;
static atomic_int f_done, b_done; /* F ops of rank 0, B ops of rank 1, this iteration */
static pthread_barrier_t start, end;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void busy(double ms)
{
    double t_end = now_ms() + ms;
    while (now_ms() < t_end)
        ;
}

/* The runtime's hand-off (cpu.c chan_wait), without its bookkeeping: the waiting
 * rank spins on the counter for its adaptive budget (doubled, up to SPIN_MS, after a
 * wait whose value came within SPIN_MS of its start, whether or not it blocked; halved,
 * down to SPIN_MIN_MS, after a longer one), then blocks on its own condition variable;
 * the producer signals a waiter only when its flag says it sleeps. */
#define SPIN_MS 0.1
#define SPIN_MIN_MS 0.001
typedef struct Bell {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_int sleeping;
    double spin_ms;
} Bell;
static Bell bell[2] = {{PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, SPIN_MS},
                       {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, SPIN_MS}};
static double *f_at, *b_at; /* [M] when F(i) of rank 0 / B(i) of rank 1 was signalled, ms */

static void adapt(Bell *b, double waited)
{
    if (waited <= SPIN_MS)
        b->spin_ms = b->spin_ms * 2 < SPIN_MS ? b->spin_ms * 2 : SPIN_MS;
    else if (b->spin_ms > SPIN_MIN_MS)
        b->spin_ms /= 2;
}

static clockid_t cpu_clock[2]; /* each rank thread's CPU-time clock */

static double cpu_ms(int rank)
{
    struct timespec ts;
    clock_gettime(cpu_clock[rank], &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Rank `me` waits until *x >= n; at[n - 1] is when the producer made it so. As the
 * runtime does, the spin also ends when the producer got under half the CPU time of
 * the last 10 us (it is not running). */
static void wait_for(int me, atomic_int *x, int n, const double *at)
{
    Bell *b = &bell[me];
    double t_wait = now_ms(), spin_end = t_wait + b->spin_ms, w_wall = t_wait;
    double w_cpu = cpu_ms(1 - me);
    for (unsigned k = 1; atomic_load(x) < n; k++) {
        if (!(k & 15)) {
            double t = now_ms();
            if (t > spin_end)
                break;
            if (t - w_wall >= 0.01) {
                double c = cpu_ms(1 - me);
                if (c - w_cpu < 0.5 * (t - w_wall))
                    break;
                w_wall = t;
                w_cpu = c;
            }
        }
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    }
    if (atomic_load(x) >= n) {
        adapt(b, 0);
        return;
    }
    pthread_mutex_lock(&b->mu);
    atomic_store(&b->sleeping, 1);
    while (atomic_load(x) < n)
        pthread_cond_wait(&b->cv, &b->mu);
    atomic_store(&b->sleeping, 0);
    pthread_mutex_unlock(&b->mu);
    adapt(b, at[n - 1] - t_wait);
}

/* at[*x] = now, *x += 1, and wakes rank `peer` if it sleeps. */
static void signal_done(int peer, atomic_int *x, double *at)
{
    at[atomic_load_explicit(x, memory_order_relaxed)] = now_ms();
    atomic_fetch_add(x, 1);
    Bell *b = &bell[peer];
    if (atomic_load(&b->sleeping)) {
        pthread_mutex_lock(&b->mu);
        pthread_mutex_unlock(&b->mu);
        pthread_cond_signal(&b->cv);
    }
}

/* F (fwd) or B of micro-batch i on `rank`: F's output flows from rank 0 to rank 1,
 * B's gradient back. */
static void op(int rank, int i, bool fwd)
{
    int src = fwd ? 0 : 1;
    atomic_int *done = fwd ? &f_done : &b_done;
    double *at = fwd ? f_at : b_at;
    if (rank != src)
        wait_for(rank, done, i + 1, at);
    busy(fwd ? F_MS : B_MS);
    if (rank == src)
        signal_done(1 - src, done, at);
}

static void *rank_main(void *arg)
{
    int rank = (int)(size_t)arg;
    pthread_getcpuclockid(pthread_self(), &cpu_clock[rank]);
    pthread_barrier_wait(&start); /* both clocks are set */
    for (int it = 0; it < ITERS; it++) {
        pthread_barrier_wait(&start);
        if (rank == 0) {
            op(0, 0, true);
            for (int i = 0; i + 1 < M; i++) {
                op(0, i + 1, true);
                op(0, i, false);
            }
            op(0, M - 1, false);
        } else {
            for (int i = 0; i < M; i++) {
                op(1, i, true);
                op(1, i, false);
            }
        }
        pthread_barrier_wait(&end);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 5 || (M = atoi(argv[1])) < 1 || (ITERS = atoi(argv[4])) < 1) {
        fprintf(stderr, "usage: onef1b_loop M F_US B_US ITERS\n");
        return 2;
    }
    f_at = calloc((size_t)M, sizeof *f_at);
    b_at = calloc((size_t)M, sizeof *b_at);
    if (!f_at || !b_at) {
        fprintf(stderr, "onef1b_loop: out of memory\n");
        return 1;
    }
    F_MS = atof(argv[2]) * 1e-3;
    B_MS = atof(argv[3]) * 1e-3;
    pthread_barrier_init(&start, NULL, 3);
    pthread_barrier_init(&end, NULL, 3);
    pthread_t th[2];
    for (int r = 0; r < 2; r++)
        if (pthread_create(&th[r], NULL, rank_main, (void *)(size_t)r) != 0) {
            fprintf(stderr, "onef1b_loop: cannot start a thread\n");
            return 1;
        }
    pthread_barrier_wait(&start);
    for (int it = 0; it < ITERS; it++) {
        atomic_store(&f_done, 0);
        atomic_store(&b_done, 0);
        double t0 = now_ms();
        pthread_barrier_wait(&start);
        pthread_barrier_wait(&end);
        printf("iter %d: time %.4f ms\n", it + 1, now_ms() - t0);
    }
    for (int r = 0; r < 2; r++)
        pthread_join(th[r], NULL);
    pthread_barrier_destroy(&start);
    pthread_barrier_destroy(&end);
    free(f_at);
    free(b_at);
    return 0;
}
