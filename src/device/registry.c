/* registry.c: the device backends this build has, in the order
 * sharc_device_open lists them. "cuda" is always listed: in a build without
 * nvcc it is src/device/cuda/absent.c, whose probe says CUDA support was not
 * built. */
#include "device_impl.h"

const sharc_device_i *const sharc_device_backends[] = {&sharc_cpu_device_i, &sharc_cuda_device_i, NULL};
