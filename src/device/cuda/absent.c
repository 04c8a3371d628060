/* absent.c: the "cuda" backend of a build made without nvcc (the Makefile
 * compiles it instead of the .cu files of this folder): its probe says that CUDA
 * support was not built and how to get it; nothing else is ever called. */
#include "../device_impl.h"

static sharc_status absent_probe(void) {
    return sharc_error(SHARC_ERR_UNSUPPORTED,
                       "cuda: CUDA support was not built into this sharc (nvcc was not found when it was built); "
                       "rebuild with CUDA 13 installed (make CUDA_HOME=/usr/local/cuda) or use train.device: cpu");
}

static int absent_count(void) { return 0; }

const sharc_device_i sharc_cuda_device_i = {
    .name = "cuda",
    .probe = absent_probe,
    .count = absent_count,
};
