/* fuzz_hf_json.c: libFuzzer entry point for the JSON of a Hugging Face
 * directory. The first input byte picks the file: even -> config.json read
 * by sharc_hf_read_config; odd -> model.safetensors.index.json opened by
 * sharc_st_set_open next to two fixed valid shards ("model-1.safetensors"
 * with tensors a and b, "model-2.safetensors" with c). The rest of the input
 * is the file's text. Accepted configs must validate; accepted sets must
 * resolve every tensor they list. Built by `make fuzz` with ASan + UBSan. */
#include "sharc/hf.h"
#include "sharc/model.h"
#include "sharc/safetensors.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[512];

static void cleanup(void) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

static void setup(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/sharc-fuzz-hf-%ld", tmp && *tmp ? tmp : "/tmp", (long)getpid());
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", dir, dir);
    if (system(cmd) != 0) abort();
    float v[3] = {1, 2, 3};
    int64_t s1[1] = {1}, s2[1] = {2};
    sharc_st_entry e1[2] = {{.name = "a", .dtype = SHARC_DT_F32, .ndim = 1, .shape = s1, .data = v},
                            {.name = "b", .dtype = SHARC_DT_F32, .ndim = 1, .shape = s2, .data = v + 1}};
    sharc_st_entry e2[1] = {{.name = "c", .dtype = SHARC_DT_F32, .ndim = 1, .shape = s1, .data = v}};
    char p[600];
    snprintf(p, sizeof p, "%s/model-1.safetensors", dir);
    if (sharc_st_write(p, e1, 2, NULL, NULL, 0) != SHARC_OK) abort();
    snprintf(p, sizeof p, "%s/model-2.safetensors", dir);
    if (sharc_st_write(p, e2, 1, NULL, NULL, 0) != SHARC_OK) abort();
    atexit(cleanup);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!dir[0]) setup();
    if (size < 1) return 0;
    bool index = data[0] & 1;
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, index ? "model.safetensors.index.json" : "config.json");
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    fwrite(data + 1, 1, size - 1, f);
    fclose(f);
    if (index) {
        sharc_st_set *s = NULL;
        if (sharc_st_set_open(&s, dir) == SHARC_OK) {
            for (int i = 0; i < sharc_st_set_count(s); i++) {
                const sharc_st_file *sf = NULL;
                const sharc_st_tensor *t = sharc_st_set_tensor_at(s, i, &sf);
                if (!t || !sf || sharc_st_set_find(s, t->name, NULL) != t) abort();
                float x[2];
                if (sharc_st_read_f32(sf, t, 0, t->numel, x) != SHARC_OK) abort();
            }
            sharc_st_set_close(s);
        } else if (s) {
            abort();
        }
    } else {
        sharc_model_config c;
        if (sharc_hf_read_config(dir, &c) == SHARC_OK && sharc_model_config_validate(&c) != SHARC_OK) abort();
    }
    unlink(path);
    return 0;
}
