/* doctor_env.c: `sharc doctor --env`, the environment of a job checked
 * before it trains, run under the same launcher and hosts as the training
 * (note [doctor-env] in docs/ARCHITECTURE.md). Every rank collects what it
 * sees (host, CPUs, memory, /dev/shm, free disk under a directory, open-file
 * limit, the BLAS it loaded, a checksum of its sharc binary, its clock);
 * rank 0 prints one line per host, the measured all-reduce bandwidth inside
 * each host and between hosts, and a line per problem found:
 *   - ranks running different sharc binaries (a host not updated);
 *   - the ranks of a host not consecutive (HYBRID_SHARD's groups would span
 *     hosts: `--map-by slot`, Slurm's block distribution);
 *   - more threads than CPUs on a host (oversubscribed ranks);
 *   - host clocks apart by more than 0.5 s (timestamps of metrics and flight
 *     records are compared across hosts).
 * Hosts with different numbers of ranks are a note, not a problem (only
 * HYBRID_SHARD with fsdp_size = ranks per host needs them equal).
 * Exit status: 0 no problem, 1 a problem, 2 bad arguments. */
#include "doctor.h"
#include "sharc/blas.h"
#include "sharc/comm.h"
#include "sharc/status.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#define CLOCK_ROUNDS 5
#define SKEW_LIMIT_S 0.5

/* What one rank sees; all-gathered as bytes, so plain data only. */
typedef struct {
    char host[64];
    char blas[16];
    char version[16];
    int32_t cpus, online, threads, node_rank, node_size;
    uint32_t exe_crc;
    int64_t exe_bytes, mem_total, mem_avail, shm_free, disk_free, nofile;
    double clock[CLOCK_ROUNDS]; /* CLOCK_REALTIME right after a barrier */
} env_facts;

static int64_t meminfo(const char *key) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return -1;
    char line[256];
    long long kb = -1;
    size_t L = strlen(key);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, L) && line[L] == ':') {
            kb = atoll(line + L + 1);
            break;
        }
    fclose(f);
    return kb < 0 ? -1 : (int64_t)kb * 1024;
}

static int64_t fs_free(const char *path) {
    struct statvfs s;
    if (statvfs(path, &s) != 0) return -1;
    return (int64_t)s.f_bavail * (int64_t)s.f_frsize;
}

/* crc32 of this process's executable: equal binaries, equal sums. */
static void exe_sum(uint32_t *crc, int64_t *bytes) {
    *crc = 0;
    *bytes = -1;
    FILE *f = fopen("/proc/self/exe", "rb");
    if (!f) return;
    static unsigned char buf[1 << 16];
    uLong c = crc32(0L, Z_NULL, 0);
    int64_t n = 0;
    for (size_t k; (k = fread(buf, 1, sizeof buf, f)) > 0; n += (int64_t)k) c = crc32(c, buf, (uInt)k);
    fclose(f);
    *crc = (uint32_t)c;
    *bytes = n;
}

static double realtime(int rank) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double t = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    /* test hook: SHARC_TEST_CLOCK_SKEW=RANK:SECONDS shifts that rank's clock */
    const char *h = getenv("SHARC_TEST_CLOCK_SKEW");
    int r;
    double s;
    if (h && sscanf(h, "%d:%lf", &r, &s) == 2 && r == rank) t += s;
    return t;
}

/* Best-of-3 all-reduce bus bandwidth in GB/s over c (2 (n-1)/n x bytes /
 * time, NCCL's convention), or 0 for a group of one. Collective over c. */
static double bus_bandwidth(sharc_comm *c, float *buf, size_t count) {
    int n = sharc_comm_size(c);
    if (n < 2) return 0.0;
    double best = INFINITY;
    for (int k = 0; k < 4; k++) {
        sharc_comm_barrier(c);
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        if (sharc_comm_all_reduce(c, buf, buf, count, SHARC_DT_F32, SHARC_REDUCE_OP_SUM) != SHARC_OK) return -1.0;
        clock_gettime(CLOCK_MONOTONIC, &b);
        double dt = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
        if (k > 0 && dt < best) best = dt; /* the first is a warm-up */
    }
    double mx = best;
    sharc_comm_all_reduce(c, &mx, &mx, 1, SHARC_DT_F64, SHARC_REDUCE_OP_MAX);
    return 2.0 * (double)(n - 1) / (double)n * (double)count * sizeof(float) / mx * 1e-9;
}

static void gib(char *out, size_t n, int64_t b) {
    if (b < 0) snprintf(out, n, "?");
    else snprintf(out, n, "%.1f GiB", (double)b / (double)(1LL << 30));
}

static int report(const env_facts *all, int R, int hosts, size_t bytes, double bw_world, double bw_node,
                  double bw_cross);

