/* test_safetensors.c: the safetensors reader rejects every malformed file
 * with a message naming the problem (a table of crafted files), accepts the
 * edge cases the format allows, and the writer's layout (padding, alignment,
 * metadata) is what the format and Hugging Face expect. */
#include "sharc/dtype.h"
#include "sharc/safetensors.h"
#include "test.h"

#include <stdio.h>
#include <string.h>

/* Write 8-byte length + header + `data_len` bytes (0, 1, 2, ...) to a temp file. */
static const char *craft(const char *name, uint64_t hlen, const char *header, size_t header_bytes, size_t data_len) {
    static char path[1200];
    snprintf(path, sizeof path, "%s/%s.safetensors", sharc_test_tmpdir(), name);
    FILE *f = fopen(path, "wb");
    ASSERT_TRUE(f != NULL);
    unsigned char lb[8];
    for (int i = 0; i < 8; i++) lb[i] = (unsigned char)(hlen >> (8 * i));
    fwrite(lb, 1, 8, f);
    fwrite(header, 1, header_bytes, f);
    for (size_t i = 0; i < data_len; i++) fputc((int)(i & 0xff), f);
    fclose(f);
    return path;
}

static const char *craft_json(const char *name, const char *json, size_t data_len) {
    return craft(name, strlen(json), json, strlen(json), data_len);
}

typedef struct {
    const char *name;
    const char *header; /* NULL: use raw fields */
    size_t data_len;
    const char *expect; /* substring of the error */
} bad_case;

