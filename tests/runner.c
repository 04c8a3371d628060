/* runner.c: the test runner. Runs every registered TEST, and every script in
 * --scripts DIR, each in its own process group under a timeout (a hang is a
 * failure), shows the output of failing tests, and ends with
 * "N passed, N failed".
 *
 *   sharc_tests [--filter SUBSTR] [--list] [--one NAME] [--scripts DIR]
 *               [--bin DIR] [--timeout-scale K]
 *
 * A script may set its own timeout with a line "# timeout: SECONDS" (scaled
 * by --timeout-scale, which scripts see as SHARC_TIMEOUT_SCALE: their inner
 * `timeout N` is scaled by tests/cli/timeout_lib.inc). A test
 * or script that exits with status 77 (TEST_SKIP in test.h) is reported as
 * skipped, with the last line it printed. */

#include "test.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_TESTS    2048
#define UNIT_TIMEOUT 120.0

typedef struct {
    const char *name;
    sharc_test_fn fn;
    const char *file;
} test_entry;

static test_entry tests[MAX_TESTS];
static int ntests;
static char bin_dir[PATH_MAX] = "build";
static char tmp_dir[PATH_MAX];

void sharc_test_register(const char *name, sharc_test_fn fn, const char *file) {
    if (ntests < MAX_TESTS) tests[ntests++] = (test_entry){name, fn, file};
}

const char *sharc_test_fixture_dir(void) {
    const char *d = getenv("SHARC_FIXTURES");
    return d ? d : "tests/fixtures";
}

const char *sharc_test_bin_dir(void) { return bin_dir; }

const char *sharc_test_tmpdir(void) {
    const char *d = getenv("SHARC_TEST_TMP");
    return d ? d : "/tmp";
}

long long sharc_test_allclose(const float *a, const float *b, long long n, double rtol, double atol) {
    long long worst = -1;
    double worst_excess = 0.0;
    for (long long i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        double tol = atol + rtol * fabs((double)b[i]);
        double excess = (d - tol) / (tol > 0 ? tol : 1.0);
        if (!(d <= tol) && (worst < 0 || excess > worst_excess || isnan(d))) {
            worst = i;
            worst_excess = isnan(d) ? INFINITY : excess;
        }
    }
    return worst;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void remove_tree(const char *path) {
    char cmd[PATH_MAX + 32];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0) fprintf(stderr, "runner: could not remove %s\n", path);
}

static int nskipped;

/* The last non-empty line of a file (a skipped test's reason). */
static void last_line(const char *path, char *out, size_t n) {
    FILE *f = fopen(path, "r");
    char line[1024];
    out[0] = 0;
    if (!f) return;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (line[0]) snprintf(out, n, "%s", line);
    }
    fclose(f);
}

/* Run one test or script in a child process; returns 1 if it passed (or
 * was skipped, counted in nskipped). */
static int run_child(const char *label, const test_entry *t, const char *script, double timeout) {
    char dir[] = "/tmp/sharc-test-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 0;
    }
    char log_path[PATH_MAX];
    snprintf(log_path, sizeof log_path, "%s.log", dir);
    double t0 = now();
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        setenv("SHARC_TEST_TMP", dir, 1);
        setenv("TMPDIR", dir, 1);
        if (t) {
            t->fn();
            fflush(NULL);
            _exit(0);
        }
        execlp("bash", "bash", script, (char *)NULL);
        _exit(127);
    }
    setpgid(pid, pid);
    int status = 0, timed_out = 0;
    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) break;
        if (r < 0 && errno != EINTR) break;
        if (now() - t0 > timeout) {
            kill(-pid, SIGKILL);
            waitpid(pid, &status, 0);
            timed_out = 1;
            break;
        }
        usleep(2000);
    }
    kill(-pid, SIGKILL); /* anything the test left running in its group */
    double dt = now() - t0;
    int ok = !timed_out && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!timed_out && WIFEXITED(status) && WEXITSTATUS(status) == SHARC_TEST_SKIP_STATUS) {
        char why[1024];
        last_line(log_path, why, sizeof why);
        printf("skip %-52s %s\n", label, why);
        nskipped++;
        ok = 1;
    } else if (ok) {
        printf("ok   %-52s %7.2fs\n", label, dt);
    } else {
        if (timed_out) printf("FAIL %-52s timed out after %.0fs\n", label, timeout);
        else if (WIFSIGNALED(status)) printf("FAIL %-52s killed by signal %d\n", label, WTERMSIG(status));
        else printf("FAIL %-52s exit status %d\n", label, WEXITSTATUS(status));
        FILE *f = fopen(log_path, "r");
        if (f) {
            char line[4096];
            int n = 0;
            while (fgets(line, sizeof line, f) && n++ < 200) printf("     | %s", line);
            fclose(f);
        }
    }
    fflush(stdout);
    unlink(log_path);
    remove_tree(dir);
    return ok;
}

