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
        &c, "{\"model\": {\"num_layers\": 2, \"family\": \"gpt2\"}, \"optim\": {\"betas\": [0.9, 0.9]}}", "t.json"));
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
            TEST_FAIL_AT("case %zu: status %d, message '%s', expected '%s'", i, (int)st, sharc_last_error(),
                         cases[i].message);
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
            TEST_FAIL_AT("case %zu: status %d, message '%s', expected '%s'", i, (int)st, sharc_last_error(),
                         cases[i].message);
    }
}

TEST(config_missing_file_names_it) {
    sharc_config c;
    sharc_config_default(&c);
    ASSERT_TRUE(sharc_config_load_file(&c, "/nonexistent/cfg.yaml") == SHARC_ERR_INVALID); /* bad input: exit 2 */
    ASSERT_TRUE(strstr(sharc_last_error(), "/nonexistent/cfg.yaml") != NULL);
}

/* ---- the users' FSDP configs (the seeds), aliases, presets, stages ---- */

typedef struct {
    char text[4096];
    int n;
} warnings_t;

static void collect(const char *line, void *ctx) {
    warnings_t *w = ctx;
    strncat(w->text, line, sizeof w->text - strlen(w->text) - 2);
    strcat(w->text, "\n");
    w->n++;
}

TEST(config_seed_lightning_fsdp_block) {
    /* the Lightning FSDP seed's stage block, pasted as is */
    const char *y = "training_stages:\n"
                    "  stage1:\n"
                    "    distributed:\n"
                    "      strategy: \"fsdp\"\n"
                    "      num_nodes: 1\n"
                    "      devices: 8\n"
                    "      sync_batchnorm: false\n"
                    "      fsdp:\n"
                    "        enabled: true\n"
                    "        cpu_offload: true\n"
                    "        sharding_strategy: \"SHARD_GRAD_OP\"\n"
                    "        backward_prefetch: \"BACKWARD_POST\"\n"
                    "        forward_prefetch: true\n"
                    "        limit_all_gathers: true\n"
                    "        activation_checkpointing: true\n"
                    "        use_orig_params: false\n"
                    "  stage2:\n"
                    "    training:\n"
                    "      batch_size: 2\n"
                    "      gradient_accumulation_steps: 4\n";
    sharc_config c;
    sharc_config_default(&c);
    ASSERT_OK(sharc_config_load_string(&c, y, "seed.yaml"));
    /* no stage selected: stage keys are checked, not applied */
    ASSERT_EQ(c.num_stages, 2);
    ASSERT_TRUE(!strcmp(c.stages[0], "stage1") && !strcmp(c.stages[1], "stage2"));
    ASSERT_EQ(c.fsdp.engine.strategy, SHARC_SHARDING_FULL_SHARD);
    ASSERT_TRUE(!c.fsdp.cpu_offload);
    sharc_config_default(&c);
    snprintf(c.stage, sizeof c.stage, "stage1");
    ASSERT_OK(sharc_config_load_string(&c, y, "seed.yaml"));
    ASSERT_EQ(c.fsdp.engine.strategy, SHARC_SHARDING_SHARD_GRAD_OP);
    ASSERT_EQ(c.fsdp.engine.backward_prefetch, SHARC_BACKWARD_PREFETCH_POST);
    ASSERT_TRUE(c.fsdp.engine.forward_prefetch);
    ASSERT_EQ(c.fsdp.engine.limit_all_gathers, 2);
    ASSERT_TRUE(c.fsdp.activation_checkpointing && c.fsdp.cpu_offload && !c.fsdp.use_orig_params);
    ASSERT_EQ(c.train.batch_size, 16); /* stage2's value not applied */
    warnings_t w = {"", 0};
    ASSERT_EQ(sharc_config_warnings(&c, collect, &w), 3);
    ASSERT_TRUE(strstr(w.text, "fsdp.cpu_offload (or offload_policy) = true has no effect on train.device cpu") !=
                NULL);
    ASSERT_TRUE(strstr(w.text, "distributed.num_nodes = '1': no effect") != NULL);
    ASSERT_TRUE(strstr(w.text, "distributed.devices = '8': no effect") != NULL);
    sharc_config_default(&c);
    snprintf(c.stage, sizeof c.stage, "stage2");
    ASSERT_OK(sharc_config_load_string(&c, y, "seed.yaml"));
    ASSERT_EQ(c.train.batch_size, 2);
    ASSERT_EQ(c.train.grad_accum, 4);
    ASSERT_EQ(c.fsdp.engine.strategy, SHARC_SHARDING_FULL_SHARD);
    w.n = 0;
    w.text[0] = 0;
    ASSERT_EQ(sharc_config_warnings(&c, collect, &w), 0);
}