TEST(safetensors_rejects_malformed_files) {
    static const bad_case cases[] = {
        {"not_json", "{\"a\": ", 0, "not valid JSON"},
        {"trailing", "{} x", 0, "not valid JSON"},
        {"array_root", "[1, 2]", 0, "not a JSON object"},
        {"entry_not_object", "{\"a\": 3}", 0, "needs dtype, shape and data_offsets"},
        {"missing_offsets", "{\"a\": {\"dtype\": \"F32\", \"shape\": [1]}}", 4, "needs dtype, shape and data_offsets"},
        {"extra_key", "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4], \"x\": 1}}", 4,
         "keys other than"},
        {"unknown_dtype", "{\"a\": {\"dtype\": \"F33\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
         "unknown dtype"},
        {"dtype_not_string", "{\"a\": {\"dtype\": 7, \"shape\": [1], \"data_offsets\": [0, 4]}}", 4, "unknown dtype"},
        {"newer_dtype", "{\"w.x\": {\"dtype\": \"F8_E8M0\", \"shape\": [4], \"data_offsets\": [0, 4]}}", 4,
         "tensor 'w.x' has unsupported dtype F8_E8M0"},
        {"complex_dtype", "{\"c\": {\"dtype\": \"C64\", \"shape\": [1], \"data_offsets\": [0, 8]}}", 8,
         "unsupported dtype C64"},
        {"shape_not_array", "{\"a\": {\"dtype\": \"F32\", \"shape\": 1, \"data_offsets\": [0, 4]}}", 4,
         "shape must be an array"},
        {"negative_dim", "{\"a\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}", 4,
         "non-negative integers"},
        {"float_dim", "{\"a\": {\"dtype\": \"F32\", \"shape\": [1.0], \"data_offsets\": [0, 4]}}", 4,
         "non-negative integers"},
        {"string_dim", "{\"a\": {\"dtype\": \"F32\", \"shape\": [\"1\"], \"data_offsets\": [0, 4]}}", 4,
         "non-negative integers"},
        {"shape_overflow",
         "{\"a\": {\"dtype\": \"F32\", \"shape\": [4294967296, 4294967296], \"data_offsets\": [0, 4]}}", 4,
         "shape overflows"},
        {"bytes_overflow",
         "{\"a\": {\"dtype\": \"F64\", \"shape\": [2305843009213693952, 2], \"data_offsets\": [0, 8]}}", 8, "need"},
        {"offsets_short", "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0]}}", 4,
         "data_offsets must be [begin, end]"},
        {"offsets_reversed", "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 0]}}", 4,
         "0 <= begin <= end"},
        {"offsets_negative", "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [-4, 0]}}", 4,
         "0 <= begin <= end"},
        {"offsets_float", "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4.0]}}", 4,
         "0 <= begin <= end"},
        {"size_mismatch", "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 4]}}", 4,
         "need 8 bytes, data_offsets give 4"},
        {"gap", "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}", 8,
         "starts at byte 4, expected 0"},
        {"overlap",
         "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}, "
         "\"b\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}",
         8, "starts at byte"},
        {"beyond_buffer", "{\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}}", 8,
         "cover 16 data bytes but the file has 8"},
        {"buffer_longer", "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 12,
         "cover 4 data bytes but the file has 12"},
        {"meta_not_object", "{\"__metadata__\": [\"pt\"]}", 0, "__metadata__ must be an object"},
        {"meta_not_string", "{\"__metadata__\": {\"format\": 1}}", 0, "value of 'format' must be a string"},
        {"bad_utf8", "{\"\xff\xfe\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [0, 0]}}", 0,
         "not valid JSON"},
        {"nul_in_header", NULL, 0, "NUL byte"},
        {"header_past_file", NULL, 0, "exceeds the file"},
        {"header_too_big", NULL, 0, "exceeds the file"},
        {"header_short", NULL, 0, "below 2"},
        {"file_short", NULL, 0, "shorter than the 8-byte"},
    };
    int n = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; i++) {
        const bad_case *c = &cases[i];
        const char *path;
        if (c->header) {
            path = craft_json(c->name, c->header, c->data_len);
        } else if (!strcmp(c->name, "nul_in_header")) {
            path = craft(c->name, 8, "{}  \0   ", 8, 0);
        } else if (!strcmp(c->name, "header_past_file")) {
            path = craft(c->name, 100, "{}", 2, 0);
        } else if (!strcmp(c->name, "header_too_big")) {
            path = craft(c->name, (uint64_t)1 << 62, "{}", 2, 0);
        } else if (!strcmp(c->name, "header_short")) {
            path = craft(c->name, 1, "{", 1, 0);
        } else {
            char tmp[1200];
            snprintf(tmp, sizeof tmp, "%s/short.safetensors", sharc_test_tmpdir());
            FILE *f = fopen(tmp, "wb");
            fwrite("\x02\0\0", 1, 3, f);
            fclose(f);
            static char keep[1200];
            snprintf(keep, sizeof keep, "%s", tmp);
            path = keep;
        }
        sharc_st_file *f = NULL;
        sharc_status st = sharc_st_open(&f, path);
        if (st == SHARC_OK) {
            sharc_st_close(f);
            TEST_FAIL_AT("case %s: accepted a malformed file", c->name);
        }
        if (!strstr(sharc_last_error(), c->expect))
            TEST_FAIL_AT("case %s: error '%s' does not say '%s'", c->name, sharc_last_error(), c->expect);
        if (!strstr(sharc_last_error(), path))
            TEST_FAIL_AT("case %s: error '%s' does not name the file", c->name, sharc_last_error());
        ASSERT_TRUE(f == NULL);
    }
}

TEST(safetensors_accepts_edge_cases) {
    /* an empty tensor, a rank-0 tensor, an empty header object, metadata, spaces padding */
    const char *path = craft_json("edge",
                                  "{\"__metadata__\": {\"format\": \"pt\", \"k\": \"v\"}, "
                                  "\"empty\": {\"dtype\": \"F32\", \"shape\": [0, 5], \"data_offsets\": [0, 0]}, "
                                  "\"scalar\": {\"dtype\": \"F32\", \"shape\": [], \"data_offsets\": [0, 4]}, "
                                  "\"h\": {\"dtype\": \"BF16\", \"shape\": [2], \"data_offsets\": [4, 8]}}    ",
                                  8);
    sharc_st_file *f;
    ASSERT_OK(sharc_st_open(&f, path));
    ASSERT_EQ(sharc_st_count(f), 3);
    const sharc_st_tensor *e = sharc_st_find(f, "empty"), *s = sharc_st_find(f, "scalar"), *h = sharc_st_find(f, "h");
    ASSERT_TRUE(e && s && h);
    ASSERT_EQ(e->numel, 0);
    ASSERT_EQ(e->ndim, 2);
    ASSERT_EQ(s->ndim, 0);
    ASSERT_EQ(s->numel, 1);
    ASSERT_TRUE(strcmp(sharc_st_metadata(f, "k"), "v") == 0);
    float v[2];
    ASSERT_OK(sharc_st_read_f32(f, s, 0, 1, v));
    uint32_t u = 0x03020100u; /* data bytes 0, 1, 2, 3 little-endian */
    float want;
    memcpy(&want, &u, 4);
    ASSERT_TRUE(memcmp(&v[0], &want, 4) == 0);
    ASSERT_OK(sharc_st_read_f32(f, h, 0, 2, v));
    ASSERT_EQ(v[0], sharc_bf16_to_f32(0x0504));
    ASSERT_TRUE(v[1] == sharc_bf16_to_f32(0x0706));
    /* reads outside a tensor are errors, not out-of-bounds reads */
    ASSERT_TRUE(sharc_st_read_f32(f, h, 1, 2, v) == SHARC_ERR_INVALID);
    sharc_st_close(f);
    ASSERT_OK(sharc_st_open(&f, craft_json("empty_header", "{}", 0)));
    ASSERT_EQ(sharc_st_count(f), 0);
    sharc_st_close(f);
}

