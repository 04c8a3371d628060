/* test_data_sft.c: sample datasets (sharc/data.h with sharc/sft.h): the SFT
 * token file read back from bytes laid out here by the documented format
 * (docs/ARCHITECTURE.md, "SFT data"), bad SFT files refused, the writer read
 * back by the reader, items (a sample padded to T, untrained targets
 * masked) worked out by hand, the sampler's rule over samples, the llm.c
 * writer (uint16 / uint32 by vocabulary, the tokenizer fingerprint in
 * header words 16..24), and datasets held in memory. */
#include "sharc/data.h"
#include "sharc/sft.h"
#include "test.h"

#include <string.h>

static const char *tmp_path(const char *name) {
    static char buf[4][1024];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", sharc_test_tmpdir(), name);
    return buf[k];
}

#define T_ (1u << 31)

/* Two samples: [5, 6, 7*, 8*] and [9, 10*, 11*, 12, 13*] (* = trained). */
static const uint32_t toks[9] = {5, 6, 7 | T_, 8 | T_, 9, 10 | T_, 11 | T_, 12, 13 | T_};
static const uint64_t offs[3] = {0, 4, 9};

/* the documented layout, byte by byte */
static size_t sft_bytes(unsigned char *b, const uint8_t sha[32]) {
    memset(b, 0, 128);
    memcpy(b, "SHARCSFT", 8);
    uint32_t v = 1;
    memcpy(b + 8, &v, 4);
    uint64_t n = 2, nt = 9;
    memcpy(b + 16, &n, 8);
    memcpy(b + 24, &nt, 8);
    uint32_t ml = 5, longest = 5, ids = 100;
    memcpy(b + 32, &ml, 4);
    memcpy(b + 36, &longest, 4);
    memcpy(b + 40, sha, 32);
    memcpy(b + 72, &ids, 4);
    memcpy(b + 128, offs, sizeof offs);
    memcpy(b + 128 + sizeof offs, toks, sizeof toks);
    return 128 + sizeof offs + sizeof toks;
}

static void write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    ASSERT_TRUE(f && fwrite(p, 1, n, f) == n && fclose(f) == 0);
}

static void expect_item(const sharc_dataset *d, int64_t k, int T, const int32_t *in, const int32_t *tg, int64_t valid) {
    int32_t x[16], y[16];
    ASSERT_EQ(sharc_dataset_item(d, k, T, x, y), valid);
    for (int i = 0; i < T; i++) {
        if (x[i] != in[i] || y[i] != tg[i])
            TEST_FAIL_AT("item %lld position %d: input %d target %d, expected %d and %d", (long long)k, i, x[i], y[i],
                         in[i], tg[i]);
    }
}

TEST(data_sft_file_read_back) {
    uint8_t sha[32];
    for (int i = 0; i < 32; i++) sha[i] = (uint8_t)(i * 7 + 1);
    unsigned char b[512];
    size_t n = sft_bytes(b, sha);
    write_file(tmp_path("s.sft"), b, n);
    sharc_dataset *d;
    ASSERT_OK(sharc_dataset_open(&d, tmp_path("s.sft"), SHARC_TOKENS_AUTO, 14)); /* detected by its magic */
    ASSERT_EQ(sharc_dataset_format(d), SHARC_TOKENS_SFT);
    ASSERT_EQ(sharc_dataset_num_samples(d), 2);
    ASSERT_EQ(sharc_dataset_longest_sample(d), 5);
    ASSERT_EQ(sharc_dataset_num_items(d, 6), 2);
    ASSERT_TRUE(!memcmp(sharc_dataset_tokenizer_sha256(d), sha, 32));
    /* sample 0 in T = 6: inputs 5 6 7 8 then pad 0; targets: position i predicts token i+1 if trained */
    expect_item(d, 0, 6, (int32_t[]){5, 6, 7, 8, 0, 0}, (int32_t[]){-1, 7, 8, -1, -1, -1}, 2);
    expect_item(d, 1, 6, (int32_t[]){9, 10, 11, 12, 13, 0}, (int32_t[]){10, 11, -1, 13, -1, -1}, 3);
    /* T = 4 = the longest sample - 1: the last token is a target, never an input */
    expect_item(d, 1, 4, (int32_t[]){9, 10, 11, 12}, (int32_t[]){10, 11, -1, 13}, 3);
    sharc_dataset_free(d);
    /* the vocabulary check ignores the trained bit: 13 needs vocab >= 14 */
    ASSERT_TRUE(sharc_dataset_open(&d, tmp_path("s.sft"), SHARC_TOKENS_SFT, 13) == SHARC_ERR_FORMAT);
    ASSERT_TRUE(strstr(sharc_last_error(), "token 13 at position 8 is outside the vocabulary [0, 13)") != NULL);
}