TEST(config_seed_roll_fsdp2_strategy_config) {
    const char *y = "actor_train:\n"
                    "  model_args:\n"
                    "    disable_gradient_checkpointing: false\n"
                    "    dtype: bf16\n"
                    "  training_args:\n"
                    "    learning_rate: 1.0e-6\n"
                    "    weight_decay: 0\n"
                    "    per_device_train_batch_size: 1\n"
                    "    gradient_accumulation_steps: 32\n"
                    "    warmup_steps: 20\n"
                    "    num_train_epochs: 50\n"
                    "  strategy_args:\n"
                    "    strategy_name: fsdp2_train\n"
                    "    strategy_config:\n"
                    "      fsdp_size: 16\n"
                    "      param_dtype: bf16\n"
                    "      reduce_dtype: float32\n"
                    "      reshard_after_forward: false\n"
                    "      offload_policy: false\n"
                    "      wrap_policy:\n"
                    "        transformer_layer_cls_to_wrap: [\"Qwen3DecoderLayer\"]\n"
                    "        wrap_embeddings: false\n";
    sharc_config c;
    sharc_config_default(&c);
    ASSERT_OK(sharc_config_load_string(&c, y, "roll.yaml"));
    ASSERT_TRUE(c.fsdp.activation_checkpointing);
    ASSERT_EQ(c.fsdp.engine.param_dtype, SHARC_DT_BF16);
    ASSERT_EQ(c.fsdp.engine.reduce_dtype, SHARC_DT_F32);
    ASSERT_TRUE(c.optim.lr == 1e-6f);
    ASSERT_TRUE(c.optim.weight_decay == 0.0f);
    ASSERT_EQ(c.train.batch_size, 1);
    ASSERT_EQ(c.train.grad_accum, 32);
    ASSERT_EQ(c.optim.warmup_steps, 20);
    ASSERT_TRUE(c.train.epochs == 50.0f);
    ASSERT_EQ(c.fsdp.engine.fsdp_size, 16);
    ASSERT_EQ(c.fsdp.engine.reshard_after_forward, 0);
    ASSERT_TRUE(!c.fsdp.cpu_offload);
    ASSERT_EQ(c.fsdp.wrap_policy, 0);
    warnings_t w = {"", 0};
    ASSERT_EQ(sharc_config_warnings(&c, collect, &w), 1);
    ASSERT_TRUE(strstr(w.text, "strategy_config.wrap_policy.wrap_embeddings = 'false': not implemented") != NULL);
    /* offload_policy: true and a size-based wrap policy warn, naming the key */
    ASSERT_OK(sharc_config_load_string(
        &c, "strategy_config:\n  offload_policy: true\nfsdp:\n  auto_wrap_policy: size\n", "x"));
    w.n = 0;
    w.text[0] = 0;
    ASSERT_EQ(sharc_config_warnings(&c, collect, &w), 3);
    ASSERT_TRUE(strstr(w.text, "offload_policy) = true has no effect on train.device cpu") != NULL);
    ASSERT_TRUE(strstr(w.text, "fsdp.wrap_policy = size is accepted but not implemented") != NULL);
}

TEST(config_seed_demo_trainer_yaml) {
    const char *y = "model:\n  embed_dim: 768\n  num_layers: 6\n  num_heads: 12\n  ff_hidden_dim: 3072\n"
                    "runtime:\n  mixed_precision: bf16\n  log_every: 5\n"
                    "fsdp:\n  sharding_strategy: FULL_SHARD\n  auto_wrap_policy: transformer\n"
                    "  activation_checkpointing: true\n"
                    "optim:\n  lr: 3.0e-4\n  warmup_steps: 200\n"
                    "epochs: 2\n";
    sharc_config c;
    sharc_config_default(&c);
    ASSERT_OK(sharc_config_load_string(&c, y, "demo.yaml"));
    ASSERT_EQ(c.model.embed_dim, 768);
    ASSERT_EQ(c.model.ff_hidden_dim, 3072);
    ASSERT_EQ(c.train.log_every, 5);
    ASSERT_EQ(c.fsdp.engine.param_dtype, SHARC_DT_BF16);
    ASSERT_EQ(c.fsdp.wrap_policy, 0);
    ASSERT_EQ(c.optim.warmup_steps, 200);
    ASSERT_TRUE(c.train.epochs == 2.0f);
    warnings_t w = {"", 0};
    ASSERT_EQ(sharc_config_warnings(&c, collect, &w), 0);
}

