/* test_data.c: sharc/data.h. Every token format read back exactly from small
 * files, format detection, every bad file refused with the right status and
 * its name in the message, the memory mapping, the byte tokenizer, and the
 * sampler rule (note [sampler-rule]): consecutive windows, the global batch
 * independent of the data-parallel split, and the seeded per-epoch
 * permutation (note [epoch-permutation] in src/data/sampler.c). */
#include "sharc/alloc.h"
#include "sharc/data.h"
#include "sharc/rng.h"
#include "test.h"

#include <dirent.h>
#include <stdbool.h>
#include <string.h>

/* ---------------- helpers ---------------- */

static const char *tmp_path(const char *name) {
    static char buf[8][1024];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", sharc_test_tmpdir(), name);
    return buf[k];
}

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    ASSERT_TRUE(f != NULL);
    if (n > 0) ASSERT_EQ(fwrite(data, 1, n, f), n);
    ASSERT_EQ(fclose(f), 0);
}

/* llm.c shard: 256 x int32 header (magic, version, count), then tok_bytes. */
static void write_llmc(const char *path, int32_t magic, int32_t version, int32_t count, const void *tok,
                       size_t tok_bytes) {
    unsigned char *buf = calloc(1, 1024 + tok_bytes);
    int32_t h[3] = {magic, version, count};
    memcpy(buf, h, sizeof h);
    if (tok_bytes) memcpy(buf + 1024, tok, tok_bytes);
    write_bytes(path, buf, 1024 + tok_bytes);
    free(buf);
}

static sharc_dataset *open_ok(const char *path, sharc_token_format fmt, int vocab) {
    sharc_dataset *d = NULL;
    ASSERT_OK(sharc_dataset_open(&d, path, fmt, vocab));
    ASSERT_TRUE(d != NULL);
    return d;
}

/* Open, check the resolved format and every token, also read at an offset. */
static void expect_tokens(const char *path, sharc_token_format fmt, int vocab, sharc_token_format resolved,
                          const int32_t *want, int64_t n) {
    sharc_dataset *d = open_ok(path, fmt, vocab);
    ASSERT_EQ(sharc_dataset_num_tokens(d), n);
    ASSERT_EQ(sharc_dataset_format(d), resolved);
    int32_t *got = malloc(sizeof(int32_t) * (size_t)(n + 1));
    got[n] = -77; /* sentinel: read writes exactly n */
    sharc_dataset_read(d, 0, n, got);
    for (int64_t i = 0; i < n; i++) ASSERT_EQ(got[i], want[i]);
    ASSERT_EQ(got[n], -77);
    if (n >= 3) {
        sharc_dataset_read(d, 1, n - 2, got);
        for (int64_t i = 0; i < n - 2; i++) ASSERT_EQ(got[i], want[i + 1]);
    }
    free(got);
    sharc_dataset_free(d);
}

/* Open must fail with `code`, a message naming the file and containing
 * `substr`, and leave *out NULL. */
static void expect_error(const char *path, sharc_token_format fmt, int vocab, sharc_status code, const char *substr) {
    sharc_dataset *d = (sharc_dataset *)&d; /* not NULL: open must clear it */
    sharc_status st = sharc_dataset_open(&d, path, fmt, vocab);
    const char *msg = sharc_last_error();
    if (st != code || !strstr(msg, substr) || !strstr(msg, path) || strchr(msg, '\n'))
        TEST_FAIL_AT("open '%s' (%s, vocab %d): status %d '%s', expected status %d with '%s' and "
                     "the path on one line",
                     path, sharc_token_format_name(fmt), vocab, (int)st, msg, (int)code, substr);
    ASSERT_TRUE(d == NULL);
}