static double script_timeout(const char *path) {
    FILE *f = fopen(path, "r");
    double t = 120.0;
    if (!f) return t;
    char line[256];
    for (int i = 0; i < 20 && fgets(line, sizeof line, f); i++) {
        const char *p = strstr(line, "# timeout:");
        if (p) t = atof(p + 10);
    }
    fclose(f);
    return t;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv) {
    const char *filter = NULL, *one = NULL, *scripts = NULL;
    int list = 0;
    double scale = 1.0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--filter") && i + 1 < argc) filter = argv[++i];
        else if (!strcmp(argv[i], "--one") && i + 1 < argc) one = argv[++i];
        else if (!strcmp(argv[i], "--scripts") && i + 1 < argc) scripts = argv[++i];
        else if (!strcmp(argv[i], "--bin") && i + 1 < argc) {
            if (!realpath(argv[++i], bin_dir)) snprintf(bin_dir, sizeof bin_dir, "%s", argv[i]);
        } else if (!strcmp(argv[i], "--timeout-scale") && i + 1 < argc) scale = atof(argv[++i]);
        else if (!strcmp(argv[i], "--list")) list = 1;
        else {
            fprintf(stderr,
                    "usage: %s [--filter S] [--list] [--one NAME] [--scripts DIR] "
                    "[--bin DIR] [--timeout-scale K]\n",
                    argv[0]);
            return 2;
        }
    }
    setenv("SHARC_BIN", bin_dir, 1);
    char scale_s[32]; /* the scripts' inner timeouts scale too (tests/cli/timeout_lib.inc) */
    snprintf(scale_s, sizeof scale_s, "%g", scale > 0 ? scale : 1.0);
    setenv("SHARC_TIMEOUT_SCALE", scale_s, 1);
    char cwd[PATH_MAX];
    if (getcwd(cwd, sizeof cwd)) setenv("SHARC_ROOT", cwd, 1);
    (void)tmp_dir;

    if (list) {
        for (int i = 0; i < ntests; i++) printf("%s\n", tests[i].name);
        return 0;
    }
    if (one) {
        for (int i = 0; i < ntests; i++)
            if (!strcmp(tests[i].name, one)) {
                tests[i].fn();
                printf("ok %s\n", one);
                return 0;
            }
        fprintf(stderr, "no test named %s\n", one);
        return 2;
    }

    int passed = 0, failed = 0;
    char failures[8192] = "";
    for (int i = 0; i < ntests; i++) {
        if (filter && !strstr(tests[i].name, filter)) continue;
        if (run_child(tests[i].name, &tests[i], NULL, UNIT_TIMEOUT * scale)) passed++;
        else {
            failed++;
            strncat(failures, " ", sizeof failures - strlen(failures) - 1);
            strncat(failures, tests[i].name, sizeof failures - strlen(failures) - 1);
        }
    }
    if (scripts) {
        DIR *d = opendir(scripts);
        char *names[512];
        int nn = 0;
        if (d) {
            struct dirent *e;
            while ((e = readdir(d)) && nn < 512) {
                size_t len = strlen(e->d_name);
                if (len > 3 && !strcmp(e->d_name + len - 3, ".sh")) names[nn++] = strdup(e->d_name);
            }
            closedir(d);
        }
        qsort(names, (size_t)nn, sizeof names[0], cmp_str);
        for (int i = 0; i < nn; i++) {
            char path[PATH_MAX * 2 + 256], label[256];
            snprintf(path, sizeof path, "%s/%s/%s", cwd, scripts, names[i]);
            snprintf(label, sizeof label, "cli/%s", names[i]);
            if (!filter || strstr(label, filter)) {
                if (run_child(label, NULL, path, script_timeout(path) * scale)) passed++;
                else {
                    failed++;
                    strncat(failures, " ", sizeof failures - strlen(failures) - 1);
                    strncat(failures, label, sizeof failures - strlen(failures) - 1);
                }
            }
            free(names[i]);
        }
    }
    if (failed) printf("failed:%s\n", failures);
    printf("%d passed, %d failed, %d skipped\n", passed - nskipped, failed, nskipped);
    return failed ? 1 : 0;
}