int sharc_doctor_env(const sharc_doctor_env_plan *p, sharc_comm *world) {
    const int R = sharc_comm_size(world), rank = sharc_comm_rank(world);
    sharc_comm *node = NULL;
    if (sharc_comm_split_node(world, &node) != SHARC_OK || !node) {
        fprintf(stderr, "doctor: cannot tell which ranks share a host: %s\n", sharc_last_error());
        return 1;
    }
    env_facts me;
    memset(&me, 0, sizeof me);
    if (gethostname(me.host, sizeof me.host - 1) != 0) snprintf(me.host, sizeof me.host, "?");
    me.cpus = sharc_cpus_available();
    me.node_rank = sharc_comm_rank(node);
    me.node_size = sharc_comm_size(node);
    /* the threads sharc train would use by default (train.threads = 0) */
    const char *omp = getenv("OMP_NUM_THREADS");
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    me.online = online > 0 ? (int32_t)online : me.cpus;
    int th = omp && atoi(omp) > 0 ? atoi(omp) : me.cpus;
    if (!omp && me.node_size > 1 && online > 0 && me.cpus >= online) th = me.cpus / me.node_size;
    me.threads = th > 1 ? th : 1;
    if (sharc_blas_init(me.threads) == SHARC_OK) snprintf(me.blas, sizeof me.blas, "%s", sharc_blas_get_info()->gemm);
    else snprintf(me.blas, sizeof me.blas, "none");
    snprintf(me.version, sizeof me.version, "%s", p->version);
    exe_sum(&me.exe_crc, &me.exe_bytes);
    me.mem_total = meminfo("MemTotal");
    me.mem_avail = meminfo("MemAvailable");
    me.shm_free = fs_free("/dev/shm");
    me.disk_free = fs_free(p->dir);
    struct rlimit rl;
    me.nofile = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? (rl.rlim_cur == RLIM_INFINITY ? -1 : (int64_t)rl.rlim_cur) : 0;
    for (int k = 0; k < CLOCK_ROUNDS; k++) {
        sharc_comm_barrier(world);
        me.clock[k] = realtime(rank);
    }
    env_facts *all = calloc((size_t)R, sizeof *all);
    if (!all) {
        fprintf(stderr, "doctor: out of memory\n");
        sharc_comm_free(node);
        return 1;
    }
    sharc_status st = sharc_comm_all_gather(world, &me, all, sizeof me, SHARC_DT_U8);

    /* bandwidth: the world, inside each host, and between hosts (one rank per host) */
    size_t count = p->bytes / sizeof(float);
    float *buf = st == SHARC_OK ? calloc(count ? count : 1, sizeof(float)) : NULL;
    double bw_world = 0, bw_node = 0, bw_cross = 0;
    int hosts = 0;
    for (int r = 0; r < R; r++) hosts += all[r].node_rank == 0;
    sharc_comm *leaders = NULL;
    if (buf) {
        bw_world = bus_bandwidth(world, buf, count);
        bw_node = bus_bandwidth(node, buf, count); /* every host at once */
        sharc_comm_all_reduce(world, &bw_node, &bw_node, 1, SHARC_DT_F64, SHARC_REDUCE_OP_MIN);
        if (hosts > 1 && sharc_comm_split(world, me.node_rank == 0 ? 0 : 1, rank, &leaders) == SHARC_OK) {
            double b = bus_bandwidth(leaders, buf, count); /* the others time their own group, unused */
            double bw = me.node_rank == 0 ? b : 0.0;
            sharc_comm_all_reduce(world, &bw, &bw, 1, SHARC_DT_F64, SHARC_REDUCE_OP_MAX);
            bw_cross = bw;
            sharc_comm_free(leaders);
        }
    }
    free(buf);
    sharc_comm_free(node);
    if (st != SHARC_OK) {
        free(all);
        fprintf(stderr, "doctor: %s\n", sharc_last_error());
        return 1;
    }
    int32_t problems = rank == 0 ? report(all, R, hosts, p->bytes, bw_world, bw_node, bw_cross) : 0;
    free(all);
    if (sharc_comm_broadcast(world, &problems, 1, SHARC_DT_I32, 0) != SHARC_OK) return 1;
    return problems ? 1 : 0;
}

