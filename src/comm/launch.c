/* launch.c: sharc/launch.h: torchrun-style environments (WORLD_SIZE, RANK,
 * MASTER_ADDR, MASTER_PORT) against the MPI launch sharc runs under.
 *
 * Note [torchrun-env]. torchrun starts every process itself and lets them
 * meet at MASTER_ADDR:MASTER_PORT; an MPI job is started by its launcher
 * (mpirun, srun), which wires the processes before main() runs. Open MPI
 * cannot join independently started processes into one world without a
 * launcher, so sharc does not try: processes told they are one of several
 * with no MPI launcher around are refused (each would otherwise train
 * alone, on the whole batch, writing the same files), with the commands
 * that start the same job under MPI. Under an MPI launcher the variables
 * may be set too (a cluster's scripts often export them); they must then
 * agree with MPI. */
#include "sharc/launch.h"
#include "comm_impl.h"
#include "sharc/device.h"

#include <stdlib.h>
#include <string.h>

/* 1 if the variable is a decimal integer (into *v), 0 if unset, -1 if malformed. */
static int env_int(const char *name, long *v) {
    const char *s = getenv(name);
    if (!s) return 0;
    char *end;
    long x = strtol(s, &end, 10);
    if (!*s || *end) return -1;
    *v = x;
    return 1;
}

/* A multi-process backend's launcher started this process (or SHARC_COMM
 * names such a backend): the registry's probes, every backend but self. */
static bool launcher_present(void) {
    const char *force = getenv("SHARC_COMM");
    for (int i = 0; sharc_comm_backends[i]; i++) {
        const sharc_comm_backend_i *b = sharc_comm_backends[i];
        if (b == &sharc_comm_backend_self) continue;
        if (force ? strcmp(force, b->name) == 0 : b->probe()) return true;
    }
    return false;
}

sharc_status sharc_launch_check_env(void) {
    long ws = 1, rk = 0;
    int has_ws = env_int("WORLD_SIZE", &ws);
    if (has_ws < 0)
        return sharc_error(SHARC_ERR_INVALID, "launch: WORLD_SIZE='%s' is not an integer", getenv("WORLD_SIZE"));
    if (env_int("RANK", &rk) < 0)
        return sharc_error(SHARC_ERR_INVALID, "launch: RANK='%s' is not an integer", getenv("RANK"));
    if (launcher_present() || has_ws == 0 || ws <= 1) return SHARC_OK;
    const char *addr = getenv("MASTER_ADDR"), *port = getenv("MASTER_PORT");
    return sharc_error(
        SHARC_ERR_INVALID,
        "launch: WORLD_SIZE=%ld RANK=%ld%s%s%s%s (a torchrun-style launch) but no MPI launcher: sharc's ranks are MPI "
        "processes and do not meet at MASTER_ADDR:MASTER_PORT. Start the whole job with one command instead: "
        "`mpirun -n %ld --hostfile HOSTS sharc train ...` (Open MPI; HOSTS has one line per host, "
        "`HOSTNAME slots=RANKS_PER_HOST`), `srun -n %ld sharc train ...` (Slurm), or on one machine "
        "`sharc launch -n %ld train ...`",
        ws, rk, addr ? " MASTER_ADDR=" : "", addr ? addr : "", port ? " MASTER_PORT=" : "", port ? port : "", ws, ws,
        ws);
}

sharc_status sharc_launch_check_world(sharc_comm *world) {
    const int R = sharc_comm_size(world), r = sharc_comm_rank(world);
    long ws = R, rk = r;
    sharc_status st = SHARC_OK;
    if (env_int("WORLD_SIZE", &ws) < 0 || env_int("RANK", &rk) < 0)
        st = sharc_error(SHARC_ERR_INVALID, "launch: WORLD_SIZE='%s' / RANK='%s': expected integers",
                         getenv("WORLD_SIZE") ? getenv("WORLD_SIZE") : "", getenv("RANK") ? getenv("RANK") : "");
    else if (ws != R)
        st = sharc_error(SHARC_ERR_INVALID,
                         "launch: WORLD_SIZE=%ld but MPI started %d rank%s; sharc takes rank and size from MPI: unset "
                         "WORLD_SIZE and RANK, or start %ld ranks",
                         ws, R, R == 1 ? "" : "s", ws);
    else if (rk != r)
        st = sharc_error(SHARC_ERR_INVALID,
                         "launch: RANK=%ld but this is MPI rank %d of %d; sharc takes rank and size from MPI: unset "
                         "RANK and WORLD_SIZE, or set RANK from the launcher (OMPI_COMM_WORLD_RANK, SLURM_PROCID)",
                         rk, r, R);
    return sharc_comm_agree(world, st, SHARC_ERR_INVALID,
                            "launch: rank %d's WORLD_SIZE/RANK disagree with MPI (its message says how)");
}

int sharc_launch_local_rank(void) {
    const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        long v;
        if (env_int(vars[i], &v) == 1 && v >= 0 && v < (1L << 20)) return (int)v;
    }
    return 0;
}

int sharc_launch_device_index(const char *name) {
    int n = sharc_device_count(name);
    return n > 0 ? sharc_launch_local_rank() % n : 0;
}
