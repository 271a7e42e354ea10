// llama.cpp's outputs on a GGUF file, as JSON on stdout: the reference tools/llamacpp_reference.py
// records for tests/test_families_llamacpp.py. Built against a llama.cpp build's libllama
// (../shared/vendor/: commit 0c1e570); tools/llamacpp_reference.py compiles and runs it.
//
//   llamacpp_reference MODEL.gguf IDS N_GEN K [KV_TYPE] [THREADS]
//     IDS      the prompt's token ids, comma-separated, evaluated as one batch with every position's logits
//     N_GEN    greedy tokens generated after the prompt (argmax; one llama_decode a token)
//     K        the first K prompt positions' full logits rows are printed
//     KV_TYPE  f32 (default) or f16: the KV cache's type (llama.cpp's default is f16)
//     THREADS  cpu threads (default 2)
//
// Output: {"n_vocab", "kv_type", "flash_attn": false, "prompt_ids", "greedy_ids", "greedy_margins"
// (top-1 minus top-2 logit of each greedy step), "greedy_top2" (the runner-up ids), "greedy_logits" (the
// top-1 logit of each step), "logits" (K rows of n_vocab floats), "final_logits" (the last greedy step's
// row: position n_prompt + N_GEN - 2)}; floats as "%.9g", a float32 exactly. Flash attention is off and every position runs on the cpu.
// Exit status 1 with a message on stderr on any failure.
#include "llama.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void quiet_log(enum ggml_log_level level, const char * text, void * user) {
    (void) user;
    if (level == GGML_LOG_LEVEL_ERROR) {
        fputs(text, stderr);
    }
}

static int fail(const char * what) {
    fprintf(stderr, "llamacpp_reference: %s\n", what);
    return 1;
}

// the argmax of row (n floats) and the runner-up
static void top2(const float * row, int n, int * best, int * second) {
    int b = 0, s = -1;
    for (int i = 1; i < n; i++) {
        if (row[i] > row[b]) {
            s = b;
            b = i;
        } else if (s < 0 || row[i] > row[s]) {
            s = i;
        }
    }
    *best = b;
    *second = s;
}

int main(int argc, char ** argv) {
    if (argc < 5) {
        return fail("usage: llamacpp_reference MODEL.gguf IDS N_GEN K [f32|f16] [THREADS]");
    }
    const char * path = argv[1];
    const int n_gen = atoi(argv[3]);
    const int k_rows = atoi(argv[4]);
    const char * kv = argc > 5 ? argv[5] : "f32";
    const int threads = argc > 6 ? atoi(argv[6]) : 2;
    if (strcmp(kv, "f32") != 0 && strcmp(kv, "f16") != 0) {
        return fail("KV_TYPE must be f32 or f16");
    }

    int n_prompt = 0;
    int cap = 16;
    llama_token * ids = malloc(sizeof(llama_token) * cap);
    for (char * tok = strtok(argv[2], ","); tok; tok = strtok(NULL, ",")) {
        if (n_prompt == cap) {
            cap *= 2;
            ids = realloc(ids, sizeof(llama_token) * cap);
        }
        ids[n_prompt++] = atoi(tok);
    }
    if (n_prompt < 1 || n_gen < 1 || k_rows < 0 || k_rows > n_prompt) {
        return fail("need >= 1 prompt id, N_GEN >= 1 and 0 <= K <= the prompt's length");
    }

    llama_log_set(quiet_log, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    struct llama_model * model = llama_model_load_from_file(path, mp);
    if (!model) {
        return fail("cannot load the model");
    }
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = n_prompt + n_gen + 8;
    cp.n_batch = cp.n_ubatch = n_prompt;
    cp.n_threads = cp.n_threads_batch = threads;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.type_k = cp.type_v = strcmp(kv, "f32") == 0 ? GGML_TYPE_F32 : GGML_TYPE_F16;
    struct llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        return fail("cannot create a context");
    }
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));

    struct llama_batch batch = llama_batch_init(n_prompt, 0, 1);
    for (int i = 0; i < n_prompt; i++) {
        batch.token[i] = ids[i];
        batch.pos[i] = i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = 1;  // every position's logits
    }
    batch.n_tokens = n_prompt;
    if (llama_decode(ctx, batch) != 0) {
        return fail("llama_decode of the prompt failed");
    }

    printf("{\"n_vocab\": %d, \"kv_type\": \"%s\", \"flash_attn\": false, \"threads\": %d,\n \"prompt_ids\": [",
           n_vocab, kv, threads);
    for (int i = 0; i < n_prompt; i++) {
        printf("%s%d", i ? ", " : "", ids[i]);
    }
    printf("],\n \"logits\": [");
    for (int r = 0; r < k_rows; r++) {
        const float * row = llama_get_logits_ith(ctx, r);
        printf("%s\n  [", r ? "," : "");
        for (int j = 0; j < n_vocab; j++) {
            printf("%s%.9g", j ? ", " : "", row[j]);
        }
        printf("]");
    }
    printf("],\n");

    int * greedy = malloc(sizeof(int) * n_gen);
    int * runner_up = malloc(sizeof(int) * n_gen);
    float * margin = malloc(sizeof(float) * n_gen);
    float * top = malloc(sizeof(float) * n_gen);
    const float * last = llama_get_logits_ith(ctx, n_prompt - 1);
    for (int t = 0; t < n_gen; t++) {
        top2(last, n_vocab, &greedy[t], &runner_up[t]);
        margin[t] = last[greedy[t]] - last[runner_up[t]];
        top[t] = last[greedy[t]];
        if (t + 1 == n_gen) {
            break;
        }
        struct llama_batch one = llama_batch_get_one(&greedy[t], 1);
        if (llama_decode(ctx, one) != 0) {
            return fail("llama_decode of a generated token failed");
        }
        last = llama_get_logits_ith(ctx, -1);
    }
    printf(" \"greedy_ids\": [");
    for (int t = 0; t < n_gen; t++) {
        printf("%s%d", t ? ", " : "", greedy[t]);
    }
    printf("],\n \"greedy_top2\": [");
    for (int t = 0; t < n_gen; t++) {
        printf("%s%d", t ? ", " : "", runner_up[t]);
    }
    printf("],\n \"greedy_margins\": [");
    for (int t = 0; t < n_gen; t++) {
        printf("%s%.9g", t ? ", " : "", margin[t]);
    }
    printf("],\n \"greedy_logits\": [");
    for (int t = 0; t < n_gen; t++) {
        printf("%s%.9g", t ? ", " : "", top[t]);
    }
    printf("],\n \"final_logits\": [");  // the last greedy step's row (position n_prompt + n_gen - 2)
    for (int j = 0; j < n_vocab; j++) {
        printf("%s%.9g", j ? ", " : "", last[j]);
    }
    printf("]}\n");

    llama_batch_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    free(ids);
    free(greedy);
    free(runner_up);
    free(margin);
    free(top);
    return 0;
}
