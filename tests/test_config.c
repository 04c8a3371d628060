/* test_config.c: YAML/JSON config loading, overrides, the printed form and
 * every error path (a table of malformed configs with the message each must
 * produce). */
#include "sharc/config.h"
#include "test.h"

#include <string.h>

TEST(config_yaml_sections_and_types) {
    sharc_config c;
    sharc_config_default(&c);
    const char *y = "model:\n"
                    "  family: llama\n"
                    "  num_layers: 3\n"
                    "  embed_dim: 96\n"
                    "  num_heads: 6\n"
                    "  num_kv_heads: 2\n"
                    "  tie_embeddings: false\n"
                    "data:\n"
                    "  path: /tmp/x.bin\n"
                    "  format: u16\n"
                    "  shuffle: no\n"
                    "optim:\n"
                    "  lr: 3.0e-4\n"
                    "  betas: [0.8, 0.99]\n"
                    "  lr_decay: linear\n"
                    "train:\n"
                    "  max_steps: 12345678901\n"
                    "  seed: 18446744073709551615\n"
                    "fsdp:\n"
                    "  activation_checkpointing: true\n";
    ASSERT_OK(sharc_config_load_string(&c, y, "t.yaml"));
    ASSERT_EQ(c.model.family, SHARC_FAMILY_LLAMA);
    ASSERT_EQ(c.model.num_layers, 3);
    ASSERT_EQ(c.model.num_kv_heads, 2);
    ASSERT_TRUE(!c.model.tie_embeddings);
    ASSERT_TRUE(strcmp(c.data.path, "/tmp/x.bin") == 0);
    ASSERT_EQ(c.data.format, SHARC_TOKENS_U16);
    ASSERT_TRUE(!c.data.shuffle);
    ASSERT_NEAR(c.optim.lr, 3e-4, 1e-7, 0);
    ASSERT_NEAR(c.optim.beta1, 0.8, 1e-7, 0);
    ASSERT_NEAR(c.optim.beta2, 0.99, 1e-7, 0);
    ASSERT_EQ(c.optim.decay, SHARC_LR_LINEAR);
    ASSERT_EQ(c.train.max_steps, 12345678901ll);
    ASSERT_TRUE(c.train.seed == 18446744073709551615ull);
    ASSERT_TRUE(c.fsdp.activation_checkpointing);
    ASSERT_OK(sharc_config_validate(&c));
}

TEST(config_json_is_accepted) {
    sharc_config c;
    sharc_config_default(&c);
    ASSERT_OK(sharc_config_load_string(
        &c, "{\"model\": {\"num_layers\": 2, \"family\": \"gpt2\"}, \"optim\": {\"betas\": [0.9, 0.9]}}",
        "t.json"));
    ASSERT_EQ(c.model.num_layers, 2);
    ASSERT_NEAR(c.optim.beta2, 0.9, 1e-7, 0);
}

TEST(config_overrides_and_roundtrip) {
    sharc_config c, d;
    sharc_config_default(&c);
    ASSERT_OK(sharc_config_set(&c, "train.batch_size", "7", "cli"));
    ASSERT_OK(sharc_config_set(&c, "optim.lr", "0.125", "cli"));
    ASSERT_OK(sharc_config_set(&c, "data.path", "some file.txt", "cli"));
    ASSERT_OK(sharc_config_validate(&c));
    char *yaml = sharc_config_to_yaml(&c);
    ASSERT_TRUE(yaml != NULL);
    memset(&d, 0x5a, sizeof d);
    sharc_config_default(&d);
    ASSERT_OK(sharc_config_load_string(&d, yaml, "roundtrip"));
    ASSERT_OK(sharc_config_validate(&d));
    ASSERT_EQ(d.train.batch_size, 7);
    ASSERT_TRUE(d.optim.lr == 0.125f);
    ASSERT_TRUE(strcmp(d.data.path, "some file.txt") == 0);
    ASSERT_TRUE(memcmp(&c.model, &d.model, sizeof c.model) == 0);
    ASSERT_TRUE(memcmp(&c.optim, &d.optim, sizeof c.optim) == 0);
    free(yaml);
}

