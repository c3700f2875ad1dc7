/* mpi_pingpong.c - the baseline of the MPI transport's per-message latency in
 * bench/bench_runtime.sh: a plain MPI_Send/MPI_Recv ping-pong between processes 0 and 1
 * with messages of the transport's header size (16 bytes: a token message).
 *
 *     mpicc -std=c11 -O2 -o mpi_pingpong bench/mpi_pingpong.c
 *     mpirun -np 2 ./mpi_pingpong [ROUNDS [BYTES]]
 *
 * Process 0 sends, process 1 answers; after 1000 warm-up round trips, ROUNDS (default
 * 20000) are timed. Prints "one-way X us" = round-trip time / 2, the latency one
 * message of a pipeline's critical path costs. */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int me, np;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    int rounds = argc > 1 ? atoi(argv[1]) : 20000;
    int bytes = argc > 2 ? atoi(argv[2]) : 16;
    if (np != 2 || rounds < 1 || bytes < 1) {
        if (me == 0)
            fprintf(stderr, "usage: mpirun -np 2 %s [ROUNDS [BYTES]]\n", argv[0]);
        MPI_Finalize();
        return 2;
    }
    char *buf = calloc((size_t)bytes, 1);
    if (!buf)
        MPI_Abort(MPI_COMM_WORLD, 1);
    double t0 = 0;
    for (int i = -1000; i < rounds; i++) {
        if (i == 0)
            t0 = MPI_Wtime();
        if (me == 0) {
            MPI_Send(buf, bytes, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
            MPI_Recv(buf, bytes, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(buf, bytes, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, bytes, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
        }
    }
    double t = MPI_Wtime() - t0;
    if (me == 0)
        printf("one-way %.3f us\n", t / rounds / 2 * 1e6);
    free(buf);
    MPI_Finalize();
    return 0;
}
