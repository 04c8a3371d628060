/* test_data.c: token file formats read back exactly, every bad file refused
 * with its name in the message, and the sampler rule (note [sampler-rule]). */
#include "sharc/data.h"
#include "test.h"

#include <stdio.h>
#include <string.h>

static const char *tmp_path(const char *name) {
    static char buf[4][1024];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", sharc_test_tmpdir(), name);
    return buf[k];
}

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    ASSERT_TRUE(f != NULL);
    ASSERT_EQ(fwrite(data, 1, n, f), n);
    fclose(f);
}

/* llm.c shard: 256 int32 header then tokens */
static void write_llmc(const char *path, int magic, int version, int count, const void *tok, size_t tok_bytes) {
    int32_t h[256] = {0};
    h[0] = magic;
    h[1] = version;
    h[2] = count;
    FILE *f = fopen(path, "wb");
    ASSERT_TRUE(f != NULL);
    fwrite(h, 4, 256, f);
    fwrite(tok, 1, tok_bytes, f);
    fclose(f);
}

static void expect_tokens(const char *path, sharc_token_format fmt, int vocab, const int32_t *want, int64_t n,
                          sharc_token_format detected) {
    sharc_dataset *d;
    ASSERT_OK(sharc_dataset_open(&d, path, fmt, vocab));
    ASSERT_EQ(sharc_dataset_num_tokens(d), n);
    ASSERT_EQ(sharc_dataset_format(d), detected);
    int32_t got[64];
    sharc_dataset_read(d, 0, n, got);
    for (int64_t i = 0; i < n; i++) ASSERT_EQ(got[i], want[i]);
    sharc_dataset_free(d);
}

static void expect_error(const char *path, sharc_token_format fmt, int vocab, const char *substr) {
    sharc_dataset *d = NULL;
    sharc_status st = sharc_dataset_open(&d, path, fmt, vocab);
    if (st == SHARC_OK || !strstr(sharc_last_error(), substr) || !strstr(sharc_last_error(), path))
        TEST_FAIL_AT("open '%s': status %d, message '%s', expected '%s' and the path", path, (int)st,
                     sharc_last_error(), substr);
    ASSERT_TRUE(d == NULL);
}

TEST(data_formats_read_back) {
    int32_t want[6] = {0, 1, 65535, 7, 300, 2};
    uint16_t u16[6];
    uint32_t u32[6] = {0, 1, 65535, 7, 300, 70000};
    int32_t want32[6] = {0, 1, 65535, 7, 300, 70000};
    for (int i = 0; i < 6; i++) u16[i] = (uint16_t)want[i];
    write_bytes(tmp_path("a.bin"), u16, sizeof u16);
    expect_tokens(tmp_path("a.bin"), SHARC_TOKENS_AUTO, 65536, want, 6, SHARC_TOKENS_U16);
    write_bytes(tmp_path("a.dat"), u16, sizeof u16);
    expect_tokens(tmp_path("a.dat"), SHARC_TOKENS_U16, 65536, want, 6, SHARC_TOKENS_U16);
    write_bytes(tmp_path("a.u32"), u32, sizeof u32);
    expect_tokens(tmp_path("a.u32"), SHARC_TOKENS_AUTO, 100000, want32, 6, SHARC_TOKENS_U32);
    write_llmc(tmp_path("s16.bin"), 20240520, 1, 6, u16, sizeof u16);
    expect_tokens(tmp_path("s16.bin"), SHARC_TOKENS_AUTO, 65536, want, 6, SHARC_TOKENS_LLMC);
    write_llmc(tmp_path("s32.bin"), 20240801, 7, 6, u32, sizeof u32);
    expect_tokens(tmp_path("s32.bin"), SHARC_TOKENS_LLMC, 100000, want32, 6, SHARC_TOKENS_LLMC);
    const char *text = "Hi\xc3\xa9!";
    int32_t want_text[5] = {'H', 'i', 0xc3, 0xa9, '!'};
    write_bytes(tmp_path("t.txt"), text, 5);
    expect_tokens(tmp_path("t.txt"), SHARC_TOKENS_AUTO, 256, want_text, 5, SHARC_TOKENS_TEXT);
}