TEST(config_errors_name_key_value_and_allowed) {
    static const struct {
        const char *yaml;
        const char *message; /* a substring the error must contain */
    } cases[] = {
        {"model:\n  num_layer: 3\n", "line 2: unknown key 'model.num_layer'; did you mean 'model.num_layers'?"},
        {"modle:\n  num_layers: 3\n", "unknown key 'modle.num_layers'; did you mean 'model.num_layers'?"},
        {"model:\n  num_layers: three\n", "model.num_layers = 'three': expected an integer"},
        {"model:\n  num_layers: 0\n", "model.num_layers = '0': expected a value in [1, 4096]"},
        {"model:\n  family: gpt3\n", "model.family = 'gpt3': expected one of gpt2, llama"},
        {"optim:\n  lr: fast\n", "optim.lr = 'fast': expected a number"},
        {"optim:\n  betas: [0.9]\n", "optim.betas = '0.9': expected a list of two numbers"},
        {"optim:\n  weight_decay: -1\n", "optim.weight_decay = '-1': expected a value in [0, 10]"},
        {"data:\n  shuffle: maybe\n", "data.shuffle = 'maybe': expected true or false"},
        {"data:\n  format: parquet\n", "data.format = 'parquet': expected one of auto, u16, u32, llmc, text"},
        {"train:\n  seed: -3\n", "train.seed = '-3': expected a non-negative integer"},
        {"train:\n  batch_size: 4\n  batch_size: [1, 2]\n", "train.batch_size = '1,2': expected an integer"},
        {"model: [1, 2]\n", "unknown key 'model'"},
        {"- a\n- b\n", "line 1: expected a mapping of sections"},
        {"model:\n  num_layers: 3: 4\n", "line 2: not valid YAML"},
        {"model:\n  num_layers: [3\n", "not valid YAML"},
        {"model: &a\n  num_layers: 3\ndata: *a\n", "aliases and anchors are not supported"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sharc_config c;
        sharc_config_default(&c);
        sharc_status st = sharc_config_load_string(&c, cases[i].yaml, "bad.yaml");
        if (st != SHARC_ERR_INVALID || !strstr(sharc_last_error(), cases[i].message) ||
            !strstr(sharc_last_error(), "bad.yaml"))
            TEST_FAIL_AT("case %zu: status %d, message '%s', expected '%s'", i, (int)st,
                         sharc_last_error(), cases[i].message);
    }
}

TEST(config_validate_cross_key_errors) {
    static const struct {
        const char *key, *value, *message;
    } cases[] = {
        {"model.num_heads", "5", "model.num_heads: 5 does not divide model.embed_dim 256"},
        {"model.num_kv_heads", "3", "model.num_kv_heads: 3 does not divide model.num_heads 4"},
        {"train.seq_len", "4096", "train.seq_len: 4096 exceeds model.max_seq_len 128"},
        {"optim.beta2", "1", "optim.betas: [0.9, 1], each must be in [0, 1)"},
        {"data.path", "", "data.path: empty"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sharc_config c;
        sharc_config_default(&c);
        ASSERT_OK(sharc_config_set(&c, cases[i].key, cases[i].value, "cli"));
        sharc_status st = sharc_config_validate(&c);
        if (st != SHARC_ERR_INVALID || !strstr(sharc_last_error(), cases[i].message))
            TEST_FAIL_AT("case %zu: status %d, message '%s', expected '%s'", i, (int)st,
                         sharc_last_error(), cases[i].message);
    }
}

TEST(config_missing_file_names_it) {
    sharc_config c;
    sharc_config_default(&c);
    ASSERT_TRUE(sharc_config_load_file(&c, "/nonexistent/cfg.yaml") == SHARC_ERR_IO);
    ASSERT_TRUE(strstr(sharc_last_error(), "/nonexistent/cfg.yaml") != NULL);
}