TEST(data_sft_bad_files_are_refused) {
    uint8_t sha[32] = {0};
    unsigned char good[512], b[512];
    size_t n = sft_bytes(good, sha);
    static const struct {
        size_t at;
        unsigned char byte;
        const char *msg;
    } cases[] = {
        {0, 'X', "is not a sharc SFT token file"},         {8, 2, "SFT file version 2; this sharc reads version 1"},
        {16, 3, "3 samples and 9 tokens do not fit"},      {24, 10, "2 samples and 10 tokens do not fit"},
        {128 + 8, 0, "sample 0 is empty or out of order"}, {128 + 16, 8, "the samples do not cover its 9 tokens"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        memcpy(b, good, n);
        b[cases[i].at] = cases[i].byte;
        write_file(tmp_path("bad.sft"), b, n);
        sharc_dataset *d = NULL;
        sharc_status st = sharc_dataset_open(&d, tmp_path("bad.sft"), SHARC_TOKENS_SFT, 100);
        if (st == SHARC_OK) TEST_FAIL_AT("case %zu accepted", i);
        if (!strstr(sharc_last_error(), cases[i].msg) || !strstr(sharc_last_error(), "bad.sft"))
            TEST_FAIL_AT("case %zu: '%s' lacks '%s'", i, sharc_last_error(), cases[i].msg);
        ASSERT_TRUE(d == NULL);
    }
    write_file(tmp_path("short.sft"), good, n - 1); /* a truncated file */
    sharc_dataset *d = NULL;
    ASSERT_TRUE(sharc_dataset_open(&d, tmp_path("short.sft"), SHARC_TOKENS_AUTO, 100) == SHARC_ERR_FORMAT);
    /* JSONL is tokenized by dataprep, never opened as tokens */
    write_file(tmp_path("x.jsonl"), "{}\n", 3);
    ASSERT_TRUE(sharc_dataset_open(&d, tmp_path("x.jsonl"), SHARC_TOKENS_AUTO, 100) == SHARC_ERR_INVALID);
    ASSERT_TRUE(strstr(sharc_last_error(), "is JSONL: set model.tokenizer") != NULL);
}

/* a tokenizer whose sha256 the writer stores */
static sharc_tokenizer *byte_tokenizer(void) {
    static char json[12000];
    char *p = json;
    p += sprintf(p, "{\"pre_tokenizer\":{\"type\":\"ByteLevel\"},\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{"
                    "\"type\":\"BPE\",\"vocab\":{");
    int n = 0;
    for (unsigned b = 0; b < 256; b++) {
        unsigned cp = b;
        if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)) cp = 256 + (unsigned)n++;
        if (cp == '"' || cp == '\\') p += sprintf(p, "\"\\%c\":%u,", (char)cp, b);
        else if (cp < 0x80) p += sprintf(p, "\"%c\":%u,", (char)cp, b);
        else p += sprintf(p, "\"%c%c\":%u,", (char)(0xC0 | (cp >> 6)), (char)(0x80 | (cp & 63)), b);
    }
    sprintf(p - 1, "}}}");
    sharc_tokenizer *t;
    ASSERT_OK(sharc_tokenizer_load_json(&t, json, strlen(json), NULL, "bytes"));
    return t;
}

TEST(data_sft_writer_read_back_and_sampler) {
    sharc_tokenizer *t = byte_tokenizer();
    sharc_sft_data sd = {0};
    sd.tokens = malloc(sizeof toks);
    sd.offsets = malloc(sizeof offs);
    memcpy(sd.tokens, toks, sizeof toks);
    memcpy(sd.offsets, offs, sizeof offs);
    sd.ntokens = 9;
    sd.nsamples = 2;
    sd.longest = 5;
    ASSERT_OK(sharc_sft_write(tmp_path("w.sft"), &sd, t, 5));
    sharc_dataset *d;
    ASSERT_OK(sharc_dataset_open(&d, tmp_path("w.sft"), SHARC_TOKENS_AUTO, 256));
    ASSERT_TRUE(!memcmp(sharc_dataset_tokenizer_sha256(d), sharc_tokenizer_sha256(t), 32));
    expect_item(d, 1, 6, (int32_t[]){9, 10, 11, 12, 13, 0}, (int32_t[]){10, 11, -1, 13, -1, -1}, 3);
    /* the sampler picks samples by the same rule as windows: 2 ranks x 1 = 1 rank x 2 */
    sharc_sampler *s1, *s2;
    sharc_sampler_config c1 = {
        .seq_len = 6, .batch_size = 1, .grad_accum = 2, .dp_size = 1, .shuffle = true, .seed = 3};
    sharc_sampler_config c2 = {
        .seq_len = 6, .batch_size = 1, .grad_accum = 1, .dp_size = 2, .shuffle = true, .seed = 3};
    ASSERT_OK(sharc_sampler_init(&s1, d, &c1));
    ASSERT_OK(sharc_sampler_init(&s2, d, &c2));
    ASSERT_EQ(sharc_sampler_windows(s1), 2);
    for (int64_t step = 0; step < 5; step++)
        for (int m = 0; m < 2; m++) {
            int32_t a[6], b[6], x[6], y[6];
            sharc_sampler_batch(s1, step, m, 0, a, b);
            sharc_sampler_batch(s2, step, 0, m, x, y);
            ASSERT_TRUE(!memcmp(a, x, sizeof a) && !memcmp(b, y, sizeof b));
        }
    sharc_sampler_free(s1);
    sharc_sampler_free(s2);
    /* a sample longer than T + 1 is refused by name */
    sharc_sampler_config c3 = {.seq_len = 3, .batch_size = 1, .grad_accum = 1, .dp_size = 1};
    ASSERT_TRUE(sharc_sampler_init(&s1, d, &c3) == SHARC_ERR_INVALID);
    ASSERT_TRUE(strstr(sharc_last_error(), "has a sample of 5 tokens, more than train.seq_len + 1 = 4") != NULL);
    sharc_dataset_free(d);
    sharc_sft_free(&sd);
    sharc_tokenizer_free(t);
}