TEST(data_bad_files_are_refused) {
    uint16_t u16[3] = {1, 2, 3};
    write_bytes(tmp_path("odd.bin"), u16, 5);
    expect_error(tmp_path("odd.bin"), SHARC_TOKENS_AUTO, 100, "5 bytes is not a whole number of u16 tokens");
    write_bytes(tmp_path("odd.u32"), u16, 6);
    expect_error(tmp_path("odd.u32"), SHARC_TOKENS_AUTO, 100, "not a whole number of u32 tokens");
    write_bytes(tmp_path("empty.bin"), u16, 0);
    expect_error(tmp_path("empty.bin"), SHARC_TOKENS_AUTO, 100, "is empty");
    uint16_t big[3] = {1, 99, 100};
    write_bytes(tmp_path("big.bin"), big, sizeof big);
    expect_error(tmp_path("big.bin"), SHARC_TOKENS_AUTO, 100,
                 "token 100 at position 2 is outside the vocabulary [0, 100)");
    write_llmc(tmp_path("short.bin"), 20240520, 1, 10, u16, sizeof u16);
    expect_error(tmp_path("short.bin"), SHARC_TOKENS_AUTO, 100,
                 "llm.c header says 10 tokens (1044 bytes) but the file has 1030 bytes");
    write_llmc(tmp_path("ver.bin"), 20240520, 3, 3, u16, sizeof u16);
    expect_error(tmp_path("ver.bin"), SHARC_TOKENS_LLMC, 100, "llm.c header magic 20240520 version 3");
    write_bytes(tmp_path("hdr.bin"), u16, 6);
    expect_error(tmp_path("hdr.bin"), SHARC_TOKENS_LLMC, 100, "shorter than the llm.c header");
    write_bytes(tmp_path("x.dat"), u16, 6);
    expect_error(tmp_path("x.dat"), SHARC_TOKENS_AUTO, 100, "set data.format");
    write_bytes(tmp_path("t.txt"), "abc", 3);
    expect_error(tmp_path("t.txt"), SHARC_TOKENS_AUTO, 100, "needs model.vocab_size >= 256");
    expect_error(tmp_path("missing.bin"), SHARC_TOKENS_AUTO, 100, "cannot open");
}