TEST(config_precision_names) {
    static const struct {
        const char *name;
        sharc_dtype param, reduce;
    } cases[] = {{"fp32", SHARC_DT_F32, SHARC_DT_F32},        {"32-true", SHARC_DT_F32, SHARC_DT_F32},
                 {"bf16", SHARC_DT_BF16, SHARC_DT_F32},       {"bf16-mixed", SHARC_DT_BF16, SHARC_DT_F32},
                 {"BF16_MIXED", SHARC_DT_BF16, SHARC_DT_F32}, {"bf16-true", SHARC_DT_BF16, SHARC_DT_BF16},
                 {"16-mixed", SHARC_DT_F16, SHARC_DT_F32},    {"fp16", SHARC_DT_F16, SHARC_DT_F32}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sharc_config c;
        sharc_config_default(&c);
        ASSERT_OK(sharc_config_set(&c, "train.precision", cases[i].name, "cli"));
        if (c.fsdp.engine.param_dtype != cases[i].param || c.fsdp.engine.reduce_dtype != cases[i].reduce)
            TEST_FAIL_AT("precision %s: param %d reduce %d", cases[i].name, (int)c.fsdp.engine.param_dtype,
                         (int)c.fsdp.engine.reduce_dtype);
        ASSERT_OK(sharc_config_validate(&c));
    }
}

TEST(config_presets_and_order) {
    sharc_config c;
    sharc_config_default(&c);
    ASSERT_OK(sharc_config_load_string(&c, "preset: large_scale\nfsdp:\n  forward_prefetch: false\n", "p.yaml"));
    ASSERT_EQ(c.fsdp.engine.strategy, SHARC_SHARDING_FULL_SHARD);
    ASSERT_EQ(c.fsdp.engine.backward_prefetch, SHARC_BACKWARD_PREFETCH_PRE);
    ASSERT_EQ(c.fsdp.engine.limit_all_gathers, 2);
    ASSERT_TRUE(c.fsdp.activation_checkpointing);
    ASSERT_TRUE(!c.fsdp.engine.forward_prefetch); /* a key after the preset wins */
    sharc_config_default(&c);
    ASSERT_OK(sharc_config_set(&c, "fsdp.sharding_strategy", "NO_SHARD", "cli"));
    ASSERT_OK(sharc_config_set(&c, "preset", "single_node_fsdp", "cli")); /* the seed's name */
    ASSERT_EQ(c.fsdp.engine.strategy, SHARC_SHARDING_FULL_SHARD);
    ASSERT_TRUE(c.fsdp.activation_checkpointing);
    ASSERT_EQ(c.fsdp.engine.limit_all_gathers, 0);
    sharc_config_default(&c);
    ASSERT_OK(sharc_config_set(&c, "preset", "multi_node", "cli"));
    ASSERT_EQ(c.fsdp.engine.limit_all_gathers, 2);
    ASSERT_TRUE(!c.fsdp.engine.forward_prefetch);
}

TEST(config_json_file_with_nested_sections) {
    char path[512];
    snprintf(path, sizeof path, "%s/cfg_test.json", sharc_test_tmpdir());
    FILE *f = fopen(path, "w");
    ASSERT_TRUE(f != NULL);
    fputs("{\n  \"model\": {\"family\": \"llama\", \"num_layers\": 3, \"embed_dim\": 96, \"num_heads\": 6},\n"
          "  \"optim\": {\"lr\": 0.0005, \"betas\": [0.8, 0.9]},\n"
          "  \"train\": {\"batch_size\": 3, \"epochs\": 1.5, \"precision\": \"bf16-mixed\"},\n"
          "  \"fsdp\": {\"sharding_strategy\": \"HYBRID_SHARD\", \"fsdp_size\": 2, \"forward_prefetch\": true},\n"
          "  \"strategy_args\": {\"strategy_config\": {\"reshard_after_forward\": false}},\n"
          "  \"preset\": \"single_node\"\n}\n",
          f);
    fclose(f);
    sharc_config c;
    sharc_config_default(&c);
    ASSERT_OK(sharc_config_load_file(&c, path));
    ASSERT_EQ(c.model.family, SHARC_FAMILY_LLAMA);
    ASSERT_EQ(c.model.num_layers, 3);
    ASSERT_NEAR(c.optim.beta1, 0.8, 1e-7, 0);
    ASSERT_EQ(c.train.batch_size, 3);
    ASSERT_TRUE(c.train.epochs == 1.5f);
    ASSERT_EQ(c.fsdp.engine.param_dtype, SHARC_DT_BF16);
    ASSERT_EQ(c.fsdp.engine.fsdp_size, 2);
    ASSERT_EQ(c.fsdp.engine.reshard_after_forward, 0);
    ASSERT_EQ(c.fsdp.engine.strategy, SHARC_SHARDING_FULL_SHARD); /* the preset came last */
    ASSERT_OK(sharc_config_validate(&c));
    /* malformed JSON: the file and line */
    f = fopen(path, "w");
    fputs("{\n  \"model\": {\"num_layers\": 3}\n", f); /* no closing brace */
    fclose(f);
    sharc_config_default(&c);
    ASSERT_TRUE(sharc_config_load_file(&c, path) == SHARC_ERR_INVALID);
    ASSERT_TRUE(strstr(sharc_last_error(), "cfg_test.json' line 2: not valid YAML: did not find expected ',' or '}' "
                                           "(the text ends there, inside a value: a truncated file?)") != NULL);
    remove(path);
}

