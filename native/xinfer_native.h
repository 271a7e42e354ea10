/* xinfer_async native (cpu backend) ABI: see native/KERNELS.md.
 *
 * This header is also the cffi cdef: native/build_native.py strips every line
 * starting with '#', so keep the declarations below plain C that cffi parses
 * (no macros used inside declarations).
 */
#ifndef XINFER_NATIVE_H
#define XINFER_NATIVE_H
#include <stdint.h>

enum { XI_OK = 0, XI_EINVAL = 1, XI_ENOMEM = 2 };

/* ---- fence ------------------------------------------------------------ */
typedef struct {
    int fd;               /* eventfd, written with 1 after the stores */
    int64_t *completed;   /* *completed = max(*completed, value), atomically */
    int64_t value;
    int64_t *signalled;   /* then *signalled = max(*signalled, value): from here on the struct is
                             not touched, so its owner may free it (NULL: no such store) */
} xi_signal;

void xi_fence_signal(void *s);

/* ---- constants structs (packed 4-byte fields, order per KERNELS.md) --- */
typedef struct { int32_t n; float a; float b; } xi_affine_c;
typedef struct { int32_t n; } xi_add_c;
typedef struct { int32_t rows; int32_t dim; float eps; } xi_rmsnorm_c;
typedef struct { int32_t rows; int32_t n_head; int32_t head_dim; int32_t row_stride; float theta; } xi_rope_c;
typedef struct { int32_t rows; int32_t n; int32_t in_stride; } xi_swiglu_c;
typedef struct { int32_t rows; int32_t n; } xi_softmax_c;
typedef struct { int32_t T; int32_t n_head; int32_t n_kv; int32_t head_dim; int32_t ctx; int32_t q_stride; float scale; } xi_attention_c;
typedef struct { int32_t T; int32_t n_head; int32_t n_kv; int32_t head_dim; int32_t rows; int32_t q_stride; float scale; } xi_attention_batched_c;
typedef struct { int32_t T; int32_t width; int32_t ctx; int32_t src_stride; } xi_kv_store_c;
typedef struct { int32_t T; int32_t dim; int32_t vocab; } xi_get_rows_f32_c;
typedef struct { int32_t T; int32_t dim; int32_t vocab; } xi_get_rows_f16_c;
typedef struct { int32_t T; int32_t dim; int32_t vocab; } xi_get_rows_q8_0_c;
typedef struct { int32_t T; int32_t dim; int32_t vocab; } xi_get_rows_q4_0_c;
typedef struct { int32_t T; int32_t dim; int32_t vocab; } xi_get_rows_q4_1_c;
typedef struct { int32_t T; int32_t N; int32_t K; int32_t accumulate; } xi_matmul_f32_c;
typedef struct { int32_t T; int32_t N; int32_t K; int32_t accumulate; } xi_matmul_f16_c;
typedef struct { int32_t T; int32_t N; int32_t K; int32_t accumulate; } xi_matmul_q8_0_c;
typedef struct { int32_t T; int32_t N; int32_t K; int32_t accumulate; } xi_matmul_q4_0_c;
typedef struct { int32_t T; int32_t N; int32_t K; int32_t accumulate; } xi_matmul_q4_1_c;
typedef struct { int32_t n; } xi_dequantize_q8_0_c;
typedef struct { int32_t n; } xi_dequantize_q4_0_c;
typedef struct { int32_t n; } xi_dequantize_q4_1_c;
typedef struct { int32_t rows; int32_t n; } xi_argmax_c;
typedef struct { int32_t T; int32_t N; int32_t K; int32_t accumulate; float eps; } xi_rmsnorm_matmul_f32_c;
typedef struct { int32_t T; int32_t N; int32_t K; int32_t accumulate; float eps; } xi_rmsnorm_matmul_f16_c;
typedef struct { int32_t T; int32_t N; int32_t K; int32_t accumulate; float eps; } xi_rmsnorm_matmul_q8_0_c;
typedef struct { int32_t T; int32_t N; int32_t K; int32_t accumulate; float eps; } xi_rmsnorm_matmul_q4_0_c;
typedef struct { int32_t T; int32_t N; int32_t K; int32_t accumulate; float eps; } xi_rmsnorm_matmul_q4_1_c;
typedef struct { int32_t T; int32_t N; int32_t K; float eps; } xi_rmsnorm_matmul_swiglu_f32_c;
typedef struct { int32_t T; int32_t N; int32_t K; float eps; } xi_rmsnorm_matmul_swiglu_f16_c;
typedef struct { int32_t T; int32_t N; int32_t K; float eps; } xi_rmsnorm_matmul_swiglu_q8_0_c;
typedef struct { int32_t T; int32_t N; int32_t K; float eps; } xi_rmsnorm_matmul_swiglu_q4_0_c;
typedef struct { int32_t T; int32_t N; int32_t K; float eps; } xi_rmsnorm_matmul_swiglu_q4_1_c;
typedef struct { int32_t T; int32_t n_head; int32_t n_kv; int32_t head_dim; int32_t row_stride; int32_t ctx; float theta; } xi_rope_kv_store_c;

/* ---- kernels: b[i] = address of binding i, c = constants struct ------ */
int xi_k_affine(void *const *b, const void *c);
int xi_k_add(void *const *b, const void *c);
int xi_k_rmsnorm(void *const *b, const void *c);
int xi_k_rope(void *const *b, const void *c);
int xi_k_swiglu(void *const *b, const void *c);
int xi_k_softmax(void *const *b, const void *c);
int xi_k_attention(void *const *b, const void *c);
int xi_k_attention_batched(void *const *b, const void *c);
int xi_k_kv_store(void *const *b, const void *c);
int xi_k_get_rows_f32(void *const *b, const void *c);
int xi_k_get_rows_f16(void *const *b, const void *c);
int xi_k_get_rows_q8_0(void *const *b, const void *c);
int xi_k_get_rows_q4_0(void *const *b, const void *c);
int xi_k_get_rows_q4_1(void *const *b, const void *c);
int xi_k_matmul_f32(void *const *b, const void *c);
int xi_k_matmul_f16(void *const *b, const void *c);
int xi_k_matmul_q8_0(void *const *b, const void *c);
int xi_k_matmul_q4_0(void *const *b, const void *c);
int xi_k_matmul_q4_1(void *const *b, const void *c);
int xi_k_dequantize_q8_0(void *const *b, const void *c);
int xi_k_dequantize_q4_0(void *const *b, const void *c);
int xi_k_dequantize_q4_1(void *const *b, const void *c);
int xi_k_argmax(void *const *b, const void *c);
int xi_k_rmsnorm_matmul_f32(void *const *b, const void *c);
int xi_k_rmsnorm_matmul_f16(void *const *b, const void *c);
int xi_k_rmsnorm_matmul_q8_0(void *const *b, const void *c);
int xi_k_rmsnorm_matmul_q4_0(void *const *b, const void *c);
int xi_k_rmsnorm_matmul_q4_1(void *const *b, const void *c);
int xi_k_rmsnorm_matmul_swiglu_f32(void *const *b, const void *c);
int xi_k_rmsnorm_matmul_swiglu_f16(void *const *b, const void *c);
int xi_k_rmsnorm_matmul_swiglu_q8_0(void *const *b, const void *c);
int xi_k_rmsnorm_matmul_swiglu_q4_0(void *const *b, const void *c);
int xi_k_rmsnorm_matmul_swiglu_q4_1(void *const *b, const void *c);
int xi_k_rope_kv_store(void *const *b, const void *c);

#endif
