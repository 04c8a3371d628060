/* registry.c: the device backends this build has, in the order
 * sharc_device_open lists them (a CUDA backend adds its table here). */
#include "device_impl.h"

const sharc_device_i *const sharc_device_backends[] = {&sharc_cpu_device_i, NULL};
