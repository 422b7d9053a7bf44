// The cuBLASLt alternative to the hand-written matmul (`--matmul cublaslt`): the same generic product
// C (M, N) (+)= A·Bᵀ (+ bias), operands K-major or MN-major, so the two are measured on the same calls.
// Plans (descriptors + the heuristic's algorithm) are cached per shape, so timing sees only the GPU work.
#pragma once
#include "cuda_common.cuh"

#define CUBLASLT_WORKSPACE_BYTES (32u << 20)
#define CUBLASLT_CACHE_SIZE 64

typedef struct {
    int M, N, K, lda, ldb, ldc, a_kmajor, b_kmajor, c_fp32, has_bias, accumulate; // the key
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
} CublasLtPlan;

static cublasLtHandle_t g_cublaslt = NULL;
static void* g_cublaslt_workspace = NULL; // (CUBLASLT_WORKSPACE_BYTES)
static CublasLtPlan g_cublaslt_plans[CUBLASLT_CACHE_SIZE];
static int g_cublaslt_nplans = 0;

static inline void cublaslt_init(void) {
    if (g_cublaslt) return;
    cublasCheck(cublasLtCreate(&g_cublaslt));
    cudaCheck(cudaMalloc(&g_cublaslt_workspace, CUBLASLT_WORKSPACE_BYTES));
}

static inline void cublaslt_free(void) {
    if (!g_cublaslt) return;
    for (int i = 0; i < g_cublaslt_nplans; i++) {
        CublasLtPlan* p = &g_cublaslt_plans[i];
        cublasCheck(cublasLtMatmulDescDestroy(p->op));
        cublasCheck(cublasLtMatrixLayoutDestroy(p->la));
        cublasCheck(cublasLtMatrixLayoutDestroy(p->lb));
        cublasCheck(cublasLtMatrixLayoutDestroy(p->lc));
    }
    g_cublaslt_nplans = 0;
    cudaCheck(cudaFree(g_cublaslt_workspace));
    cublasCheck(cublasLtDestroy(g_cublaslt));
    g_cublaslt = NULL;
}

// cuBLAS is column-major: our row-major C (M, N) is its (N, M); its A is our B and its B our A.
static inline CublasLtPlan* cublaslt_plan(int M, int N, int K, int lda, int ldb, int ldc, int a_kmajor, int b_kmajor,
                                          int c_fp32, int has_bias, int accumulate) {
    for (int i = 0; i < g_cublaslt_nplans; i++) {
        CublasLtPlan* p = &g_cublaslt_plans[i];
        if (p->M == M && p->N == N && p->K == K && p->lda == lda && p->ldb == ldb && p->ldc == ldc && p->a_kmajor == a_kmajor &&
            p->b_kmajor == b_kmajor && p->c_fp32 == c_fp32 && p->has_bias == has_bias && p->accumulate == accumulate)
            return p;
    }
    if (g_cublaslt_nplans == CUBLASLT_CACHE_SIZE) td_fatal("cuBLASLt plan cache full (%d shapes)", CUBLASLT_CACHE_SIZE);
    CublasLtPlan* p = &g_cublaslt_plans[g_cublaslt_nplans];
    memset(p, 0, sizeof(*p));
    p->M = M; p->N = N; p->K = K; p->lda = lda; p->ldb = ldb; p->ldc = ldc;
    p->a_kmajor = a_kmajor; p->b_kmajor = b_kmajor; p->c_fp32 = c_fp32; p->has_bias = has_bias; p->accumulate = accumulate;
#ifdef ENABLE_FP32
    const cudaDataType_t xt = CUDA_R_32F;
#else
    const cudaDataType_t xt = CUDA_R_16BF;
#endif
    const cudaDataType_t ct = c_fp32 ? CUDA_R_32F : xt;
    // CUBLAS_COMPUTE_32F: plain fp32 accumulation (no TF32), in fp32 mode too
    cublasCheck(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = b_kmajor ? CUBLAS_OP_T : CUBLAS_OP_N; // its A = our B (N, K)
    cublasOperation_t tb = a_kmajor ? CUBLAS_OP_N : CUBLAS_OP_T; // its B = our Aᵀ (K, M)
    cublasCheck(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    cublasCheck(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    if (has_bias) {
        cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        cublasCheck(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
        cublasCheck(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &xt, sizeof(xt)));
    }
    if (ta == CUBLAS_OP_T) cublasCheck(cublasLtMatrixLayoutCreate(&p->la, xt, K, N, ldb));
    else cublasCheck(cublasLtMatrixLayoutCreate(&p->la, xt, N, K, ldb));
    if (tb == CUBLAS_OP_N) cublasCheck(cublasLtMatrixLayoutCreate(&p->lb, xt, K, M, lda));
    else cublasCheck(cublasLtMatrixLayoutCreate(&p->lb, xt, M, K, lda));
    cublasCheck(cublasLtMatrixLayoutCreate(&p->lc, ct, N, M, ldc));
    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = CUBLASLT_WORKSPACE_BYTES;
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    // our tensors are 16-byte aligned (not the default's 256: per-layer slices start anywhere on 16 bytes)
    uint32_t align = 16;
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align, sizeof(align)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align, sizeof(align)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align, sizeof(align)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align, sizeof(align)));
    cublasLtMatmulHeuristicResult_t heur;
    int nres = 0;
    cublasCheck(cublasLtMatmulAlgoGetHeuristic(g_cublaslt, p->op, p->la, p->lb, p->lc, p->lc, pref, 1, &heur, &nres));
    cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
    if (nres == 0) td_fatal("cuBLASLt: no algorithm for M=%d N=%d K=%d (a_kmajor %d, b_kmajor %d, c_fp32 %d)", M, N, K, a_kmajor, b_kmajor, c_fp32);
    p->algo = heur.algo;
    g_cublaslt_nplans++;
    return p;
}

// C (M, N) row-major with leading dimension ldc: C (+)= Σ_k A(m,k)·B(n,k) (+ bias[n]);
// A(m,k) = a_kmajor ? A[m*lda + k] : A[k*lda + m], and likewise B with n; C float if c_fp32, else floatX
static inline void cublaslt_gemm(void* C, const floatX* A, const floatX* B, const floatX* bias, int M, int N, int K, int lda,
                                 int ldb, int ldc, int a_kmajor, int b_kmajor, int c_fp32, int accumulate) {
    cublaslt_init();
    CublasLtPlan* p = cublaslt_plan(M, N, K, lda, ldb, ldc, a_kmajor, b_kmajor, c_fp32, bias != NULL, accumulate);
    if (bias) cublasCheck(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    cublasCheck(cublasLtMatmul(g_cublaslt, p->op, &alpha, B, p->la, A, p->lb, &beta, C, p->lc, C, p->lc, &p->algo,
                               g_cublaslt_workspace, CUBLASLT_WORKSPACE_BYTES, g_cuda_stream));
}