static sharc_dataset *counting_file(int64_t n, const char *name) {
    uint16_t *t = malloc(sizeof(uint16_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++) t[i] = (uint16_t)i;
    write_bytes(tmp_path(name), t, sizeof(uint16_t) * (size_t)n);
    free(t);
    sharc_dataset *d;
    ASSERT_OK(sharc_dataset_open(&d, tmp_path(name), SHARC_TOKENS_U16, 65536));
    return d;
}

TEST(data_sampler_consecutive_windows) {
    sharc_dataset *d = counting_file(1000, "count.bin");
    sharc_sampler_config c = {.seq_len = 8, .batch_size = 2, .grad_accum = 1, .dp_size = 1};
    sharc_sampler *s;
    ASSERT_OK(sharc_sampler_init(&s, d, &c));
    ASSERT_EQ(sharc_sampler_windows(s), 999 / 8);
    int32_t in[16], tg[16];
    sharc_sampler_batch(s, 3, 0, 0, in, tg); /* step 3: windows 6 and 7 */
    for (int i = 0; i < 2; i++)
        for (int t = 0; t < 8; t++) {
            ASSERT_EQ(in[i * 8 + t], (6 + i) * 8 + t);
            ASSERT_EQ(tg[i * 8 + t], (6 + i) * 8 + t + 1);
        }
    /* wraps around after the last window */
    int64_t W = sharc_sampler_windows(s);
    ASSERT_EQ(sharc_sampler_window_of(s, W + 5), 5);
    sharc_sampler_free(s);
    sharc_dataset_free(d);

    sharc_dataset *tiny = counting_file(8, "tiny.bin");
    ASSERT_TRUE(sharc_sampler_init(&s, tiny, &c) == SHARC_ERR_INVALID);
    ASSERT_TRUE(strstr(sharc_last_error(), "train.seq_len") != NULL);
    sharc_dataset_free(tiny);
}

/* The windows of one step, as a sorted list, for a (B, A, R) split. */
static void step_windows(sharc_dataset *d, bool shuffle, int B, int A, int R, int64_t step, int64_t *out) {
    sharc_sampler_config c = {.seq_len = 4, .batch_size = B, .grad_accum = A, .dp_size = R, .shuffle = shuffle, .seed = 9};
    sharc_sampler *s;
    ASSERT_OK(sharc_sampler_init(&s, d, &c));
    int n = 0;
    int32_t in[16], tg[16];
    for (int r = 0; r < R; r++)
        for (int m = 0; m < A; m++) {
            sharc_sampler_batch(s, step, m, r, in, tg);
            for (int i = 0; i < B; i++) out[n++] = in[i * 4] / 4;
        }
    for (int i = 0; i < n; i++) /* insertion sort */
        for (int j = i; j > 0 && out[j - 1] > out[j]; j--) {
            int64_t t = out[j];
            out[j] = out[j - 1];
            out[j - 1] = t;
        }
    sharc_sampler_free(s);
}

TEST(data_global_batch_independent_of_ranks) {
    sharc_dataset *d = counting_file(4 * 50 + 1, "g.bin");
    for (int shuffle = 0; shuffle <= 1; shuffle++)
        for (int B = 1; B <= 2; B++)
            for (int64_t step = 0; step < 30; step += 7) {
                int64_t ref[8], got[8];
                step_windows(d, shuffle, B, 4, 1, step, ref);
                step_windows(d, shuffle, B, 2, 2, step, got);
                for (int i = 0; i < 4 * B; i++) ASSERT_EQ(got[i], ref[i]);
                step_windows(d, shuffle, B, 1, 4, step, got);
                for (int i = 0; i < 4 * B; i++) ASSERT_EQ(got[i], ref[i]);
            }
    sharc_dataset_free(d);
}

TEST(data_shuffle_is_a_seeded_permutation_per_epoch) {
    sharc_dataset *d = counting_file(4 * 37 + 1, "p.bin");
    sharc_sampler_config c = {.seq_len = 4, .batch_size = 1, .grad_accum = 1, .dp_size = 1, .shuffle = true, .seed = 1};
    sharc_sampler *a, *b, *other;
    ASSERT_OK(sharc_sampler_init(&a, d, &c));
    ASSERT_OK(sharc_sampler_init(&b, d, &c));
    c.seed = 2;
    ASSERT_OK(sharc_sampler_init(&other, d, &c));
    int64_t W = sharc_sampler_windows(a);
    ASSERT_EQ(W, 37);
    int seen[37], differs_seed = 0, differs_epoch = 0, moved = 0;
    for (int e = 0; e < 3; e++) {
        memset(seen, 0, sizeof seen);
        for (int64_t p = 0; p < W; p++) {
            int64_t w = sharc_sampler_window_of(a, e * W + p);
            ASSERT_TRUE(w >= 0 && w < W);
            seen[w]++;
            ASSERT_EQ(sharc_sampler_window_of(b, e * W + p), w);
            differs_seed += sharc_sampler_window_of(other, e * W + p) != w;
            if (e == 1) differs_epoch += sharc_sampler_window_of(b, p) != w;
            moved += w != p;
        }
        for (int w = 0; w < W; w++) ASSERT_EQ(seen[w], 1);
    }
    ASSERT_TRUE(differs_seed > 0 && differs_epoch > 0 && moved > 0);
    sharc_sampler_free(a);
    sharc_sampler_free(b);
    sharc_sampler_free(other);
    sharc_dataset_free(d);
}

TEST(data_byte_tokenizer_round_trip) {
    const char *s = "caf\xc3\xa9 \n\t\x01\xff";
    int32_t tok[16];
    char back[16];
    int64_t n = sharc_byte_encode(s, (int64_t)strlen(s), tok);
    ASSERT_EQ(n, (int64_t)strlen(s));
    ASSERT_EQ(tok[4], 0xa9);
    ASSERT_EQ(tok[n - 1], 255);
    ASSERT_EQ(sharc_byte_decode(tok, n, back), n);
    ASSERT_TRUE(memcmp(back, s, (size_t)n) == 0);
    ASSERT_EQ(sharc_token_format_parse("LLMC"), SHARC_TOKENS_LLMC);
    ASSERT_EQ(sharc_token_format_parse("parquet"), -1);
}
