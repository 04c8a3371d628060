/* fuzz_tokenizer.c: libFuzzer entry point for the tokenizer loader and
 * encoder (src/data/tokenizer.c, encoder.c). An input is a tokenizer.json,
 * optionally followed by "\n--\n" and a tokenizer_config.json, optionally
 * followed by another "\n--\n" and a text. A file the loader refuses must
 * come back as an error with no tokenizer; one it accepts is used: the text
 * is encoded (invalid UTF-8 must be refused, not crash), every id must have
 * a token, and for a tokenizer without a normaliser decode(encode(x)) == x.
 * Built and run by `make fuzz` (FUZZ_SECONDS) and tests/cli/fuzz_tokenizer.sh,
 * with AddressSanitizer and UBSan. */
#include "sharc/tokenizer.h"
#include "../../src/data/tokenizer_impl.h" /* whether it normalises */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *cut(const char *s, const char *end) {
    for (const char *p = s; p + 4 <= end; p++)
        if (!memcmp(p, "\n--\n", 4)) return p;
    return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *buf = malloc(size + 1);
    memcpy(buf, data, size);
    buf[size] = 0;
    const char *end = buf + size, *c1 = cut(buf, end), *c2 = c1 ? cut(c1 + 4, end) : NULL;
    size_t json_len = c1 ? (size_t)(c1 - buf) : size;
    char *config = NULL;
    if (c1) {
        size_t n = (size_t)((c2 ? c2 : end) - (c1 + 4));
        config = malloc(n + 1);
        memcpy(config, c1 + 4, n);
        config[n] = 0;
    }
    const char *text = c2 ? c2 + 4 : "Hello, <|endoftext|> world! It's 2024.\n\n  caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87";
    size_t text_len = c2 ? (size_t)(end - text) : strlen(text);
    sharc_tokenizer *t = (sharc_tokenizer *)1;
    if (sharc_tokenizer_load_json(&t, buf, json_len, config, "fuzz") != SHARC_OK) {
        if (t) abort(); /* a failed load returns no tokenizer */
        free(buf);
        free(config);
        return 0;
    }
    sharc_encoder *e = NULL;
    if (sharc_encoder_init(&e, t) != SHARC_OK) abort();
    sharc_ids ids = {0};
    if (sharc_encoder_encode(e, text, text_len, &ids) == SHARC_OK) {
        for (size_t i = 0; i < ids.n; i++) {
            size_t len;
            if (ids.ids[i] < 0 || ids.ids[i] >= sharc_tokenizer_num_ids(t) ||
                !sharc_tokenizer_token_bytes(t, ids.ids[i], &len))
                abort();
        }
        size_t norm;
        if (sharc_encoder_normalized_length(e, text, text_len, &norm) != SHARC_OK) abort();
        char *d;
        size_t dl;
        if (sharc_tokenizer_decode(t, ids.ids, ids.n, &d, &dl) != SHARC_OK) abort();
        if (dl != norm) abort();
        if (!t->nfc && (dl != text_len || memcmp(d, text, dl) != 0)) abort(); /* lossless without a normaliser */
        free(d);
    }
    sharc_ids_free(&ids);
    sharc_encoder_free(e);
    sharc_tokenizer_free(t);
    free(buf);
    free(config);
    return 0;
}