TEST(config_errors_for_new_keys_and_aliases) {
    static const struct {
        const char *yaml, *message;
    } cases[] = {
        {"fsdp:\n  cpu_offload: maybe\n", "fsdp.cpu_offload = 'maybe': expected true or false"},
        {"strategy_config:\n  offload_policy: 2\n", "fsdp.cpu_offload = '2': expected true or false"},
        {"distributed:\n  fsdp:\n    sharding_strategy: FULL\n",
         "fsdp.sharding_strategy = 'FULL': expected one of FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD"},
        {"distributed:\n  fsdp:\n    limit_all_gather: true\n",
         "unknown key 'fsdp.limit_all_gather'; did you mean 'fsdp.limit_all_gathers'? (sharc config --keys lists "
         "them) (written 'distributed.fsdp.limit_all_gather')"},
        {"runtime:\n  mixed_precision: bf15\n", "precision 'bf15': expected fp32, 32-true, bf16, bf16-mixed"},
        {"preset: huge\n", "preset = 'huge': expected one of single_node, multi_node, large_scale"},
        {"training_stages:\n  stage1:\n    model:\n      num_layer: 2\n", "unknown key 'model.num_layer'"},
        {"training_stages:\n  stage1: 3\n", "'training_stages.stage1': expected training_stages.STAGE.section.key"},
        {"train:\n  timeout: -1\n", "train.timeout = '-1': expected a value in [0, 2147483647]"},
        {"train:\n  max_bad_steps: 0\n", "train.max_bad_steps = '0': expected a value in [1, 2147483647]"},
        {"train:\n  epochs: many\n", "train.epochs = 'many': expected a number"},
        {"model_args:\n  disable_gradient_checkpointing: sometimes\n",
         "model_args.disable_gradient_checkpointing = 'sometimes': expected true or false"},
        {"fsdp:\n  wrap_policy: layer\n", "fsdp.wrap_policy = 'layer': expected one of transformer_block, size, none"},
        {"distributed:\n  sync_batchnorm: maybe\n", "distributed.sync_batchnorm = 'maybe': expected true or false"},
        {"model:\n  init_from: [a, b]\n", "model.init_from = 'a,b'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sharc_config c;
        sharc_config_default(&c);
        sharc_status st = sharc_config_load_string(&c, cases[i].yaml, "bad.yaml");
        if (cases[i].message[0] == 'm' && !strncmp(cases[i].message, "model.init_from", 15)) {
            /* a list is accepted as text for a string key; it then fails to open at start */
            ASSERT_OK(st);
            ASSERT_TRUE(!strcmp(c.init_from, "a,b"));
            continue;
        }
        if (st != SHARC_ERR_INVALID || !strstr(sharc_last_error(), cases[i].message) ||
            !strstr(sharc_last_error(), "bad.yaml"))
            TEST_FAIL_AT("case %zu: status %d, message '%s', expected '%s'", i, (int)st, sharc_last_error(),
                         cases[i].message);
    }
}

TEST(config_stage_keys_override_the_whole_file) {
    const char *y = "training_stages:\n"
                    "  a:\n    fsdp: {backward_prefetch: BACKWARD_POST}\n    preset: large_scale\n"
                    "  b:\n    optim: {lr: 0.5}\n"
                    "fsdp:\n  backward_prefetch: NONE\n  forward_prefetch: false\n"
                    "optim:\n  lr: 0.25\n";
    sharc_config c;
    sharc_config_default(&c);
    ASSERT_OK(sharc_config_load_string(&c, y, "s.yaml"));
    ASSERT_EQ(c.fsdp.engine.backward_prefetch, SHARC_BACKWARD_PREFETCH_NONE);
    ASSERT_TRUE(c.optim.lr == 0.25f);
    sharc_config_default(&c);
    snprintf(c.stage, sizeof c.stage, "a");
    ASSERT_OK(sharc_config_load_string(&c, y, "s.yaml"));
    /* the preset inside the stage is applied after the stage's own key */
    ASSERT_EQ(c.fsdp.engine.backward_prefetch, SHARC_BACKWARD_PREFETCH_PRE);
    ASSERT_TRUE(c.fsdp.engine.forward_prefetch);
    ASSERT_TRUE(c.optim.lr == 0.25f);
    sharc_config_default(&c);
    snprintf(c.stage, sizeof c.stage, "b");
    ASSERT_OK(sharc_config_load_string(&c, y, "s.yaml"));
    ASSERT_TRUE(c.optim.lr == 0.5f);
    ASSERT_EQ(c.fsdp.engine.backward_prefetch, SHARC_BACKWARD_PREFETCH_NONE);
    ASSERT_EQ(c.num_stages, 2);
}

/* ---- issue 9: what the saved config and the messages promise ---- */

TEST(config_saved_yaml_has_each_section_once) {
    /* a YAML mapping with a repeated key keeps only one of them in most
     * readers (PyYAML keeps the last), so each section must appear once */
    sharc_config c;
    sharc_config_default(&c);
    char *yaml = sharc_config_to_yaml(&c);
    ASSERT_TRUE(yaml != NULL);
    char seen[16][32];
    int n = 0;
    for (const char *p = yaml; *p;) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len > 0 && p[0] != ' ' && p[0] != '#') {
            ASSERT_TRUE(p[len - 1] == ':' && len < sizeof seen[0]);
            for (int i = 0; i < n; i++)
                if (strlen(seen[i]) == len - 1 && !strncmp(seen[i], p, len - 1))
                    TEST_FAIL_AT("section '%s' twice", seen[i]);
            ASSERT_TRUE(n < 16);
            snprintf(seen[n++], sizeof seen[0], "%.*s", (int)len - 1, p);
        }
        p += len + (e ? 1 : 0);
    }
    ASSERT_EQ(n, 8); /* model data optim train fsdp mesh ckpt log */
    /* and it reads back to the same configuration, fsdp keys from both former blocks included */
    sharc_config d;
    sharc_config_default(&d);
    ASSERT_OK(sharc_config_set(&c, "fsdp.use_orig_params", "true", "t"));
    ASSERT_OK(sharc_config_set(&c, "fsdp.sharding_strategy", "NO_SHARD", "t"));
    free(yaml);
    yaml = sharc_config_to_yaml(&c);
    ASSERT_OK(sharc_config_load_string(&d, yaml, "saved"));
    ASSERT_TRUE(d.fsdp.use_orig_params);
    ASSERT_EQ(d.fsdp.engine.strategy, SHARC_SHARDING_NO_SHARD);
    free(yaml);
}

