/* sharc/log.h: rank-prefixed log lines for interleaved multi-process output. */
#ifndef SHARC_LOG_H
#define SHARC_LOG_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { SHARC_LOG_INFO = 0, SHARC_LOG_WARN, SHARC_LOG_ERROR } sharc_log_level;

/* Set this process's rank and world size (prefix "[rank r]" when size > 1). */
void sharc_log_set_rank(int rank, int world_size);
int sharc_log_rank(void);
int sharc_log_world_size(void);

/* Write one line to stderr: "[rank r] message". */
void sharc_log(sharc_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define sharc_info(...) sharc_log(SHARC_LOG_INFO, __VA_ARGS__)
#define sharc_warn(...) sharc_log(SHARC_LOG_WARN, __VA_ARGS__)

#ifdef __cplusplus
}
#endif
#endif
