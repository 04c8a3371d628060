/* plot.c: sharc/plot.h: metrics files -> data columns -> a gnuplot script
 * -> PNG images. json-c reads the lines; gnuplot draws. */
#include "sharc/plot.h"
#include "sharc/config.h"
#include "sharc/fileio.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

/* The run's label: its directory's name for .../RUN/metrics.jsonl, else the
 * file name without its extension. Quotes are dropped (gnuplot strings). */
static void run_label(const char *path, char *out, size_t n) {
    char buf[SHARC_PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    char *slash = strrchr(buf, '/');
    const char *base = slash ? slash + 1 : buf;
    if (strcmp(base, "metrics.jsonl") == 0 && slash) {
        *slash = 0;
        char *s2 = strrchr(buf, '/');
        base = s2 ? s2 + 1 : buf;
    } else {
        char *dot = strrchr((char *)base, '.');
        if (dot && dot != base) *dot = 0;
    }
    size_t j = 0;
    for (size_t i = 0; base[i] && j + 1 < n; i++)
        if (base[i] != '"' && base[i] != '\'' && base[i] != '\\') out[j++] = base[i] == '_' ? '-' : base[i];
    out[j] = 0;
}

static bool get_num(json_object *o, const char *key, double *v) {
    json_object *x;
    if (!json_object_object_get_ex(o, key, &x)) return false;
    if (!json_object_is_type(x, json_type_double) && !json_object_is_type(x, json_type_int)) return false;
    *v = json_object_get_double(x);
    return true;
}

/* One metrics file -> out_dir/run-i.dat (step loss tps mem) and
 * out_dir/val-i.dat (step val_loss); counts of rows written. */
static sharc_status extract(const char *path, const char *out_dir, int i, int *ntrain, int *nval) {
    *ntrain = *nval = 0;
    FILE *in = fopen(path, "r");
    if (!in) return sharc_error(sharc_path_status(errno), "plot: cannot open '%s': %s", path, strerror(errno));
    char p1[SHARC_PATH_MAX + 32], p2[SHARC_PATH_MAX + 32];
    snprintf(p1, sizeof p1, "%s/run-%d.dat", out_dir, i);
    snprintf(p2, sizeof p2, "%s/val-%d.dat", out_dir, i);
    FILE *tr = fopen(p1, "w"), *va = fopen(p2, "w");
    sharc_status st = SHARC_OK;
    if (!tr || !va) st = sharc_error(SHARC_ERR_IO, "plot: cannot write in '%s': %s", out_dir, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    long lineno = 0;
    while (st == SHARC_OK && getline(&line, &cap, in) > 0) {
        lineno++;
        if (line[0] == '\n' || line[0] == 0) continue;
        json_object *o = json_tokener_parse(line);
        if (!o || !json_object_is_type(o, json_type_object)) {
            st = sharc_error(SHARC_ERR_FORMAT, "plot: '%s' line %ld is not a JSON object", path, lineno);
            if (o) json_object_put(o);
            break;
        }
        double step, loss, tps = 0, mem = 0, val;
        if (!get_num(o, "step", &step)) {
            st = sharc_error(SHARC_ERR_FORMAT, "plot: '%s' line %ld has no \"step\"", path, lineno);
        } else if (get_num(o, "loss_metrics/global_avg_loss", &loss)) {
            if (!get_num(o, "throughput/global(tps)", &tps)) get_num(o, "throughput(tps)", &tps);
            get_num(o, "memory/max_active(GiB)", &mem);
            fprintf(tr, "%.0f %.6g %.6g %.6g\n", step, loss, tps, mem);
            (*ntrain)++;
        } else if (get_num(o, "loss_metrics/val_loss", &val)) {
            fprintf(va, "%.0f %.6g\n", step, val);
            (*nval)++;
        }
        json_object_put(o);
    }
    free(line);
    fclose(in);
    if (tr) fclose(tr);
    if (va) fclose(va);
    if (st == SHARC_OK && *ntrain == 0)
        st = sharc_error(SHARC_ERR_FORMAT, "plot: '%s' has no training lines (\"loss_metrics/global_avg_loss\")", path);
    return st;
}

static void plot_one(FILE *g, const char *out_dir, const char *png, const char *title, const char *ylabel, int col,
                     char labels[][128], const int *nval, int n, bool with_val) {
    fprintf(g, "set output '%s/%s'\nset title '%s'\nset ylabel '%s'\n", out_dir, png, title, ylabel);
    fprintf(g, "plot ");
    for (int i = 0; i < n; i++) {
        fprintf(g, "%s'%s/run-%d.dat' using 1:%d with lines lw 2 lc %d title '%s'", i ? ", " : "", out_dir, i, col,
                i + 1, labels[i]);
        if (with_val && nval[i] > 0)
            fprintf(g, ", '%s/val-%d.dat' using 1:2 with linespoints dt 2 lc %d title '%s (val)'", out_dir, i, i + 1,
                    labels[i]);
    }
    fprintf(g, "\n");
}

sharc_status sharc_plot_runs(const char *const *paths, int n, const char *out_dir) {
    if (n < 1) return sharc_error(SHARC_ERR_INVALID, "plot: no metrics files given");
    if (n > 64) return sharc_error(SHARC_ERR_INVALID, "plot: %d metrics files, at most 64", n);
    SHARC_TRY(sharc_mkdirs(out_dir));
    if (strchr(out_dir, '\''))
        return sharc_error(SHARC_ERR_INVALID, "plot: --out '%s' may not contain a quote", out_dir);
    char(*labels)[128] = calloc((size_t)n, sizeof *labels);
    int *nval = calloc((size_t)n, sizeof(int));
    if (!labels || !nval) {
        free(labels);
        free(nval);
        return sharc_error(SHARC_ERR_NOMEM, "plot: out of memory");
    }
    sharc_status st = SHARC_OK;
    for (int i = 0; i < n && st == SHARC_OK; i++) {
        int ntr;
        run_label(paths[i], labels[i], sizeof labels[i]);
        st = extract(paths[i], out_dir, i, &ntr, &nval[i]);
    }
    char script[SHARC_PATH_MAX + 32];
    snprintf(script, sizeof script, "%s/plot.gp", out_dir);
    FILE *g = st == SHARC_OK ? fopen(script, "w") : NULL;
    if (st == SHARC_OK && !g) st = sharc_error(SHARC_ERR_IO, "plot: cannot write '%s': %s", script, strerror(errno));
    if (st == SHARC_OK) {
        fprintf(g, "set terminal pngcairo size 900,540 font ',10'\nset grid\nset key outside right top\n"
                   "set xlabel 'step'\nset format y '%%g'\n");
        plot_one(g, out_dir, "loss.png", "loss", "loss (nats/token)", 2, labels, nval, n, true);
        plot_one(g, out_dir, "throughput.png", "throughput (all ranks)", "tokens/s", 3, labels, nval, n, false);
        plot_one(g, out_dir, "memory.png", "peak memory per rank (max over ranks)", "GiB", 4, labels, nval, n, false);
        fclose(g);
        char cmd[SHARC_PATH_MAX + 64];
        snprintf(cmd, sizeof cmd, "gnuplot '%s' 2>&1", script);
        FILE *p = popen(cmd, "r");
        char msg[512] = "";
        if (!p) {
            st = sharc_error(SHARC_ERR_IO, "plot: cannot run gnuplot: %s", strerror(errno));
        } else {
            size_t len = fread(msg, 1, sizeof msg - 1, p);
            msg[len] = 0;
            int rc = pclose(p);
            if (rc != 0) {
                for (char *c = msg; *c; c++)
                    if (*c == '\n') *c = ' ';
                st = sharc_error(SHARC_ERR_IO, "plot: gnuplot failed (exit %d%s): %.200s",
                                 WIFEXITED(rc) ? WEXITSTATUS(rc) : -1,
                                 WIFEXITED(rc) && WEXITSTATUS(rc) == 127 ? ", is gnuplot-nox installed?" : "", msg);
            }
        }
    }
    free(labels);
    free(nval);
    return st;
}