TEST(safetensors_writer_layout) {
    char path[1200];
    snprintf(path, sizeof path, "%s/w.safetensors", sharc_test_tmpdir());
    float a[3] = {1, 2, 3}, sc = 7;
    uint16_t b[3] = {1, 2, 3};
    double d[1] = {0.5};
    int64_t sa[1] = {3}, sb[1] = {3}, sd[1] = {1}, se[2] = {0, 4};
    sharc_st_entry es[5] = {
        {.name = "b16", .dtype = SHARC_DT_BF16, .ndim = 1, .shape = sb, .data = b},
        {.name = "f32", .dtype = SHARC_DT_F32, .ndim = 1, .shape = sa, .data = a},
        {.name = "scalar", .dtype = SHARC_DT_F32, .ndim = 0, .shape = NULL, .data = &sc},
        {.name = "empty", .dtype = SHARC_DT_F32, .ndim = 2, .shape = se, .data = NULL},
        {.name = "f64", .dtype = SHARC_DT_F64, .ndim = 1, .shape = sd, .data = d},
    };
    const char *mk[1] = {"note"}, *mv[1] = {"x"};
    ASSERT_OK(sharc_st_write(path, es, 5, mk, mv, 1));
    FILE *fp = fopen(path, "rb");
    unsigned char lb[8];
    ASSERT_EQ(fread(lb, 1, 8, fp), 8);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | lb[i];
    ASSERT_EQ(hlen % 8, 0);
    char *hdr = calloc(1, hlen + 1);
    ASSERT_EQ(fread(hdr, 1, hlen, fp), hlen);
    fclose(fp);
    ASSERT_TRUE(strstr(hdr, "\"format\":\"pt\"") != NULL);
    ASSERT_TRUE(hdr[hlen - 1] == ' ' || hdr[hlen - 1] == '}');
    free(hdr);
    sharc_st_file *f;
    ASSERT_OK(sharc_st_open(&f, path));
    ASSERT_TRUE(strcmp(sharc_st_metadata(f, "format"), "pt") == 0);
    ASSERT_TRUE(strcmp(sharc_st_metadata(f, "note"), "x") == 0);
    /* every tensor starts on a multiple of its element size, and the data
     * buffer starts on a multiple of 8 (header padded) */
    for (int i = 0; i < sharc_st_count(f); i++) {
        const sharc_st_tensor *t = sharc_st_tensor_at(f, i);
        ASSERT_EQ(t->begin % sharc_dtype_size(t->dtype), 0);
    }
    ASSERT_EQ(sharc_st_find(f, "f64")->begin, 0); /* 8-byte types first */
    float r[3];
    ASSERT_OK(sharc_st_load_f32(f, "f32", r, 3));
    ASSERT_ALLCLOSE(r, a, 3, 0, 0);
    ASSERT_OK(sharc_st_load_f32(f, "b16", r, 3));
    ASSERT_TRUE(r[2] == sharc_bf16_to_f32(3));
    ASSERT_EQ(sharc_st_find(f, "empty")->numel, 0);
    ASSERT_EQ(sharc_st_find(f, "scalar")->ndim, 0);
    sharc_st_close(f);
}
