/* sharc/device.h: where sharc's tensors live and its kernels run.
 *
 * A device owns memory (accounted per sharc_mem category, like sharc_alloc),
 * streams (ordered queues of work) and events (points in a stream that
 * another stream can wait for), and carries a kernel table (sharc/kernels.h).
 * The model, the engine and the optimizer allocate through a device and call
 * kernels through its table, so a new backend is a new table, not an edit of
 * the callers (note [device-layer] in docs/ARCHITECTURE.md).
 *
 * Backends: "cpu" (host memory, one implicit stream: work runs when it is
 * called, so streams never wait and events are points already reached).
 *
 * Conventions: every call that takes a stream puts its work on that stream
 * (NULL: the device's default stream); the host waits only in
 * sharc_device_synchronize and sharc_device_event_synchronize (and
 * sharc_device_host_func on a backend without host functions). Copies and
 * memsets are asynchronous with respect to the host on devices with real
 * streams; memory handed to them must stay valid until the stream reaches them. */
#ifndef SHARC_DEVICE_H
#define SHARC_DEVICE_H

#include <stdbool.h>
#include <stddef.h>

#include "sharc/alloc.h"
#include "sharc/dtype.h"
#include "sharc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sharc_device sharc_device;
typedef struct sharc_stream sharc_stream;
typedef struct sharc_event sharc_event;
struct sharc_kernels;

typedef enum {
    SHARC_COPY_HOST_TO_DEVICE = 0,
    SHARC_COPY_DEVICE_TO_HOST,
    SHARC_COPY_DEVICE_TO_DEVICE,
    SHARC_COPY_COUNT
} sharc_copy_kind;

/* ---- devices ---- */

/* Open device `index` of the backend called `name` ("cpu"); devices live for
 * the whole process (opening one twice returns the same device). Errors name
 * the backend and list the ones this build has. */
sharc_status sharc_device_open(const char *name, int index, sharc_device **out);
/* How many devices the backend called `name` sees (0 when this build has no
 * such backend or it cannot run here: sharc_device_open then says why). */
int sharc_device_count(const char *name);
/* The CPU device (never fails). */
sharc_device *sharc_device_cpu(void);
const char *sharc_device_name(const sharc_device *d);
/* True when the device's memory is host memory that the CPU (and MPI) may
 * read and write directly (the CPU backend). */
bool sharc_device_is_host(const sharc_device *d);
/* The device's kernel table, every slot filled (sharc/kernels.h). */
const struct sharc_kernels *sharc_device_kernels(const sharc_device *d);

/* ---- memory ---- */

/* `bytes` of device memory, zero-filled and 64-byte aligned, counted under
 * `cat`: in the host counters of sharc/alloc.h for a host device, in the
 * device's own counters otherwise (sharc_device_mem_get). NULL on failure,
 * with an error naming the device, the size and the category. */
void *sharc_device_alloc(sharc_device *d, size_t bytes, sharc_mem_cat cat);
/* Free a block from sharc_device_alloc of the same device (NULL: nothing). */
void sharc_device_free(sharc_device *d, void *p);
/* `bytes` of host memory that the device copies to and from directly
 * (cudaHostAlloc on cuda: page-locked, so a copy into it is asynchronous
 * like any other, where one into pageable memory makes the host wait;
 * ordinary memory from sharc_alloc on the CPU), zero-filled and 64-byte
 * aligned, counted under `cat` in the host counters of sharc/alloc.h. NULL
 * on failure, with an error naming the device, the size and the category.
 * The host may read it only after synchronizing with the copies into it. */
void *sharc_device_host_alloc(sharc_device *d, size_t bytes, sharc_mem_cat cat);
/* Free a block from sharc_device_host_alloc of the same device (NULL: nothing). */
void sharc_device_host_free(sharc_device *d, void *p);
/* Current and peak bytes per category of this device's memory. */
void sharc_device_mem_get(const sharc_device *d, sharc_mem_stats *out);
/* Peaks := current bytes (a host device: sharc_mem_reset_peak). */
void sharc_device_mem_reset_peak(sharc_device *d);

