/* sharc/plot.h: curves of one or several runs' metrics files as PNG images,
 * drawn by gnuplot (Debian's gnuplot-nox, run as a child process). */
#ifndef SHARC_PLOT_H
#define SHARC_PLOT_H

#include "sharc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Read each JSON-lines metrics file (sharc train's metrics.jsonl; a label
 * is the run directory's name, or the file's name) and write into out_dir
 * loss.png (training loss, and validation loss where there is some),
 * throughput.png (global tokens/s) and memory.png (max over ranks of the
 * peak bytes per step), with the data files gnuplot read beside them.
 * Errors name the file and line, or gnuplot's failure. */
sharc_status sharc_plot_runs(const char *const *paths, int n, const char *out_dir);

#ifdef __cplusplus
}
#endif
#endif