/* A u16 file whose token i is i (n <= 65536). */
static const char *counting_file(int64_t n, const char *name) {
    uint16_t *t = malloc(sizeof(uint16_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++) t[i] = (uint16_t)i;
    const char *path = tmp_path(name);
    write_bytes(path, t, sizeof(uint16_t) * (size_t)n);
    free(t);
    return path;
}

static sharc_dataset *counting_dataset(int64_t n, const char *name) {
    return open_ok(counting_file(n, name), SHARC_TOKENS_U16, 65536);
}

static sharc_sampler *sampler_ok(const sharc_dataset *d, int T, int B, int A, int R, bool shuffle, uint64_t seed) {
    sharc_sampler_config c = {
        .seq_len = T, .batch_size = B, .grad_accum = A, .dp_size = R, .shuffle = shuffle, .seed = seed};
    sharc_sampler *s = NULL;
    ASSERT_OK(sharc_sampler_init(&s, d, &c));
    ASSERT_TRUE(s != NULL);
    return s;
}

/* ---------------- formats read back ---------------- */

TEST(data_u16_read_back) {
    const int32_t want[7] = {0, 1, 65535, 7, 300, 2, 50256};
    uint16_t raw[7];
    for (int i = 0; i < 7; i++) raw[i] = (uint16_t)want[i];
    /* auto by extension (.bin, .u16, upper case), explicit on any name */
    const char *names[] = {"a.bin", "a.u16", "A.BIN", "a.dat", "a.txt"};
    for (int k = 0; k < 5; k++) {
        write_bytes(tmp_path(names[k]), raw, sizeof raw);
        if (k < 3) expect_tokens(tmp_path(names[k]), SHARC_TOKENS_AUTO, 65536, SHARC_TOKENS_U16, want, 7);
        expect_tokens(tmp_path(names[k]), SHARC_TOKENS_U16, 65536, SHARC_TOKENS_U16, want, 7);
    }
    /* the largest token equal to vocab_size - 1 is accepted */
    uint16_t edge[3] = {4, 9, 3};
    const int32_t want_edge[3] = {4, 9, 3};
    write_bytes(tmp_path("edge.bin"), edge, sizeof edge);
    expect_tokens(tmp_path("edge.bin"), SHARC_TOKENS_AUTO, 10, SHARC_TOKENS_U16, want_edge, 3);
    /* a single token is a valid file */
    write_bytes(tmp_path("one.bin"), edge, 2);
    expect_tokens(tmp_path("one.bin"), SHARC_TOKENS_AUTO, 10, SHARC_TOKENS_U16, want_edge, 1);
}

TEST(data_u32_read_back) {
    const int32_t want[6] = {0, 1, 65535, 65536, 70000, 151935};
    uint32_t raw[6];
    for (int i = 0; i < 6; i++) raw[i] = (uint32_t)want[i];
    write_bytes(tmp_path("a.u32"), raw, sizeof raw);
    expect_tokens(tmp_path("a.u32"), SHARC_TOKENS_AUTO, 151936, SHARC_TOKENS_U32, want, 6);
    write_bytes(tmp_path("A.U32"), raw, sizeof raw);
    expect_tokens(tmp_path("A.U32"), SHARC_TOKENS_AUTO, 151936, SHARC_TOKENS_U32, want, 6);
    /* .bin auto-detects as u16, so u32 on a .bin needs the explicit format */
    write_bytes(tmp_path("w.bin"), raw, sizeof raw);
    expect_tokens(tmp_path("w.bin"), SHARC_TOKENS_U32, 151936, SHARC_TOKENS_U32, want, 6);
    sharc_dataset *d = open_ok(tmp_path("w.bin"), SHARC_TOKENS_AUTO, 151936);
    ASSERT_EQ(sharc_dataset_num_tokens(d), 12);
    int32_t got[12];
    sharc_dataset_read(d, 0, 12, got);
    ASSERT_EQ(got[6], 65536 & 0xffff);
    ASSERT_EQ(got[7], 65536 >> 16);
    sharc_dataset_free(d);
}

TEST(data_llmc_read_back_both_versions) {
    const int32_t want16[5] = {50256, 0, 1, 65535, 464};
    uint16_t raw16[5];
    for (int i = 0; i < 5; i++) raw16[i] = (uint16_t)want16[i];
    const int32_t want32[4] = {128000, 0, 65536, 128255};
    uint32_t raw32[4];
    for (int i = 0; i < 4; i++) raw32[i] = (uint32_t)want32[i];
    /* the magic decides under auto, whatever the extension */
    const char *names[] = {"s.bin", "s.dat", "s.txt", "s.u32", "shard"};
    for (int k = 0; k < 5; k++) {
        char n16[64], n32[64];
        snprintf(n16, sizeof n16, "v1_%s", names[k]);
        snprintf(n32, sizeof n32, "v7_%s", names[k]);
        write_llmc(tmp_path(n16), 20240520, 1, 5, raw16, sizeof raw16);
        write_llmc(tmp_path(n32), 20240801, 7, 4, raw32, sizeof raw32);
        expect_tokens(tmp_path(n16), SHARC_TOKENS_AUTO, 65536, SHARC_TOKENS_LLMC, want16, 5);
        expect_tokens(tmp_path(n32), SHARC_TOKENS_AUTO, 128256, SHARC_TOKENS_LLMC, want32, 4);
        expect_tokens(tmp_path(n16), SHARC_TOKENS_LLMC, 65536, SHARC_TOKENS_LLMC, want16, 5);
        expect_tokens(tmp_path(n32), SHARC_TOKENS_LLMC, 128256, SHARC_TOKENS_LLMC, want32, 4);
    }
    /* an explicit raw format skips detection: the header is read as tokens */
    sharc_dataset *d = open_ok(tmp_path("v1_s.bin"), SHARC_TOKENS_U16, 65536);
    ASSERT_EQ(sharc_dataset_format(d), SHARC_TOKENS_U16);
    ASSERT_EQ(sharc_dataset_num_tokens(d), (1024 + 10) / 2);
    int32_t got[3];
    sharc_dataset_read(d, 0, 3, got);
    ASSERT_EQ(got[0], 20240520 & 0xffff);
    ASSERT_EQ(got[1], 20240520 >> 16);
    ASSERT_EQ(got[2], 1);
    sharc_dataset_read(d, 512, 1, got);
    ASSERT_EQ(got[0], 50256);
    sharc_dataset_free(d);
}

TEST(data_text_read_back) {
    const char text[] = "Hi\xc3\xa9!\n\x00\xff"; /* UTF-8, a NUL and 0xff are all bytes */
    const int64_t n = (int64_t)sizeof text - 1;
    int32_t want[16];
    for (int64_t i = 0; i < n; i++) want[i] = (unsigned char)text[i];
    ASSERT_EQ(want[2], 0xc3);
    ASSERT_EQ(want[6], 0);
    ASSERT_EQ(want[7], 255);
    const char *names[] = {"t.txt", "t.text", "T.TXT"};
    for (int k = 0; k < 3; k++) {
        write_bytes(tmp_path(names[k]), text, (size_t)n);
        expect_tokens(tmp_path(names[k]), SHARC_TOKENS_AUTO, 256, SHARC_TOKENS_TEXT, want, n);
    }
    write_bytes(tmp_path("t.bin"), text, (size_t)n);
    expect_tokens(tmp_path("t.bin"), SHARC_TOKENS_TEXT, 50257, SHARC_TOKENS_TEXT, want, n);
    /* one byte is one token */
    write_bytes(tmp_path("one.txt"), "x", 1);
    const int32_t x = 'x';
    expect_tokens(tmp_path("one.txt"), SHARC_TOKENS_AUTO, 256, SHARC_TOKENS_TEXT, &x, 1);
}

/* ---------------- bad input ---------------- */

TEST(data_bad_sizes_are_refused) {
    const uint32_t raw[4] = {1, 2, 3, 4};
    write_bytes(tmp_path("odd.bin"), raw, 5);
    expect_error(tmp_path("odd.bin"), SHARC_TOKENS_AUTO, 100, SHARC_ERR_FORMAT,
                 "5 bytes is not a whole number of u16 tokens");
    write_bytes(tmp_path("odd.dat"), raw, 1);
    expect_error(tmp_path("odd.dat"), SHARC_TOKENS_U16, 100, SHARC_ERR_FORMAT,
                 "1 bytes is not a whole number of u16 tokens");
    for (size_t n = 1; n <= 7; n++) {
        if (n == 4) continue;
        char name[32], want[64];
        snprintf(name, sizeof name, "s%zu.u32", n);
        snprintf(want, sizeof want, "%zu bytes is not a whole number of u32 tokens", n);
        write_bytes(tmp_path(name), raw, n);
        expect_error(tmp_path(name), SHARC_TOKENS_AUTO, 100, SHARC_ERR_FORMAT, want);
        expect_error(tmp_path(name), SHARC_TOKENS_U32, 100, SHARC_ERR_FORMAT, want);
    }
    /* empty files, under every format */
    const char *empties[] = {"e.bin", "e.u32", "e.txt", "e.dat"};
    for (int k = 0; k < 4; k++) write_bytes(tmp_path(empties[k]), raw, 0);
    expect_error(tmp_path("e.bin"), SHARC_TOKENS_AUTO, 300, SHARC_ERR_FORMAT, "is empty");
    expect_error(tmp_path("e.u32"), SHARC_TOKENS_AUTO, 300, SHARC_ERR_FORMAT, "is empty");
    expect_error(tmp_path("e.txt"), SHARC_TOKENS_AUTO, 300, SHARC_ERR_FORMAT, "is empty");
    expect_error(tmp_path("e.dat"), SHARC_TOKENS_AUTO, 300, SHARC_ERR_FORMAT, "is empty");
    for (int f = SHARC_TOKENS_U16; f <= SHARC_TOKENS_TEXT; f++)
        expect_error(tmp_path("e.dat"), (sharc_token_format)f, 300, SHARC_ERR_FORMAT, "is empty");
}

TEST(data_bad_llmc_is_refused) {
    const uint16_t t16[3] = {1, 2, 3};
    const uint32_t t32[3] = {1, 2, 3};
    /* token count disagrees with the size, both ways, both versions */
    write_llmc(tmp_path("long.bin"), 20240520, 1, 10, t16, sizeof t16);
    expect_error(tmp_path("long.bin"), SHARC_TOKENS_AUTO, 100, SHARC_ERR_FORMAT,
                 "llm.c header says 10 tokens (1044 bytes) but the file has 1030 bytes");
    write_llmc(tmp_path("short.bin"), 20240520, 1, 2, t16, sizeof t16);
    expect_error(tmp_path("short.bin"), SHARC_TOKENS_LLMC, 100, SHARC_ERR_FORMAT,
                 "llm.c header says 2 tokens (1028 bytes) but the file has 1030 bytes");
    write_llmc(tmp_path("long32.bin"), 20240801, 7, 4, t32, sizeof t32);
    expect_error(tmp_path("long32.bin"), SHARC_TOKENS_AUTO, 100, SHARC_ERR_FORMAT,
                 "llm.c header says 4 tokens (1040 bytes) but the file has 1036 bytes");
    /* uint16 tokens under the uint32 magic: 6 bytes of tokens, 3 expected */
    write_llmc(tmp_path("mix.bin"), 20240801, 7, 3, t16, sizeof t16);
    expect_error(tmp_path("mix.bin"), SHARC_TOKENS_AUTO, 100, SHARC_ERR_FORMAT,
                 "llm.c header says 3 tokens (1036 bytes) but the file has 1030 bytes");
    write_llmc(tmp_path("neg.bin"), 20240520, 1, -1, t16, sizeof t16);
    expect_error(tmp_path("neg.bin"), SHARC_TOKENS_AUTO, 100, SHARC_ERR_FORMAT, "llm.c header says -1 tokens");
    /* wrong versions, swapped versions, no magic under an explicit llmc */
    write_llmc(tmp_path("v3.bin"), 20240520, 3, 3, t16, sizeof t16);
    expect_error(tmp_path("v3.bin"), SHARC_TOKENS_AUTO, 100, SHARC_ERR_FORMAT,
                 "llm.c header has magic 20240520 version 3; expected magic 20240520 version 1");
    write_llmc(tmp_path("v1.bin"), 20240801, 1, 3, t32, sizeof t32);
    expect_error(tmp_path("v1.bin"), SHARC_TOKENS_AUTO, 100, SHARC_ERR_FORMAT, "magic 20240801 version 1");
    write_llmc(tmp_path("v7.bin"), 20240520, 7, 3, t16, sizeof t16);
    expect_error(tmp_path("v7.bin"), SHARC_TOKENS_LLMC, 100, SHARC_ERR_FORMAT, "magic 20240520 version 7");
    write_llmc(tmp_path("nomagic.bin"), 12345, 1, 3, t16, sizeof t16);
    expect_error(tmp_path("nomagic.bin"), SHARC_TOKENS_LLMC, 100, SHARC_ERR_FORMAT,
                 "llm.c header has magic 12345 version 1");
    /* a header and no tokens */
    write_llmc(tmp_path("none.bin"), 20240520, 1, 0, t16, 0);
    expect_error(tmp_path("none.bin"), SHARC_TOKENS_AUTO, 100, SHARC_ERR_FORMAT, "holds no tokens");
    /* shorter than the header: explicit, and auto with a magic */
    write_bytes(tmp_path("tiny.bin"), t16, 6);
    expect_error(tmp_path("tiny.bin"), SHARC_TOKENS_LLMC, 100, SHARC_ERR_FORMAT,
                 "6 bytes is shorter than the 1024-byte llm.c header");
    const int32_t magic_only[2] = {20240801, 7};
    write_bytes(tmp_path("hdr.dat"), magic_only, sizeof magic_only);
    expect_error(tmp_path("hdr.dat"), SHARC_TOKENS_AUTO, 100, SHARC_ERR_FORMAT,
                 "8 bytes is shorter than the 1024-byte llm.c header");
}

TEST(data_out_of_vocab_tokens_are_refused) {
    const uint16_t t16[4] = {1, 99, 100, 500};
    write_bytes(tmp_path("big.bin"), t16, sizeof t16);
    expect_error(tmp_path("big.bin"), SHARC_TOKENS_AUTO, 100, SHARC_ERR_FORMAT,
                 "token 100 at position 2 is outside the vocabulary [0, 100)");
    write_llmc(tmp_path("big_llmc.bin"), 20240520, 1, 4, t16, sizeof t16);
    expect_error(tmp_path("big_llmc.bin"), SHARC_TOKENS_AUTO, 50, SHARC_ERR_FORMAT,
                 "token 99 at position 1 is outside the vocabulary [0, 50)");
    /* u32: values past 2^31 are printed unsigned, not as negatives */
    const uint32_t t32[4] = {5, 6, 7, 0xffffffffu};
    write_bytes(tmp_path("big.u32"), t32, sizeof t32);
    expect_error(tmp_path("big.u32"), SHARC_TOKENS_AUTO, 50257, SHARC_ERR_FORMAT,
                 "token 4294967295 at position 3 is outside the vocabulary [0, 50257)");
    write_llmc(tmp_path("big_llmc.u32"), 20240801, 7, 4, t32, sizeof t32);
    expect_error(tmp_path("big_llmc.u32"), SHARC_TOKENS_AUTO, 7, SHARC_ERR_FORMAT,
                 "token 7 at position 2 is outside the vocabulary [0, 7)");
    /* a long file: the first bad token is the one reported, not the largest */
    const int64_t n = 300000;
    uint16_t *t = malloc(sizeof(uint16_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++) t[i] = (uint16_t)(i % 1000);
    t[200001] = 1234;
    t[250000] = 60000;
    write_bytes(tmp_path("long.bin"), t, sizeof(uint16_t) * (size_t)n);
    expect_error(tmp_path("long.bin"), SHARC_TOKENS_AUTO, 1000, SHARC_ERR_FORMAT,
                 "token 1234 at position 200001 is outside the vocabulary [0, 1000)");
    expect_error(tmp_path("long.bin"), SHARC_TOKENS_AUTO, 1235, SHARC_ERR_FORMAT,
                 "token 60000 at position 250000 is outside the vocabulary [0, 1235)");
    sharc_dataset *d = open_ok(tmp_path("long.bin"), SHARC_TOKENS_AUTO, 60001);
    ASSERT_EQ(sharc_dataset_num_tokens(d), n);
    sharc_dataset_free(d);
    /* the last token of the file */
    t[200001] = 1;
    t[250000] = 2;
    t[n - 1] = 1000;
    write_bytes(tmp_path("last.bin"), t, sizeof(uint16_t) * (size_t)n);
    expect_error(tmp_path("last.bin"), SHARC_TOKENS_AUTO, 1000, SHARC_ERR_FORMAT, "token 1000 at position 299999");
    free(t);
}

TEST(data_format_and_path_errors) {
    const uint16_t t16[3] = {1, 2, 3};
    write_bytes(tmp_path("x.dat"), t16, sizeof t16);
    const char *want = "cannot tell the token format from the extension; set data.format to u16, "
                       "u32, llmc, text, sft or jsonl";
    expect_error(tmp_path("x.dat"), SHARC_TOKENS_AUTO, 100, SHARC_ERR_INVALID, want);
    write_bytes(tmp_path("noext"), t16, sizeof t16);
    expect_error(tmp_path("noext"), SHARC_TOKENS_AUTO, 100, SHARC_ERR_INVALID, want);
    /* byte-level text needs a vocabulary of at least 256 */
    write_bytes(tmp_path("t.txt"), "abc", 3);
    expect_error(tmp_path("t.txt"), SHARC_TOKENS_AUTO, 100, SHARC_ERR_INVALID,
                 "needs model.vocab_size >= 256 (it is 100)");
    expect_error(tmp_path("x.dat"), SHARC_TOKENS_TEXT, 255, SHARC_ERR_INVALID,
                 "needs model.vocab_size >= 256 (it is 255)");
    /* bad arguments, missing files, directories */
    expect_error(tmp_path("x.dat"), SHARC_TOKENS_U16, 0, SHARC_ERR_INVALID, "model.vocab_size is 0");
    expect_error(tmp_path("x.dat"), (sharc_token_format)42, 100, SHARC_ERR_INVALID, "unknown token format 42");
    expect_error(tmp_path("missing.bin"), SHARC_TOKENS_AUTO, 100, SHARC_ERR_INVALID, "cannot open");
    expect_error(sharc_test_tmpdir(), SHARC_TOKENS_U16, 100, SHARC_ERR_INVALID, "is not a regular file");
    sharc_dataset *d = (sharc_dataset *)&d;
    ASSERT_TRUE(sharc_dataset_open(&d, "", SHARC_TOKENS_AUTO, 100) == SHARC_ERR_INVALID);
    ASSERT_TRUE(strstr(sharc_last_error(), "data.path") != NULL);
    ASSERT_TRUE(d == NULL);
}

/* ---------------- memory mapping and accounting ---------------- */

static bool mapped(const char *path) {
    FILE *f = fopen("/proc/self/maps", "r");
    ASSERT_TRUE(f != NULL);
    char line[4096];
    bool found = false;
    while (fgets(line, sizeof line, f))
        if (strstr(line, path)) found = true;
    fclose(f);
    return found;
}

static int open_fds(void) {
    DIR *dir = opendir("/proc/self/fd");
    ASSERT_TRUE(dir != NULL);
    int n = 0;
    while (readdir(dir)) n++;
    closedir(dir);
    return n;
}

TEST(data_file_is_mapped_not_copied) {
    const int64_t n = 1 << 20; /* 2 MiB of u16 tokens */
    uint16_t *t = malloc(sizeof(uint16_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++) t[i] = (uint16_t)(i * 7 % 50257);
    const char *path = tmp_path("mapped.bin");
    write_bytes(path, t, sizeof(uint16_t) * (size_t)n);
    sharc_mem_stats before, during, after;
    int fds_before = open_fds();
    sharc_mem_get(&before);
    ASSERT_TRUE(!mapped(path));
    sharc_dataset *d = open_ok(path, SHARC_TOKENS_AUTO, 50257);
    sharc_mem_get(&during);
    ASSERT_TRUE(mapped(path));
    ASSERT_EQ(open_fds(), fds_before + 1);
    /* the dataset holds a struct and its path, not the tokens */
    int64_t held = during.current[SHARC_MEM_OTHER] - before.current[SHARC_MEM_OTHER];
    ASSERT_TRUE(held > 0 && held < 4096);
    int32_t got[5];
    sharc_dataset_read(d, n - 5, 5, got);
    for (int i = 0; i < 5; i++) ASSERT_EQ(got[i], t[n - 5 + i]);

    /* the shuffling sampler holds one epoch's permutation, accounted */
    sharc_sampler *s = sampler_ok(d, 64, 2, 1, 1, true, 3);
    const int64_t W = (n - 1) / 64;
    ASSERT_EQ(sharc_sampler_windows(s), W);
    sharc_mem_stats with_sampler;
    sharc_mem_get(&with_sampler);
    ASSERT_TRUE(with_sampler.current[SHARC_MEM_OTHER] - during.current[SHARC_MEM_OTHER] >=
                W * (int64_t)sizeof(int64_t));
    sharc_sampler_free(s);
    sharc_dataset_free(d);
    sharc_mem_get(&after);
    ASSERT_EQ(after.current[SHARC_MEM_OTHER], before.current[SHARC_MEM_OTHER]);
    ASSERT_TRUE(!mapped(path));
    ASSERT_EQ(open_fds(), fds_before);
    free(t);
}

/* ---------------- names and the byte tokenizer ---------------- */

TEST(data_format_names) {
    const char *names[] = {"auto", "u16", "u32", "llmc", "text"};
    const sharc_token_format fmts[] = {SHARC_TOKENS_AUTO, SHARC_TOKENS_U16, SHARC_TOKENS_U32, SHARC_TOKENS_LLMC,
                                       SHARC_TOKENS_TEXT};
    for (int i = 0; i < 5; i++) {
        ASSERT_EQ(sharc_token_format_parse(names[i]), fmts[i]);
        ASSERT_TRUE(strcmp(sharc_token_format_name(fmts[i]), names[i]) == 0);
    }
    ASSERT_EQ(sharc_token_format_parse("LLMC"), SHARC_TOKENS_LLMC);
    ASSERT_EQ(sharc_token_format_parse("parquet"), -1);
    ASSERT_EQ(sharc_token_format_parse(""), -1);
    ASSERT_EQ(sharc_token_format_parse("u16 "), -1);
    ASSERT_EQ(sharc_token_format_parse(NULL), -1);
    ASSERT_TRUE(strcmp(sharc_token_format_name((sharc_token_format)9), "unknown") == 0);
}

TEST(data_byte_tokenizer_round_trip) {
    char all[256], back[256];
    int32_t tok[256];
    for (int i = 0; i < 256; i++) all[i] = (char)i;
    ASSERT_EQ(sharc_byte_encode(all, 256, tok), 256);
    for (int i = 0; i < 256; i++) ASSERT_EQ(tok[i], i);
    ASSERT_EQ(sharc_byte_decode(tok, 256, back), 256);
    ASSERT_TRUE(memcmp(back, all, 256) == 0);
    const char *s = "caf\xc3\xa9 \n\t";
    int64_t n = sharc_byte_encode(s, (int64_t)strlen(s), tok);
    ASSERT_EQ(n, 8);
    ASSERT_EQ(tok[3], 0xc3);
    ASSERT_EQ(tok[4], 0xa9);
    ASSERT_EQ(sharc_byte_decode(tok, n, back), n);
    ASSERT_TRUE(memcmp(back, s, (size_t)n) == 0);
    /* tokens outside [0, 256) have no byte and are skipped */
    const int32_t mixed[6] = {'o', 256, 'k', -1, 50000, '!'};
    memset(back, 0, sizeof back);
    ASSERT_EQ(sharc_byte_decode(mixed, 6, back), 3);
    ASSERT_TRUE(memcmp(back, "ok!", 3) == 0);
    ASSERT_EQ(sharc_byte_encode("", 0, tok), 0);
}

/* ---------------- sampler ---------------- */

TEST(data_sampler_window_count_and_too_short) {
    const int T = 8;
    /* W = (ntokens - 1) / T: a window needs T + 1 tokens */
    const int64_t sizes[][2] = {{9, 1}, {16, 1}, {17, 2}, {24, 2}, {25, 3}, {8 * 40 + 1, 40}};
    for (int k = 0; k < 6; k++) {
        char name[32];
        snprintf(name, sizeof name, "n%lld.bin", (long long)sizes[k][0]);
        sharc_dataset *d = counting_dataset(sizes[k][0], name);
        sharc_sampler *s = sampler_ok(d, T, 1, 1, 1, false, 0);
        ASSERT_EQ(sharc_sampler_windows(s), sizes[k][1]);
        /* the last window ends exactly at or before the last token */
        int32_t in[8], tg[8];
        sharc_sampler_batch(s, sizes[k][1] - 1, 0, 0, in, tg);
        ASSERT_EQ(tg[T - 1], (sizes[k][1] - 1) * T + T);
        ASSERT_TRUE(tg[T - 1] < sizes[k][0]);
        sharc_sampler_free(s);
        sharc_dataset_free(d);
    }
    /* fewer than T + 1 tokens: an error naming train.seq_len and the file */
    const char *path = counting_file(8, "short8.bin");
    sharc_dataset *d = open_ok(path, SHARC_TOKENS_U16, 65536);
    sharc_sampler_config c = {.seq_len = T, .batch_size = 1, .grad_accum = 1, .dp_size = 1};
    for (int shuffle = 0; shuffle <= 1; shuffle++) {
        c.shuffle = shuffle;
        sharc_sampler *s = (sharc_sampler *)&s;
        ASSERT_EQ(sharc_sampler_init(&s, d, &c), SHARC_ERR_INVALID);
        ASSERT_TRUE(s == NULL);
        const char *msg = sharc_last_error();
        if (!strstr(msg, "train.seq_len") || !strstr(msg, path) || !strstr(msg, "8 tokens"))
            TEST_FAIL_AT("unexpected message '%s'", msg);
    }
    /* non-positive sizes are refused by name */
    sharc_sampler *s = NULL;
    c.seq_len = 0;
    ASSERT_EQ(sharc_sampler_init(&s, d, &c), SHARC_ERR_INVALID);
    ASSERT_TRUE(strstr(sharc_last_error(), "train.seq_len is 0") != NULL);
    c.seq_len = 2;
    c.batch_size = 0;
    ASSERT_EQ(sharc_sampler_init(&s, d, &c), SHARC_ERR_INVALID);
    ASSERT_TRUE(strstr(sharc_last_error(), "train.batch_size is 0") != NULL);
    c.batch_size = 1;
    c.grad_accum = -1;
    ASSERT_EQ(sharc_sampler_init(&s, d, &c), SHARC_ERR_INVALID);
    ASSERT_TRUE(strstr(sharc_last_error(), "train.grad_accum is -1") != NULL);
    c.grad_accum = 1;
    c.dp_size = 0;
    ASSERT_EQ(sharc_sampler_init(&s, d, &c), SHARC_ERR_INVALID);
    ASSERT_TRUE(s == NULL);
    sharc_dataset_free(d);
}

TEST(data_sampler_consecutive_windows) {
    /* tokens 0, 1, 2, ...: window w holds w T .. w T + T */
    sharc_dataset *d = counting_dataset(1000, "count.bin");
    sharc_sampler *s = sampler_ok(d, 8, 2, 1, 1, false, 0);
    const int64_t W = sharc_sampler_windows(s);
    ASSERT_EQ(W, 999 / 8);
    int32_t in[16], tg[16];
    sharc_sampler_batch(s, 3, 0, 0, in, tg); /* step 3: windows 6 and 7 */
    for (int i = 0; i < 2; i++)
        for (int t = 0; t < 8; t++) {
            ASSERT_EQ(in[i * 8 + t], (6 + i) * 8 + t);
            ASSERT_EQ(tg[i * 8 + t], (6 + i) * 8 + t + 1);
        }
    /* the last full step of the epoch, then a step straddling the wrap
     * (W = 124 is even, so step 62 is windows 0 and 1 of epoch 1) */
    sharc_sampler_batch(s, 61, 0, 0, in, tg);
    ASSERT_EQ(in[0], 122 * 8);
    ASSERT_EQ(in[8], 123 * 8);
    ASSERT_EQ(tg[15], 123 * 8 + 8);
    sharc_sampler_batch(s, 62, 0, 0, in, tg);
    ASSERT_EQ(in[0], 0);
    ASSERT_EQ(in[8], 8);
    for (int64_t g = 0; g < 3 * W; g++) ASSERT_EQ(sharc_sampler_window_of(s, g), g % W);
    sharc_sampler_free(s);

    /* B = 2, A = 3, R = 2: row i of micro m on rank r is sample
     * step G + m R B + r B + i with G = 12, read as consecutive windows */
    s = sampler_ok(d, 8, 2, 3, 2, false, 0);
    for (int64_t step = 0; step < 25; step++)
        for (int m = 0; m < 3; m++)
            for (int r = 0; r < 2; r++) {
                sharc_sampler_batch(s, step, m, r, in, tg);
                for (int i = 0; i < 2; i++) {
                    int64_t w = (step * 12 + m * 4 + r * 2 + i) % W;
                    for (int t = 0; t < 8; t++) {
                        ASSERT_EQ(in[i * 8 + t], w * 8 + t);
                        ASSERT_EQ(tg[i * 8 + t], w * 8 + t + 1);
                    }
                }
            }
    sharc_sampler_free(s);
    sharc_dataset_free(d);
}

/* The windows of one step in (rank, micro, row) order, from the batches. */
static void step_windows(const sharc_dataset *d, int T, bool shuffle, uint64_t seed, int B, int A, int R, int64_t step,
                         int64_t *out) {
    sharc_sampler *s = sampler_ok(d, T, B, A, R, shuffle, seed);
    int32_t *in = malloc(sizeof(int32_t) * (size_t)(B * T));
    int32_t *tg = malloc(sizeof(int32_t) * (size_t)(B * T));
    int n = 0;
    for (int r = 0; r < R; r++)
        for (int m = 0; m < A; m++) {
            sharc_sampler_batch(s, step, m, r, in, tg);
            for (int i = 0; i < B; i++) {
                ASSERT_EQ(in[i * T] % T, 0);
                for (int t = 0; t < T; t++) {
                    ASSERT_EQ(in[i * T + t], in[i * T] + t);
                    ASSERT_EQ(tg[i * T + t], in[i * T] + t + 1);
                }
                out[n++] = in[i * T] / T;
            }
        }
    free(in);
    free(tg);
    sharc_sampler_free(s);
}

static void sort_i64(int64_t *a, int n) {
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && a[j - 1] > a[j]; j--) {
            int64_t t = a[j];
            a[j] = a[j - 1];
            a[j - 1] = t;
        }
}

TEST(data_global_batch_independent_of_ranks) {
    /* W = 50 windows of T = 4: G = 4 B does not divide W, so some steps
     * straddle an epoch boundary */
    const int T = 4;
    sharc_dataset *d = counting_dataset(T * 50 + 1, "g.bin");
    for (int shuffle = 0; shuffle <= 1; shuffle++)
        for (int B = 1; B <= 2; B++)
            for (int64_t step = 0; step < 40; step++) {
                const int G = 4 * B;
                int64_t a41[8], a22[8], a14[8];
                step_windows(d, T, shuffle, 9, B, 4, 1, step, a41); /* R = 1, A = 4 */
                step_windows(d, T, shuffle, 9, B, 2, 2, step, a22); /* R = 2, A = 2 */
                step_windows(d, T, shuffle, 9, B, 1, 4, step, a14); /* R = 4, A = 1 */
                /* R = 1, A = k equals R = k, A = 1 in order: micro m is rank m */
                for (int i = 0; i < G; i++) ASSERT_EQ(a14[i], a41[i]);
                sort_i64(a41, G);
                sort_i64(a22, G);
                sort_i64(a14, G);
                for (int i = 0; i < G; i++) {
                    ASSERT_EQ(a22[i], a41[i]);
                    ASSERT_EQ(a14[i], a41[i]);
                }
                if (!shuffle) { /* and it is samples step G .. step G + G - 1 */
                    int64_t want[8];
                    for (int j = 0; j < G; j++) want[j] = (step * G + j) % 50;
                    sort_i64(want, G);
                    for (int i = 0; i < G; i++) ASSERT_EQ(a41[i], want[i]);
                }
            }
    sharc_dataset_free(d);
}

TEST(data_sampler_batch_follows_the_rule) {
    /* with shuffling, row i of micro m on rank r is exactly window_of(g) */
    const int T = 5, B = 3, A = 2, R = 2, G = B * A * R;
    sharc_dataset *d = counting_dataset(T * 31 + 3, "rule.bin");
    sharc_sampler *s = sampler_ok(d, T, B, A, R, true, 77);
    sharc_sampler *ref = sampler_ok(d, T, 1, 1, 1, true, 77);
    ASSERT_EQ(sharc_sampler_windows(s), 31);
    int32_t in[15], tg[15];
    for (int64_t step = 0; step < 12; step++)
        for (int m = 0; m < A; m++)
            for (int r = 0; r < R; r++) {
                sharc_sampler_batch(s, step, m, r, in, tg);
                for (int i = 0; i < B; i++) {
                    int64_t w = sharc_sampler_window_of(ref, step * G + m * R * B + r * B + i);
                    for (int t = 0; t < T; t++) {
                        ASSERT_EQ(in[i * T + t], w * T + t);
                        ASSERT_EQ(tg[i * T + t], w * T + t + 1);
                    }
                }
            }
    sharc_sampler_free(s);
    sharc_sampler_free(ref);
    sharc_dataset_free(d);
}

TEST(data_shuffle_is_a_seeded_permutation_per_epoch) {
    sharc_dataset *d = counting_dataset(4 * 37 + 1, "p.bin");
    sharc_sampler *a = sampler_ok(d, 4, 1, 1, 1, true, 1);
    sharc_sampler *b = sampler_ok(d, 4, 1, 1, 1, true, 1);
    sharc_sampler *other = sampler_ok(d, 4, 1, 1, 1, true, 2);
    const int64_t W = sharc_sampler_windows(a);
    ASSERT_EQ(W, 37);
    int64_t order[4][37];
    int differs_seed = 0, moved = 0;
    for (int e = 0; e < 4; e++) {
        int seen[37] = {0};
        for (int64_t p = 0; p < W; p++) {
            int64_t w = sharc_sampler_window_of(a, e * W + p);
            ASSERT_TRUE(w >= 0 && w < W);
            seen[w]++;
            order[e][p] = w;
            ASSERT_EQ(sharc_sampler_window_of(b, e * W + p), w); /* same seed, same order */
            differs_seed += sharc_sampler_window_of(other, e * W + p) != w;
            moved += w != p;
        }
        for (int64_t w = 0; w < W; w++) ASSERT_EQ(seen[w], 1); /* every window once */
    }
    ASSERT_TRUE(differs_seed > W); /* different seeds, different orders */
    ASSERT_TRUE(moved > W);        /* not the identity */
    for (int e = 1; e < 4; e++) {  /* epochs differ from each other */
        int differs = 0;
        for (int64_t p = 0; p < W; p++) differs += order[e][p] != order[e - 1][p];
        ASSERT_TRUE(differs > 0);
    }
    /* any order of requests gives the same windows (the cached epoch is
     * rebuilt on each switch here) */
    for (int64_t p = W - 1; p >= 0; p--)
        for (int e = 3; e >= 0; e--) ASSERT_EQ(sharc_sampler_window_of(b, e * W + p), order[e][p]);
    ASSERT_EQ(sharc_sampler_window_of(b, 100 * W + 5), sharc_sampler_window_of(a, 100 * W + 5));
    sharc_sampler_free(a);
    sharc_sampler_free(b);
    sharc_sampler_free(other);
    sharc_dataset_free(d);
}

TEST(data_shuffle_is_the_documented_fisher_yates) {
    /* note [epoch-permutation] in src/data/sampler.c, recomputed here: the
     * order is part of the format of a run (restarts, N-rank vs 1-rank) */
    const int T = 3;
    const int64_t W = 23;
    sharc_dataset *d = counting_dataset(T * W + 1, "fy.bin");
    const uint64_t seeds[3] = {0, 5, 0x123456789abcdefull};
    for (int k = 0; k < 3; k++) {
        sharc_sampler *s = sampler_ok(d, T, 1, 1, 1, true, seeds[k]);
        for (int64_t e = 0; e < 3; e++) {
            int64_t perm[23];
            for (int64_t i = 0; i < W; i++) perm[i] = i;
            uint64_t c = 0;
            for (int64_t i = W - 1; i >= 1; i--) {
                int64_t j = (int64_t)(sharc_rng_u64(seeds[k], (uint64_t)e, c++) % (uint64_t)(i + 1));
                int64_t t = perm[i];
                perm[i] = perm[j];
                perm[j] = t;
            }
            for (int64_t p = 0; p < W; p++) ASSERT_EQ(sharc_sampler_window_of(s, e * W + p), perm[p]);
        }
        sharc_sampler_free(s);
    }
    /* one window: the permutation is trivially the identity */
    sharc_dataset *one = counting_dataset(T + 1, "fy1.bin");
    sharc_sampler *s = sampler_ok(one, T, 2, 1, 1, true, 4);
    ASSERT_EQ(sharc_sampler_windows(s), 1);
    int32_t in[6], tg[6];
    sharc_sampler_batch(s, 7, 0, 0, in, tg);
    for (int i = 0; i < 2; i++)
        for (int t = 0; t < T; t++) {
            ASSERT_EQ(in[i * T + t], t);
            ASSERT_EQ(tg[i * T + t], t + 1);
        }
    sharc_sampler_free(s);
    sharc_dataset_free(one);
    sharc_dataset_free(d);
}