TEST(config_file_that_sets_nothing_is_refused) {
    char path[512];
    snprintf(path, sizeof path, "%s/empty.yaml", sharc_test_tmpdir());
    static const struct {
        const char *text, *message;
    } cases[] = {
        {"", "the file is empty (0 bytes); expected a mapping of sections"},
        {"# only a comment\n\n", "the file sets no key; expected a mapping of sections"},
        {"{}\n", "the file sets no key"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        FILE *f = fopen(path, "w");
        fputs(cases[i].text, f);
        fclose(f);
        sharc_config c;
        sharc_config_default(&c);
        sharc_status st = sharc_config_load_file(&c, path);
        if (st != SHARC_ERR_INVALID || !strstr(sharc_last_error(), cases[i].message) ||
            !strstr(sharc_last_error(), path))
            TEST_FAIL_AT("case %zu: status %d, '%s'", i, (int)st, sharc_last_error());
    }
    remove(path);
}

TEST(config_long_values_keep_what_was_expected) {
    static char big[10001];
    memset(big, '7', 10000);
    const struct {
        const char *key, *tail;
    } cases[] = {
        {"model.num_layers", "': expected an integer"},
        {"train.out_dir", "': expected at most 1023 bytes"},
        {"model.family", "': expected one of gpt2, llama"},
        {"optim.betas", "': expected a list of two numbers, e.g. [0.9, 0.95]"},
        {"fsdp.cpu_offload", "': expected true or false"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sharc_config c;
        sharc_config_default(&c);
        ASSERT_TRUE(sharc_config_set(&c, cases[i].key, big, "cli") == SHARC_ERR_INVALID);
        const char *m = sharc_last_error();
        size_t n = strlen(m), t = strlen(cases[i].tail);
        if (n < t || strcmp(m + n - t, cases[i].tail) != 0 || !strstr(m, "... (10000 characters)") || n > 300)
            TEST_FAIL_AT("case %s: '%s'", cases[i].key, m);
    }
}
/* The SFT keys: defaults (OpenRLHF's), the enums, the cross-key check, and a
 * template with a newline and quotes surviving the YAML the weights and
 * checkpoints keep (write, then read back). */
TEST(config_sft_keys_and_string_round_trip) {
    sharc_config c, d;
    sharc_config_default(&c);
    ASSERT_TRUE(!strcmp(c.data.input_key, "input"));
    ASSERT_TRUE(!strcmp(c.data.input_template, "User: {}\nAssistant: "));
    ASSERT_EQ(c.data.max_len, 0);
    ASSERT_OK(sharc_config_set(&c, "data.chat_template", "qwen3", "test"));
    ASSERT_EQ(c.data.chat_template, 2);
    ASSERT_OK(sharc_config_set(&c, "data.loss_mask", "openrlhf", "test"));
    ASSERT_EQ(c.data.loss_mask, 1);
    ASSERT_OK(sharc_config_set(&c, "train.loss_normalization", "micro_batch", "test"));
    ASSERT_EQ(c.train.loss_normalization, 1);
    ASSERT_OK(sharc_config_set(&c, "data.format", "jsonl", "test"));
    ASSERT_EQ(c.data.format, SHARC_TOKENS_JSONL);
    ASSERT_TRUE(sharc_config_set(&c, "data.chat_template", "jinja", "test") == SHARC_ERR_INVALID);
    ASSERT_TRUE(strstr(sharc_last_error(), "expected one of auto, chatml, qwen3, llama3") != NULL);
    ASSERT_OK(sharc_config_set(&c, "data.input_template", "Say \"{}\"\n\tthen \\ answer: ", "test"));
    ASSERT_OK(sharc_config_set(&c, "model.tokenizer", "dir with space/tok", "test"));
    char *yaml = sharc_config_to_yaml(&c);
    sharc_config_default(&d);
    ASSERT_OK(sharc_config_load_string(&d, yaml, "round trip"));
    free(yaml);
    ASSERT_TRUE(!strcmp(d.data.input_template, c.data.input_template));
    ASSERT_TRUE(!strcmp(d.tokenizer, "dir with space/tok"));
    ASSERT_EQ(d.data.chat_template, 2);
    ASSERT_EQ(d.train.loss_normalization, 1);
    /* data.max_len may exceed train.seq_len + 1 (sharc tokenize has no sequence length); a
     * sample that does not fit is refused when training starts (sharc_sampler_init) */
    ASSERT_OK(sharc_config_set(&c, "data.max_len", "200", "test"));
    ASSERT_OK(sharc_config_validate(&c));
}


/* Note [frozen-params]: ROLL's list (under model_args) and the generic
 * globs reach sharc_units_freeze, which marks exactly the matching names and
 * refuses an entry that matches nothing, or freezing everything. */
TEST(config_frozen_parameters) {
    sharc_config c;
    sharc_config_default(&c);
    const char *y = "model_args:\n"
                    "  freeze_module_prefix: [wte, ' h.0.']\n"
                    "train:\n"
                    "  trainable: ['h.*', ln_f.*]\n";
    ASSERT_OK(sharc_config_load_string(&c, y, "t.yaml"));
    ASSERT_TRUE(strcmp(c.freeze_module_prefix, "wte, h.0.") == 0);
    ASSERT_TRUE(strcmp(c.trainable, "h.*,ln_f.*") == 0);
    sharc_model *m;
    c.model.num_layers = 2;
    ASSERT_OK(sharc_model_init(&m, &c.model, NULL));
    sharc_unit_spec units[4];
    ASSERT_EQ(sharc_model_num_units(m), 4);
    memcpy(units, sharc_model_units(m), sizeof units);
    int n = -1;
    ASSERT_OK(sharc_units_freeze(units, 4, c.freeze_module_prefix, c.trainable, &n));
    /* embed: wte by prefix, wpe by no glob; block 0 by prefix; block 1 and ln_f train */
    ASSERT_EQ(n, 2 + 12);
    ASSERT_TRUE(!sharc_unit_trainable(&units[0]) && !sharc_unit_trainable(&units[1]));
    ASSERT_TRUE(sharc_unit_trainable(&units[2]) && sharc_unit_trainable(&units[3]));
    for (int u = 2; u < 4; u++)
        for (int p = 0; p < units[u].nparams; p++) ASSERT_TRUE(!units[u].params[p].frozen);
    /* BitFit: a unit of mixed parameters */
    memcpy(units, sharc_model_units(m), sizeof units);
    ASSERT_OK(sharc_units_freeze(units, 4, "", "*.bias", &n));
    ASSERT_TRUE(sharc_unit_trainable(&units[1]) && !sharc_unit_trainable(&units[0]));
    ASSERT_TRUE(units[1].params[0].frozen && !units[1].params[1].frozen); /* ln_1.weight, ln_1.bias */
    /* refused: a prefix or glob that names nothing, or nothing left to train */
    memcpy(units, sharc_model_units(m), sizeof units);
    ASSERT_EQ(sharc_units_freeze(units, 4, "wte,h.7.", "", NULL), SHARC_ERR_INVALID);
    ASSERT_TRUE(strstr(sharc_last_error(), "model.freeze_module_prefix: 'h.7.' is the prefix of no parameter"));
    ASSERT_EQ(sharc_units_freeze(units, 4, NULL, "*.bais", NULL), SHARC_ERR_INVALID);
    ASSERT_TRUE(strstr(sharc_last_error(), "train.trainable: '*.bais' matches no parameter"));
    ASSERT_EQ(sharc_units_freeze(units, 4, "wte,wpe,h.,ln_f", NULL, NULL), SHARC_ERR_INVALID);
    ASSERT_TRUE(strstr(sharc_last_error(), "nothing would train"));
    sharc_model_free(m);
}

/* ---- issue 11: one table for each key's default and agreement ---- */

static const sharc_config_agreed *agreed_find(const sharc_config_agreed *a, int n, const char *key) {
    for (int i = 0; i < n; i++)
        if (!strcmp(a[i].key, key)) return &a[i];
    return NULL;
}

TEST(config_defaults_and_agreement_come_from_the_key_table) {
    /* the defaults README documents, set by the table's rows alone */
    sharc_config c;
    memset(&c, 0x5a, sizeof c);
    sharc_config_default(&c);
    ASSERT_EQ(c.model.family, SHARC_FAMILY_GPT2);
    ASSERT_EQ(c.model.num_layers, 4);
    ASSERT_TRUE(c.model.norm_eps == 1e-5f && c.model.init_std == 0.02f && c.model.tie_embeddings);
    ASSERT_TRUE(c.optim.lr == 2e-3f && c.optim.beta1 == 0.9f && c.optim.beta2 == 0.95f && c.optim.eps == 1e-8f);
    ASSERT_EQ(c.fsdp.engine.reshard_after_forward, -1); /* auto */
    ASSERT_EQ(c.fsdp.engine.backward_prefetch, SHARC_BACKWARD_PREFETCH_PRE);
    ASSERT_EQ(c.ckpt.keep, 2);
    ASSERT_TRUE(!strcmp(c.ckpt.resume, "none") && !strcmp(c.train.out_dir, "runs/kjv"));
    ASSERT_TRUE(!strcmp(c.data.input_template, "User: {}\nAssistant: "));
    ASSERT_EQ(c.train.timeout, 600);
    ASSERT_EQ(c.train.max_bad_steps, 3);
    ASSERT_TRUE(c.notes[0] == 0 && c.stage[0] == 0 && c.num_stages == 0);
    /* the keys ranks must share: counted, then filled in table order */
    int n = sharc_config_agreed_values(&c, NULL, 0);
    ASSERT_TRUE(n > 40);
    sharc_config_agreed *a = calloc((size_t)n, sizeof *a);
    ASSERT_EQ(sharc_config_agreed_values(&c, a, n), n);
    const sharc_config_agreed *layers = agreed_find(a, n, "model.num_layers");
    ASSERT_TRUE(layers && layers->value == 4 && layers->text == NULL);
    const sharc_config_agreed *lr = agreed_find(a, n, "optim.lr");
    float two_e3 = 2e-3f;
    int32_t bits;
    memcpy(&bits, &two_e3, sizeof bits);
    ASSERT_TRUE(lr && lr->value == bits);
    const sharc_config_agreed *dir = agreed_find(a, n, "train.out_dir");
    ASSERT_TRUE(dir && dir->text && !strcmp(dir->text, "runs/kjv"));
    /* per-rank settings are not compared */
    ASSERT_TRUE(!agreed_find(a, n, "train.threads") && !agreed_find(a, n, "log.debug") &&
                !agreed_find(a, n, "data.path") && !agreed_find(a, n, "train.timeout"));
    /* one key changed: exactly its value changes */
    sharc_config d = c;
    ASSERT_OK(sharc_config_set(&d, "ckpt.dir", "elsewhere", "t"));
    sharc_config_agreed *b = calloc((size_t)n, sizeof *b);
    ASSERT_EQ(sharc_config_agreed_values(&d, b, n), n);
    for (int i = 0; i < n; i++) {
        ASSERT_TRUE(!strcmp(a[i].key, b[i].key));
        if ((a[i].value != b[i].value) != !strcmp(a[i].key, "ckpt.dir")) TEST_FAIL_AT("%s", a[i].key);
    }
    /* `sharc config --keys` shows each default and marks the agreed keys */
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    sharc_config_print_keys(f);
    fclose(f);
    ASSERT_TRUE(strstr(text, "ckpt.keep") && strstr(strstr(text, "ckpt.keep"), "int      2              * newest"));
    ASSERT_TRUE(strstr(text, "train.threads                    int      0                threads"));
    free(text);
    free(a);
    free(b);
}

/* fsdp.reshard_after_forward takes FSDP2's int (note [post-forward] in
 * src/fsdp/plan.c) under its own name and the seeds' strategy_config, and
 * round-trips through the saved YAML; what no shard group could take is
 * refused at once, the rest when the shard group is known (test_plan.c). */
TEST(config_reshard_after_forward_int) {
    sharc_config c, d;
    sharc_config_default(&c);
    ASSERT_OK(sharc_config_load_string(&c, "strategy_args:\n  strategy_config:\n    reshard_after_forward: 2\n", "x"));
    ASSERT_EQ(c.fsdp.engine.reshard_after_forward, 2);
    ASSERT_OK(sharc_config_set(&c, "fsdp.reshard_after_forward", "8", "cli"));
    ASSERT_EQ(c.fsdp.engine.reshard_after_forward, 8);
    char *yaml = sharc_config_to_yaml(&c);
    ASSERT_TRUE(yaml != NULL && strstr(yaml, "reshard_after_forward: 8") != NULL);
    sharc_config_default(&d);
    ASSERT_OK(sharc_config_load_string(&d, yaml, "roundtrip"));
    ASSERT_EQ(d.fsdp.engine.reshard_after_forward, 8);
    free(yaml);
    ASSERT_OK(sharc_config_set(&c, "fsdp.reshard_after_forward", "True", "cli"));
    ASSERT_EQ(c.fsdp.engine.reshard_after_forward, 1);
    ASSERT_OK(sharc_config_set(&c, "fsdp.reshard_after_forward", "false", "cli"));
    ASSERT_EQ(c.fsdp.engine.reshard_after_forward, 0);
    const char *bad[] = {"0", "1", "-1", "two", "2.5", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sharc_config_default(&c);
        if (sharc_config_set(&c, "fsdp.reshard_after_forward", bad[i], "cli") != SHARC_ERR_INVALID ||
            !strstr(sharc_last_error(), "expected true, false, auto or a number of ranks N >= 2") ||
            !strstr(sharc_last_error(), "fsdp.reshard_after_forward"))
            TEST_FAIL_AT("'%s': %s", bad[i], sharc_last_error());
        ASSERT_EQ(c.fsdp.engine.reshard_after_forward, -1);
    }
}

/* note [optim-offload]: DeepSpeed's sub_group_size is the chunk's parameter
 * count, rounded up to 1024 and bounded; the pipeline is on by default */
TEST(config_offload_sub_group_size) {
    sharc_config c;
    sharc_config_default(&c);
    ASSERT_OK(sharc_config_load_string(&c, "optim:\n  offload_dir: /tmp\n", "x"));
    ASSERT_TRUE(c.optim.offload_pipeline);
    ASSERT_EQ(sharc_offload_chunk_numel(&c.optim), 8388608);
    ASSERT_EQ(sharc_offload_buffers(&c.optim), 3);
    ASSERT_OK(sharc_config_load_string(&c, "zero_optimization:\n  sub_group_size: 1000000000\n", "x"));
    ASSERT_EQ(c.optim.offload_chunk_numel, 1000000000);
    ASSERT_EQ(sharc_offload_chunk_numel(&c.optim), 134217728);
    ASSERT_OK(sharc_config_load_string(&c, "sub_group_size: 3000\noptim:\n  offload_pipeline: false\n", "x"));
    ASSERT_EQ(sharc_offload_chunk_numel(&c.optim), 3072);
    ASSERT_EQ(sharc_offload_buffers(&c.optim), 1);
    ASSERT_TRUE(sharc_config_load_string(&c, "optim:\n  offload_sub_group_size: 0\n", "x") == SHARC_ERR_INVALID);
    ASSERT_TRUE(strstr(sharc_last_error(), "optim.offload_sub_group_size") != NULL);
}

/* note [optim-offload-overlap] (src/optim/adamw.c): the moments on disk on a
 * device imply fsdp.cpu_offload for the engine (DeepSpeed's nvme_path runs
 * the optimizer on the CPU), under DeepSpeed's key too; on the CPU device the
 * engine's flag stays off, and every sharding strategy offloads on a device */
TEST(config_offload_dir_implies_cpu_offload_on_device) {
    sharc_config c;
    sharc_config_default(&c);
    ASSERT_OK(sharc_config_load_string(&c, "optim:\n  offload_dir: /tmp\n", "x"));
    ASSERT_OK(sharc_config_validate(&c));
    ASSERT_TRUE(!c.fsdp.engine.cpu_offload);
    ASSERT_OK(sharc_config_load_string(&c, "train:\n  device: cuda\n", "x"));
    ASSERT_OK(sharc_config_validate(&c));
    ASSERT_TRUE(c.fsdp.engine.cpu_offload && !c.fsdp.cpu_offload);
    sharc_config_default(&c);
    ASSERT_OK(sharc_config_load_string(
        &c, "train:\n  device: cuda\nzero_optimization:\n  offload_optimizer:\n    nvme_path: /tmp\n", "x"));
    ASSERT_OK(sharc_config_validate(&c));
    ASSERT_TRUE(c.fsdp.engine.cpu_offload);
    const char *strategies[] = {"NO_SHARD", "HYBRID_SHARD", "FULL_SHARD", "SHARD_GRAD_OP"};
    for (int i = 0; i < 4; i++) {
        char y[128];
        sharc_config_default(&c);
        snprintf(y, sizeof y, "train:\n  device: cuda\nfsdp:\n  cpu_offload: true\n  sharding_strategy: %s\n",
                 strategies[i]);
        ASSERT_OK(sharc_config_load_string(&c, y, "x"));
        ASSERT_OK(sharc_config_validate(&c));
        ASSERT_TRUE(c.fsdp.engine.cpu_offload);
    }
}