/* ---- what the device can do ---- */

/* The device's dense peak in FLOP/s for matrix products whose operands are
 * `dt` (F32: fp32 arithmetic, no TF32; BF16: bf16 operands, fp32
 * accumulation), and in how[0, n) how it was found, e.g. "cuda sm_90: 132
 * SMs x 1830 MHz x 4096 FLOP/clock". 0 when the backend does not know (the
 * CPU's is measured by the caller: sharc/telemetry.h), how saying why. */
double sharc_device_peak_flops(const sharc_device *d, sharc_dtype dt, char *how, size_t n);
/* The device memory's peak bandwidth in bytes/s (reads + writes), and in
 * how[0, n) where it comes from, e.g. "cuda: 5120-bit bus x 2619 MHz x 2
 * (DDR)". 0 when the backend does not know (the CPU's: the caller measures
 * it, sharc/prof.h), how saying why. */
double sharc_device_peak_bandwidth(const sharc_device *d, char *how, size_t n);

/* dst = src (`bytes`), in the direction `kind` says, on stream s. */
sharc_status sharc_device_copy(sharc_device *d, void *dst, const void *src, size_t bytes, sharc_copy_kind kind,
                               sharc_stream *s);
/* p[0, bytes) = 0 on stream s. */
sharc_status sharc_device_memset0(sharc_device *d, void *p, size_t bytes, sharc_stream *s);

/* ---- streams and events ---- */

/* The default stream, on which the model's kernels run. */
sharc_stream *sharc_device_stream(sharc_device *d);
/* Another stream (e.g. for collectives); on a device with one implicit
 * stream, that stream. Free with sharc_device_stream_free. */
sharc_status sharc_device_stream_new(sharc_device *d, sharc_stream **out);
void sharc_device_stream_free(sharc_stream *s);
/* The backend's own handle of stream s (a cudaStream_t on "cuda"), for
 * libraries that queue work on it themselves (NCCL); NULL for s NULL and on
 * devices without one (the CPU). */
void *sharc_device_stream_native(sharc_stream *s);
/* The host waits until everything queued on s is done. */
sharc_status sharc_device_synchronize(sharc_stream *s);

sharc_status sharc_device_event_new(sharc_device *d, sharc_event **out);
void sharc_device_event_free(sharc_event *ev);
/* Mark the point stream s has been given so far. */
sharc_status sharc_device_event_record(sharc_event *ev, sharc_stream *s);
/* Work queued on s after this call runs after the recorded point; the host
 * does not wait. */
sharc_status sharc_device_event_wait(sharc_event *ev, sharc_stream *s);
/* The host waits until the recorded point is reached. */
sharc_status sharc_device_event_synchronize(sharc_event *ev);
/* Whether the recorded point is reached (an event never recorded is), into
 * *done, without waiting: a poll that lets the host reuse what the point's
 * work read only when it must (sharc_device_event_synchronize when not
 * done). On the CPU always done; a failed poll is an error. */
sharc_status sharc_device_event_query(sharc_event *ev, bool *done);
/* Queue fn(arg) on stream s: the host runs it once the stream has reached
 * it, in stream order, on a thread of the driver's (the CPU: at once, here).
 * fn must make no device call and must not wait for the stream's later
 * work (CUDA's rule for cudaLaunchHostFunc). */
sharc_status sharc_device_host_func(sharc_stream *s, void (*fn)(void *), void *arg);
/* An event that can also be timed (sharc_device_event_elapsed); plain events
 * skip the timestamp (cudaEventDisableTiming), which keeps waits cheap. */
sharc_status sharc_device_event_new_timed(sharc_device *d, sharc_event **out);
/* *seconds = the device time from the point `start` marks to the one `end`
 * marks (both timed events of one device, both recorded and reached, e.g.
 * after sharc_device_event_synchronize(end)). A device without its own
 * events (the CPU) stamps the host's monotonic clock when a record runs. */
sharc_status sharc_device_event_elapsed(sharc_event *start, sharc_event *end, double *seconds);

#ifdef __cplusplus
}
#endif
#endif