/* Rank 0: the table and the problems; returns how many. */
static int report(const env_facts *all, int R, int hosts, size_t bytes, double bw_world, double bw_node,
                  double bw_cross) {
    const env_facts *me = &all[0];

    printf("doctor --env: %d ranks on %d host%s (sharc %s)\n", R, hosts, hosts == 1 ? "" : "s", me->version);
    printf("%-20s %-9s %5s %7s %11s %11s %11s %11s %8s %-8s\n", "host", "ranks", "cpus", "threads", "memory",
           "available", "/dev/shm", "disk free", "nofile", "blas");
    for (int r = 0; r < R; r++) {
        if (all[r].node_rank != 0) continue;
        int last = r;
        for (int q = r + 1; q < R; q++)
            if (!strcmp(all[q].host, all[r].host)) last = q;
        char ranks[32], a[24], b[24], c[24], d[24];
        snprintf(ranks, sizeof ranks, all[r].node_size == 1 ? "%d" : "%d-%d", r, last);
        gib(a, sizeof a, all[r].mem_total);
        gib(b, sizeof b, all[r].mem_avail);
        gib(c, sizeof c, all[r].shm_free);
        gib(d, sizeof d, all[r].disk_free);
        printf("%-20s %-9s %5d %7d %11s %11s %11s %11s %8lld %-8s\n", all[r].host, ranks, all[r].online,
               all[r].threads * all[r].node_size, a, b, c, d, (long long)all[r].nofile, all[r].blas);
    }
    if (R == 1) printf("all-reduce bandwidth: not measured (one rank)");
    else printf("all-reduce of %.1f MiB, bus bandwidth: world %.2f GB/s", (double)bytes / (1 << 20), bw_world);
    if (R > hosts) printf(", inside a host %.2f GB/s (slowest host)", bw_node);
    if (hosts > 1) printf(", between hosts %.2f GB/s (one rank per host)", bw_cross);
    printf("\n");

    int problems = 0;
    /* the same binary everywhere */
    for (int r = 1; r < R; r++)
        if (all[r].exe_crc != all[0].exe_crc || all[r].exe_bytes != all[0].exe_bytes) {
            printf("problem: rank %d on %s runs another sharc binary than rank 0 on %s (crc32 %08x, %lld bytes vs "
                   "%08x, %lld bytes): install the same build on every host\n",
                   r, all[r].host, all[0].host, all[r].exe_crc, (long long)all[r].exe_bytes, all[0].exe_crc,
                   (long long)all[0].exe_bytes);
            problems++;
        }
    /* consecutive ranks per host */
    for (int r = 1; r < R; r++)
        if (strcmp(all[r].host, all[r - 1].host) != 0)
            for (int q = 0; q < r - 1; q++)
                if (!strcmp(all[q].host, all[r].host)) {
                    printf("problem: the ranks of host %s are not consecutive (rank %d, then rank %d after ranks of "
                           "other hosts): HYBRID_SHARD's shard groups would span hosts; launch with --map-by slot "
                           "(Open MPI) or --distribution=block (Slurm)\n",
                           all[r].host, q, r);
                    problems++;
                    q = r;
                    r = R;
                }
    /* threads against the host's CPUs */
    for (int r = 0; r < R; r++) {
        if (all[r].node_rank != 0) continue;
        long long th = 0;
        for (int q = 0; q < R; q++)
            if (!strcmp(all[q].host, all[r].host)) th += all[q].threads;
        if (th > all[r].online) {
            printf("problem: host %s runs %lld threads on %d CPUs (%d ranks): set train.threads or "
                   "OMP_NUM_THREADS to at most %d per rank\n",
                   all[r].host, th, all[r].online, all[r].node_size,
                   all[r].online / all[r].node_size > 0 ? all[r].online / all[r].node_size : 1);
            problems++;
        }
    }
    /* clocks: per rank the median over rounds of its offset from rank 0 */
    double worst = 0.0;
    int worst_rank = 0;
    for (int r = 1; r < R; r++) {
        double off[CLOCK_ROUNDS];
        for (int k = 0; k < CLOCK_ROUNDS; k++) off[k] = all[r].clock[k] - all[0].clock[k];
        for (int i = 1; i < CLOCK_ROUNDS; i++)
            for (int j = i; j > 0 && off[j] < off[j - 1]; j--) {
                double t = off[j];
                off[j] = off[j - 1];
                off[j - 1] = t;
            }
        double m = off[CLOCK_ROUNDS / 2];
        if (fabs(m) > fabs(worst)) worst = m, worst_rank = r;
    }
    printf("clocks: largest offset from rank 0 %+.3f s (rank %d on %s)\n", worst, worst_rank, all[worst_rank].host);
    if (fabs(worst) > SKEW_LIMIT_S) {
        printf("problem: the clock of %s is %+.3f s off rank 0's (%s): metrics and flight records are compared "
               "across hosts; synchronise the clocks (chrony, NTP)\n",
               all[worst_rank].host, worst, all[0].host);
        problems++;
    }
    /* notes */
    for (int r = 0; r < R; r++)
        if (all[r].node_rank == 0 && all[r].node_size != all[0].node_size) {
            printf("note: hosts run different numbers of ranks (%s %d, %s %d): HYBRID_SHARD with fsdp_size = ranks "
                   "per host needs them equal\n",
                   all[0].host, all[0].node_size, all[r].host, all[r].node_size);
            break;
        }
    if (problems) printf("verdict: %d problem%s\n", problems, problems == 1 ? "" : "s");
    else printf("verdict: no problems found\n");
    fflush(stdout);
    return problems;
}