TEST(data_llmc_writer_and_memory_datasets) {
    sharc_tokenizer *t = byte_tokenizer();
    int32_t ids[5] = {1, 2, 300, 4, 70000};
    /* vocab > 65536: uint32 tokens (llm.c version 7), fingerprint kept */
    ASSERT_OK(sharc_tokens_write_llmc(tmp_path("w.bin"), ids, 5, 70001, sharc_tokenizer_sha256(t)));
    sharc_dataset *d;
    ASSERT_OK(sharc_dataset_open(&d, tmp_path("w.bin"), SHARC_TOKENS_AUTO, 70001));
    ASSERT_EQ(sharc_dataset_format(d), SHARC_TOKENS_LLMC);
    int32_t got[5];
    sharc_dataset_read(d, 0, 5, got);
    ASSERT_TRUE(!memcmp(got, ids, sizeof ids));
    ASSERT_TRUE(!memcmp(sharc_dataset_tokenizer_sha256(d), sharc_tokenizer_sha256(t), 32));
    sharc_dataset_free(d);
    /* vocab <= 65536: uint16, the file llm.c's reader takes */
    ids[4] = 5;
    ASSERT_OK(sharc_tokens_write_llmc(tmp_path("w16.bin"), ids, 5, 512, NULL));
    FILE *f = fopen(tmp_path("w16.bin"), "rb");
    int32_t h[256];
    ASSERT_EQ(fread(h, 4, 256, f), 256);
    uint16_t body[5];
    ASSERT_EQ(fread(body, 2, 5, f), 5);
    ASSERT_TRUE(fgetc(f) == EOF);
    fclose(f);
    ASSERT_EQ(h[0], 20240520);
    ASSERT_EQ(h[1], 1);
    ASSERT_EQ(h[2], 5);
    ASSERT_EQ(h[16], 0); /* no fingerprint asked for */
    ASSERT_EQ(body[2], 300);
    ASSERT_OK(sharc_dataset_open(&d, tmp_path("w16.bin"), SHARC_TOKENS_AUTO, 512));
    ASSERT_TRUE(sharc_dataset_tokenizer_sha256(d) == NULL);
    sharc_dataset_free(d);
    /* in memory: a stream (windows) and samples */
    uint32_t *stream = malloc(7 * sizeof(uint32_t));
    for (int i = 0; i < 7; i++) stream[i] = (uint32_t)i + 1;
    ASSERT_OK(sharc_dataset_from_memory(&d, "mem", stream, 7, NULL, 0, NULL, 10));
    ASSERT_EQ(sharc_dataset_num_items(d, 3), 2);
    expect_item(d, 1, 3, (int32_t[]){4, 5, 6}, (int32_t[]){5, 6, 7}, 3);
    sharc_dataset_free(d);
    uint32_t *st = malloc(sizeof toks);
    uint64_t *of = malloc(sizeof offs);
    memcpy(st, toks, sizeof toks);
    memcpy(of, offs, sizeof offs);
    ASSERT_TRUE(sharc_dataset_from_memory(&d, "mem", st, 9, of, 2, NULL, 12) == SHARC_ERR_FORMAT); /* 13 >= 12 */
    st = malloc(sizeof toks);
    of = malloc(sizeof offs);
    memcpy(st, toks, sizeof toks);
    memcpy(of, offs, sizeof offs);
    ASSERT_OK(sharc_dataset_from_memory(&d, "mem", st, 9, of, 2, NULL, 14));
    expect_item(d, 0, 6, (int32_t[]){5, 6, 7, 8, 0, 0}, (int32_t[]){-1, 7, 8, -1, -1, -1}, 2);
    sharc_dataset_free(d);
    sharc_tokenizer_free(t);
}
