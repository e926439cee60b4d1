// test/test_ops.h — every op, through the same dispatchers the model calls, against float64.
//
// For each op: an independent float64 forward written here from the definition (not from the
// op's code); the op's forward must match it; the op's backward must match central finite
// differences of L = sum(dout * forward_f64(inputs)) taken in float64 at the op's (rounded)
// inputs. Sizes are odd on purpose (nothing a multiple of 8, attention longer than a key tile).
// Tolerances: test/tolerances.h.

#include "tolerances.h"

// ---- helpers

static double ops_relerr(const double* a, const double* b, int64_t n) {
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < n; i++) { num += (a[i] - b[i]) * (a[i] - b[i]); den += b[i] * b[i]; }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

// Random floatX values (from N(0, scale)) and their exact float64 copies.
static void ops_rand(floatX* x, double* xd, int64_t n, double scale, uint64_t seed) {
    uint64_t key = rng_key(seed, 0x54455354ull, n);
    for (int64_t i = 0; i < n; i++) {
        x[i] = rn((float)(scale * rng_normal(key, (uint64_t)i)));
        xd[i] = ld(x[i]);
    }
}
static void ops_to_d(const floatX* x, double* d, int64_t n) { for (int64_t i = 0; i < n; i++) d[i] = ld(x[i]); }
static void ops_f_to_d(const float* x, double* d, int64_t n) { for (int64_t i = 0; i < n; i++) d[i] = x[i]; }

// Central finite difference of f(params) with respect to every element of params[0..n).
typedef double (*OpsLossFn)(void* ctx);
static void ops_fd(double* params, int64_t n, OpsLossFn f, void* ctx, double* grad) {
    for (int64_t i = 0; i < n; i++) {
        double x = params[i], h = 1e-4 * (fabs(x) > 1.0 ? fabs(x) : 1.0);
        params[i] = x + h;
        double up = f(ctx);
        params[i] = x - h;
        double dn = f(ctx);
        params[i] = x;
        grad[i] = (up - dn) / (2 * h);
    }
}

// The ops' workspace for these tests: the test's own buffer (not a tagged allocation, so the
// memory accounting of trainers built later in this process stays exact).
static void ops_workspace(void) {
    static float* buf = NULL;
    if (!buf) buf = (float*)calloc((size_t)1 << 23, sizeof(float));
    g_work = buf;
    g_work_floats = (size_t)1 << 23;
}

static double gelu_d(double x) { return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }

// ---- matmul + bias (+ GELU)

typedef struct { int N, C, OC, gelu_in; double *inp, *w, *b, *dout; } MatmulRef;

// out = (gelu_in ? gelu(inp) : inp) @ w^T + b; returns sum(dout * out); out may be NULL
static double matmul_ref(void* ctx_, double* out) {
    MatmulRef* m = (MatmulRef*)ctx_;
    double L = 0.0;
    for (int i = 0; i < m->N; i++)
        for (int o = 0; o < m->OC; o++) {
            double s = m->b[o];
            for (int c = 0; c < m->C; c++) {
                double x = m->inp[i * m->C + c];
                s += (m->gelu_in ? gelu_d(x) : x) * m->w[o * m->C + c];
            }
            if (out) out[i * m->OC + o] = s;
            L += m->dout[i * m->OC + o] * s;
        }
    return L;
}
static double matmul_loss(void* ctx) { return matmul_ref(ctx, NULL); }

// Errors of the matmul op (forward, dinp, dweight, dbias) against the float64 reference.
static void matmul_errors(int gelu_in, double err[4]) {
    ops_workspace();
    const int N = 7, C = 13, OC = 11;
    floatX *inp = (floatX*)calloc(N * C, sizeof(floatX)), *w = (floatX*)calloc(OC * C, sizeof(floatX));
    floatX *b = (floatX*)calloc(OC, sizeof(floatX)), *dout = (floatX*)calloc(N * OC, sizeof(floatX));
    floatX *out = (floatX*)calloc(N * OC, sizeof(floatX)), *dinp = (floatX*)calloc(N * C, sizeof(floatX));
    floatX *ginp = (floatX*)calloc(N * C, sizeof(floatX)); // gelu(inp) when gelu_in
    float *dw = (float*)calloc(OC * C, sizeof(float)), *db = (float*)calloc(OC, sizeof(float));
    double *inpd = (double*)calloc(N * C, 8), *wd = (double*)calloc(OC * C, 8), *bd = (double*)calloc(OC, 8);
    double *doutd = (double*)calloc(N * OC, 8), *ref = (double*)calloc(N * OC, 8), *got = (double*)calloc(N * OC + N * C + OC * C, 8);
    double *fd = (double*)calloc(N * C + OC * C + OC, 8);
    ops_rand(inp, inpd, N * C, 1.0, 1);
    ops_rand(w, wd, OC * C, 0.5, 2);
    ops_rand(b, bd, OC, 0.5, 3);
    ops_rand(dout, doutd, N * OC, 1.0, 4);
    MatmulRef m = {N, C, OC, gelu_in, inpd, wd, bd, doutd};
    const floatX* x = inp;
    if (gelu_in) { op_gelu_forward(ginp, inp, N * C); x = ginp; }
    op_matmul_forward(out, NULL, x, w, b, N, C, OC);
    matmul_ref(&m, ref);
    ops_to_d(out, got, N * OC);
    err[0] = ops_relerr(got, ref, N * OC);
    op_matmul_backward(dinp, dw, db, dout, x, w, gelu_in ? inp : NULL, N, C, OC);
    ops_fd(inpd, N * C, matmul_loss, &m, fd);
    ops_to_d(dinp, got, N * C);
    err[1] = ops_relerr(got, fd, N * C);
    ops_fd(wd, OC * C, matmul_loss, &m, fd);
    ops_f_to_d(dw, got, OC * C);
    err[2] = ops_relerr(got, fd, OC * C);
    ops_fd(bd, OC, matmul_loss, &m, fd);
    ops_f_to_d(db, got, OC);
    err[3] = ops_relerr(got, fd, OC);
    free(inp); free(w); free(b); free(dout); free(out); free(dinp); free(ginp); free(dw); free(db);
    free(inpd); free(wd); free(bd); free(doutd); free(ref); free(got); free(fd);
}

// Both CPU matmul paths: the plain loop, and OpenBLAS when the build has it.
#ifdef USE_BLAS
#define OPS_BLAS_MODES 2
#else
#define OPS_BLAS_MODES 1
#endif

// Both paths, checked against float64: forward, dinp (through GELU when gelu_in), dweight, dbias.
static void check_matmul(int gelu_in) {
    for (int blas = 0; blas < OPS_BLAS_MODES; blas++) {
        double e[4];
        g_use_blas = blas;
        matmul_errors(gelu_in, e);
        g_use_blas = 0;
        CHECKF(e[0] < TOL_OP_FWD, "blas %d forward %.3g", blas, e[0]);
        CHECKF(e[1] < TOL_OP_BWD, "blas %d %s %.3g", blas, gelu_in ? "dpre (through GELU)" : "dinp", e[1]);
        CHECKF(e[2] < TOL_OP_BWD, "blas %d dweight %.3g", blas, e[2]);
        CHECKF(e[3] < TOL_OP_BWD, "blas %d dbias %.3g", blas, e[3]);
        printf("    matmul%s (%s): fwd %.2e %s %.2e dw %.2e db %.2e\n", gelu_in ? "(gelu(x))" : "", blas ? "OpenBLAS" : "loop",
               e[0], gelu_in ? "dpre" : "dinp", e[1], e[2], e[3]);
    }
}

TEST(op_matmul) { check_matmul(0); }

// The MLP's second matmul reads gelu(pre): its backward fuses GELU's derivative into dinp.
TEST(op_matmul_gelu_input) { check_matmul(1); }

// The forward with GELU writes both the pre-activation and gelu of its *rounded* value.
TEST(op_matmul_gelu_output) {
    ops_workspace();
    const int N = 5, C = 9, OC = 17;
    floatX inp[N * C], w[OC * C], b[OC], pre[N * OC], out[N * OC];
    double inpd[N * C], wd[OC * C], bd[OC], pred[N * OC], outd[N * OC], refpre[N * OC], refout[N * OC];
    ops_rand(inp, inpd, N * C, 1.0, 5);
    ops_rand(w, wd, OC * C, 0.5, 6);
    ops_rand(b, bd, OC, 0.5, 7);
    op_matmul_forward(out, pre, inp, w, b, N, C, OC);
    for (int i = 0; i < N; i++)
        for (int o = 0; o < OC; o++) {
            double s = bd[o];
            for (int c = 0; c < C; c++) s += inpd[i * C + c] * wd[o * C + c];
            refpre[i * OC + o] = s;
            refout[i * OC + o] = gelu_d(s);
        }
    ops_to_d(pre, pred, N * OC);
    ops_to_d(out, outd, N * OC);
    double e1 = ops_relerr(pred, refpre, N * OC), e2 = ops_relerr(outd, refout, N * OC);
    CHECKF(e1 < TOL_OP_FWD, "pre-activation %.3g", e1);
    CHECKF(e2 < TOL_OP_FWD, "gelu output %.3g", e2);
    // recomputing GELU from the stored pre-activation gives the same bits (what -r 1 relies on)
    floatX again[N * OC];
    op_gelu_forward(again, pre, N * OC);
    CHECK(memcmp(again, out, sizeof(out)) == 0);
}

// Proof that the gradient checks can fail: drop the bias-gradient term and the check must see it.
TEST(op_broken_backward_is_caught) {
    double e[4];
    g_fault_drop_bias_grad = 1;
    matmul_errors(0, e);
    g_fault_drop_bias_grad = 0;
    CHECKF(e[3] > 0.5, "a backward without its bias gradient passed the check (err %.3g)", e[3]);
    CHECKF(!(e[3] < TOL_OP_BWD), "the dbias check did not fail");
    matmul_errors(0, e);
    CHECKF(e[3] < TOL_OP_BWD, "restored backward: dbias %.3g", e[3]);
}

// ---- residual + layernorm

typedef struct { int N, C; double *a, *b, *w, *bias, *dout, *dres; } LnRef;

static double ln_ref(void* ctx_, double* out) {
    LnRef* r = (LnRef*)ctx_;
    double L = 0.0;
    for (int i = 0; i < r->N; i++) {
        double x[64], mean = 0.0, var = 0.0;
        for (int c = 0; c < r->C; c++) { x[c] = r->a[i * r->C + c] + r->b[i * r->C + c]; mean += x[c]; }
        mean /= r->C;
        for (int c = 0; c < r->C; c++) var += (x[c] - mean) * (x[c] - mean);
        var /= r->C;
        double s = 1.0 / sqrt(var + 1e-5);
        for (int c = 0; c < r->C; c++) {
            double y = (x[c] - mean) * s * r->w[c] + r->bias[c];
            if (out) out[i * r->C + c] = y;
            L += r->dout[i * r->C + c] * y + r->dres[i * r->C + c] * x[c]; // x also flows on in the residual
        }
    }
    return L;
}
static double ln_loss(void* ctx) { return ln_ref(ctx, NULL); }

TEST(op_residual_layernorm) {
    ops_workspace();
    const int N = 5, C = 19;
    floatX a[N * C], b[N * C], w[C], bias[C], dout[N * C], dres[N * C], res[N * C], out[N * C];
    double ad[N * C], bd[N * C], wd[C], biasd[C], doutd[N * C], dresd[N * C], ref[N * C], got[N * C], fd[N * C];
    float mean[N], rstd[N], dw[C] = {0}, db[C] = {0};
    ops_rand(a, ad, N * C, 1.0, 11);
    ops_rand(b, bd, N * C, 1.0, 12);
    ops_rand(w, wd, C, 1.0, 13);
    ops_rand(bias, biasd, C, 1.0, 14);
    ops_rand(dout, doutd, N * C, 1.0, 15);
    ops_rand(dres, dresd, N * C, 1.0, 16);
    op_residual_layernorm_forward(res, out, mean, rstd, a, b, w, bias, N, C);
    // the reference normalises the rounded residual, as the op defines
    double resd[N * C], zero[N * C] = {0};
    ops_to_d(res, resd, N * C);
    LnRef r = {N, C, resd, zero, wd, biasd, doutd, dresd};
    ln_ref(&r, ref);
    ops_to_d(out, got, N * C);
    double ef = ops_relerr(got, ref, N * C);
    CHECKF(ef < TOL_OP_FWD, "forward %.3g", ef);
    // residual = a + b
    for (int i = 0; i < N * C; i++) ref[i] = ad[i] + bd[i];
    double er = ops_relerr(resd, ref, N * C);
    CHECKF(er < TOL_OP_FWD, "residual %.3g", er);
    // backward: dres += d through the normalisation (dres on entry is the residual stream's gradient)
    floatX dinp[N * C];
    memcpy(dinp, dres, sizeof(dinp));
    op_layernorm_backward(dinp, dw, db, dout, res, w, mean, rstd, N, C);
    LnRef r2 = {N, C, ad, bd, wd, biasd, doutd, dresd};
    ops_fd(ad, N * C, ln_loss, &r2, fd);
    ops_to_d(dinp, got, N * C);
    double ei = ops_relerr(got, fd, N * C);
    double fdw[C], fdb[C], gw[C], gb[C];
    ops_fd(wd, C, ln_loss, &r2, fdw);
    ops_fd(biasd, C, ln_loss, &r2, fdb);
    ops_f_to_d(dw, gw, C);
    ops_f_to_d(db, gb, C);
    double ew = ops_relerr(gw, fdw, C), eb = ops_relerr(gb, fdb, C);
    CHECKF(ei < TOL_OP_BWD, "dinp %.3g", ei);
    CHECKF(ew < TOL_OP_BWD, "dweight %.3g", ew);
    CHECKF(eb < TOL_OP_BWD, "dbias %.3g", eb);
    printf("    layernorm: fwd %.2e res %.2e dinp %.2e dw %.2e db %.2e\n", ef, er, ei, ew, eb);
    // normalising the stored residual again (no add) reproduces the bits (what -r 2 relies on)
    floatX out2[N * C];
    float mean2[N], rstd2[N];
    op_residual_layernorm_forward(NULL, out2, mean2, rstd2, res, NULL, w, bias, N, C);
    CHECK(memcmp(out2, out, sizeof(out)) == 0 && memcmp(mean2, mean, sizeof(mean)) == 0 && memcmp(rstd2, rstd, sizeof(rstd)) == 0);
}

// ---- attention (grouped-query: query head h reads kv head h / (NH / NKV))

typedef struct { int B, T, NH, NKV, HD; double *qkv, *dout; const int* seg; } AttRef; // seg: NULL = causal

static double att_ref(void* ctx_, double* out, double* lse) {
    AttRef* a = (AttRef*)ctx_;
    int B = a->B, T = a->T, NH = a->NH, NKV = a->NKV, HD = a->HD;
    int64_t QKV = (int64_t)(NH + 2 * NKV) * HD, ATT = (int64_t)NH * HD;
    double scale = 1.0 / sqrt((double)HD), L = 0.0;
    double* p = (double*)malloc(sizeof(double) * T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            int kh = h * NKV / NH; // the group of h: heads [kh NH/NKV, (kh+1) NH/NKV) share kv head kh
            for (int i = 0; i < T; i++) {
                const double* q = a->qkv + ((int64_t)b * T + i) * QKV + h * HD;
                double mx = -1e300;
                int j0 = a->seg ? a->seg[b * T + i] : 0; // keys of i's example only
                for (int j = j0; j <= i; j++) {
                    const double* k = a->qkv + ((int64_t)b * T + j) * QKV + (NH + kh) * HD;
                    double s = 0.0;
                    for (int d = 0; d < HD; d++) s += q[d] * k[d];
                    p[j] = s * scale;
                    mx = p[j] > mx ? p[j] : mx;
                }
                double sum = 0.0;
                for (int j = j0; j <= i; j++) { p[j] = exp(p[j] - mx); sum += p[j]; }
                if (lse) lse[((int64_t)b * NH + h) * T + i] = mx + log(sum);
                for (int d = 0; d < HD; d++) {
                    double o = 0.0;
                    for (int j = j0; j <= i; j++) o += p[j] / sum * a->qkv[((int64_t)b * T + j) * QKV + (NH + NKV + kh) * HD + d];
                    if (out) out[((int64_t)b * T + i) * ATT + h * HD + d] = o;
                    L += a->dout[((int64_t)b * T + i) * ATT + h * HD + d] * o;
                }
            }
        }
    free(p);
    return L;
}
static double att_loss(void* ctx) { return att_ref(ctx, NULL, NULL); }

// Forward, lse and dqkv (against finite differences) of one shape; T spans two key tiles.
static void check_attention(int B, int T, int NH, int NKV, int HD, uint64_t seed) {
    ops_workspace();
    int64_t nq = (int64_t)B * T * (NH + 2 * NKV) * HD, no = (int64_t)B * T * NH * HD, nl = (int64_t)B * NH * T;
    floatX *qkv = (floatX*)calloc(nq, sizeof(floatX)), *out = (floatX*)calloc(no, sizeof(floatX));
    floatX *dout = (floatX*)calloc(no, sizeof(floatX)), *dqkv = (floatX*)calloc(nq, sizeof(floatX));
    float* lse = (float*)calloc(nl, sizeof(float));
    double *qkvd = (double*)calloc(nq, 8), *doutd = (double*)calloc(no, 8), *ref = (double*)calloc(no, 8), *got = (double*)calloc(nq, 8);
    double *lsed = (double*)calloc(nl, 8), *lseg = (double*)calloc(nl, 8), *fd = (double*)calloc(nq, 8);
    ops_rand(qkv, qkvd, nq, 1.0, seed);
    ops_rand(dout, doutd, no, 1.0, seed + 1);
    op_attention_forward(out, lse, qkv, NULL, B, T, NH, NKV, HD);
    AttRef a = {B, T, NH, NKV, HD, qkvd, doutd, NULL};
    att_ref(&a, ref, lsed);
    ops_to_d(out, got, no);
    double ef = ops_relerr(got, ref, no);
    ops_f_to_d(lse, lseg, nl);
    double el = ops_relerr(lseg, lsed, nl);
    op_attention_backward(dqkv, dout, qkv, out, lse, NULL, B, T, NH, NKV, HD);
    ops_fd(qkvd, nq, att_loss, &a, fd);
    ops_to_d(dqkv, got, nq);
    double eb = ops_relerr(got, fd, nq);
    CHECKF(ef < TOL_OP_FWD, "NH %d NKV %d HD %d: forward %.3g", NH, NKV, HD, ef);
    CHECKF(el < TOL_OP_FWD, "NH %d NKV %d HD %d: lse %.3g", NH, NKV, HD, el);
    CHECKF(eb < TOL_OP_BWD, "NH %d NKV %d HD %d: dqkv %.3g", NH, NKV, HD, eb);
    printf("    attention B %d T %d NH %d NKV %d HD %d: fwd %.2e lse %.2e dqkv %.2e\n", B, T, NH, NKV, HD, ef, el, eb);
    free(qkv); free(out); free(dout); free(dqkv); free(lse); free(qkvd); free(doutd); free(ref); free(got);
    free(lsed); free(lseg); free(fd);
}

TEST(op_attention) { check_attention(2, ATT_BK + 7, 2, 2, 3, 21); } // GPT-2's case: NKV = NH, head size 3

// Grouped-query attention: 2 query heads per kv head, and a single kv head for 3 query heads.
TEST(op_attention_gqa) {
    check_attention(1, ATT_BK + 7, 4, 2, 3, 23);
    check_attention(1, ATT_BK + 7, 3, 1, 4, 25);
}

// GQA reads the shared K/V exactly as multi-head attention reads repeated copies (transformers'
// repeat_kv): the forward's bits must equal those of the MHA op on the expanded qkv.
TEST(op_attention_gqa_is_repeat_kv) {
    ops_workspace();
    const int B = 2, T = ATT_BK + 5, NH = 4, NKV = 2, HD = 5, rep = NH / NKV;
    int64_t QG = (NH + 2 * NKV) * HD, QM = 3 * NH * HD, no = (int64_t)B * T * NH * HD;
    floatX *qg = (floatX*)calloc((size_t)B * T * QG, sizeof(floatX)), *qm = (floatX*)calloc((size_t)B * T * QM, sizeof(floatX));
    floatX *og = (floatX*)calloc(no, sizeof(floatX)), *om = (floatX*)calloc(no, sizeof(floatX));
    float *lg = (float*)calloc((size_t)B * NH * T, 4), *lm = (float*)calloc((size_t)B * NH * T, 4);
    double* tmp = (double*)calloc((size_t)B * T * QG, 8);
    ops_rand(qg, tmp, (int64_t)B * T * QG, 1.0, 27);
    for (int64_t r = 0; r < (int64_t)B * T; r++) {
        memcpy(qm + r * QM, qg + r * QG, sizeof(floatX) * NH * HD); // q heads as they are
        for (int h = 0; h < NH; h++) {
            memcpy(qm + r * QM + (NH + h) * HD, qg + r * QG + (NH + h / rep) * HD, sizeof(floatX) * HD);
            memcpy(qm + r * QM + (2 * NH + h) * HD, qg + r * QG + (NH + NKV + h / rep) * HD, sizeof(floatX) * HD);
        }
    }
    op_attention_forward(og, lg, qg, NULL, B, T, NH, NKV, HD);
    op_attention_forward(om, lm, qm, NULL, B, T, NH, NH, HD);
    CHECK(memcmp(og, om, sizeof(floatX) * no) == 0);
    CHECK(memcmp(lg, lm, sizeof(float) * B * NH * T) == 0);
    free(qg); free(qm); free(og); free(om); free(lg); free(lm); free(tmp);
}

// ---- embedding

typedef struct { int B, T, C; const int* tok; double *wte, *wpe, *dout; } EncRef;
static double enc_loss(void* ctx_) {
    EncRef* e = (EncRef*)ctx_;
    double L = 0.0;
    for (int i = 0; i < e->B * e->T; i++)
        for (int c = 0; c < e->C; c++)
            L += e->dout[i * e->C + c] * (e->wte[e->tok[i] * e->C + c] + e->wpe[(i % e->T) * e->C + c]);
    return L;
}

TEST(op_encoder) {
    ops_workspace();
    const int B = 3, T = 5, C = 7, V = 11;
    int tok[B * T] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9}; // repeats: the backward must sum them
    floatX wte[V * C], wpe[T * C], dout[B * T * C], out[B * T * C];
    double wted[V * C], wped[T * C], doutd[B * T * C], got[V * C], fd[V * C], ref[B * T * C], outd[B * T * C];
    float dwte[V * C] = {0}, dwpe[T * C] = {0};
    ops_rand(wte, wted, V * C, 1.0, 31);
    ops_rand(wpe, wped, T * C, 1.0, 32);
    ops_rand(dout, doutd, B * T * C, 1.0, 33);
    op_encoder_forward(out, tok, NULL, wte, wpe, B, T, C);
    for (int i = 0; i < B * T; i++)
        for (int c = 0; c < C; c++) ref[i * C + c] = wted[tok[i] * C + c] + wped[(i % T) * C + c];
    ops_to_d(out, outd, B * T * C);
    double ef = ops_relerr(outd, ref, B * T * C);
    op_encoder_backward(dwte, dwpe, dout, tok, NULL, B, T, C, V);
    EncRef e = {B, T, C, tok, wted, wped, doutd};
    ops_fd(wted, V * C, enc_loss, &e, fd);
    ops_f_to_d(dwte, got, V * C);
    double e1 = ops_relerr(got, fd, V * C);
    ops_fd(wped, T * C, enc_loss, &e, fd);
    ops_f_to_d(dwpe, got, T * C);
    double e2 = ops_relerr(got, fd, T * C);
    CHECKF(ef < TOL_OP_FWD, "forward %.3g", ef);
    CHECKF(e1 < TOL_OP_BWD, "dwte %.3g", e1);
    CHECKF(e2 < TOL_OP_BWD, "dwpe %.3g", e2);
    printf("    encoder: fwd %.2e dwte %.2e dwpe %.2e\n", ef, e1, e2);
}

// Without positions (wpe == NULL, the Llama family): out is the token's row, bit for bit; dwte as above.
TEST(op_encoder_no_positions) {
    ops_workspace();
    const int B = 2, T = 5, C = 7, V = 11;
    int tok[B * T] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3};
    floatX wte[V * C], dout[B * T * C], out[B * T * C];
    double wted[V * C], wped[T * C] = {0}, doutd[B * T * C], got[V * C], fd[V * C];
    float dwte[V * C] = {0};
    ops_rand(wte, wted, V * C, 1.0, 34);
    ops_rand(dout, doutd, B * T * C, 1.0, 35);
    op_encoder_forward(out, tok, NULL, wte, NULL, B, T, C);
    int same = 1;
    for (int i = 0; i < B * T; i++) same &= memcmp(out + i * C, wte + tok[i] * C, sizeof(floatX) * C) == 0;
    CHECK(same);
    op_encoder_backward(dwte, NULL, dout, tok, NULL, B, T, C, V);
    EncRef e = {B, T, C, tok, wted, wped, doutd}; // wpe all zero: the loss of a model without positions
    ops_fd(wted, V * C, enc_loss, &e, fd);
    ops_f_to_d(dwte, got, V * C);
    double e1 = ops_relerr(got, fd, V * C);
    CHECKF(e1 < TOL_OP_BWD, "dwte %.3g", e1);
}

// ---- residual + RMSNorm (transformers' LlamaRMSNorm: x * rsqrt(mean(x^2) + eps), then * weight)

typedef struct { int N, C; double eps; double *a, *b, *w, *dout, *dres; } RmsRef;

static double rms_ref(void* ctx_, double* out, double* rstd) {
    RmsRef* r = (RmsRef*)ctx_;
    double L = 0.0;
    for (int i = 0; i < r->N; i++) {
        double x[64], ms = 0.0;
        for (int c = 0; c < r->C; c++) { x[c] = r->a[i * r->C + c] + r->b[i * r->C + c]; ms += x[c] * x[c]; }
        double s = 1.0 / sqrt(ms / r->C + r->eps);
        if (rstd) rstd[i] = s;
        for (int c = 0; c < r->C; c++) {
            double y = r->w[c] * (x[c] * s);
            if (out) out[i * r->C + c] = y;
            L += r->dout[i * r->C + c] * y + r->dres[i * r->C + c] * x[c]; // x also flows on in the residual
        }
    }
    return L;
}
static double rms_loss(void* ctx) { return rms_ref(ctx, NULL, NULL); }

TEST(op_residual_rmsnorm) {
    ops_workspace();
    const int N = 5, C = 19;
    const float eps = 1e-6f;
    floatX a[N * C], b[N * C], w[C], dout[N * C], dres[N * C], res[N * C], out[N * C];
    double ad[N * C], bd[N * C], wd[C], doutd[N * C], dresd[N * C], ref[N * C], got[N * C], fd[N * C];
    double resd[N * C], zero[N * C] = {0}, rref[N], rgot[N];
    float rstd[N], dw[C] = {0};
    ops_rand(a, ad, N * C, 1.0, 51);
    ops_rand(b, bd, N * C, 1.0, 52);
    ops_rand(w, wd, C, 1.0, 53);
    ops_rand(dout, doutd, N * C, 1.0, 54);
    ops_rand(dres, dresd, N * C, 1.0, 55);
    op_residual_rmsnorm_forward(res, out, rstd, a, b, w, N, C, eps);
    ops_to_d(res, resd, N * C);
    RmsRef r = {N, C, (double)eps, resd, zero, wd, doutd, dresd}; // normalises the rounded residual, as the op
    rms_ref(&r, ref, rref);
    ops_to_d(out, got, N * C);
    double ef = ops_relerr(got, ref, N * C);
    ops_f_to_d(rstd, rgot, N);
    double es = ops_relerr(rgot, rref, N);
    for (int i = 0; i < N * C; i++) ref[i] = ad[i] + bd[i];
    double er = ops_relerr(resd, ref, N * C);
    CHECKF(ef < TOL_OP_FWD, "forward %.3g", ef);
    CHECKF(es < TOL_OP_FWD, "rstd %.3g", es);
    CHECKF(er < TOL_OP_FWD, "residual %.3g", er);
    floatX dinp[N * C];
    memcpy(dinp, dres, sizeof(dinp));
    op_rmsnorm_backward(dinp, dw, dout, res, w, rstd, N, C);
    RmsRef r2 = {N, C, (double)eps, ad, bd, wd, doutd, dresd};
    ops_fd(ad, N * C, rms_loss, &r2, fd);
    ops_to_d(dinp, got, N * C);
    double ei = ops_relerr(got, fd, N * C);
    double fdw[C], gw[C];
    ops_fd(wd, C, rms_loss, &r2, fdw);
    ops_f_to_d(dw, gw, C);
    double ew = ops_relerr(gw, fdw, C);
    CHECKF(ei < TOL_OP_BWD, "dinp %.3g", ei);
    CHECKF(ew < TOL_OP_BWD, "dweight %.3g", ew);
    printf("    rmsnorm: fwd %.2e rstd %.2e res %.2e dinp %.2e dw %.2e\n", ef, es, er, ei, ew);
    // normalising the stored residual again (no add) reproduces the bits (what -r 2 relies on)
    floatX out2[N * C];
    float rstd2[N];
    op_residual_rmsnorm_forward(NULL, out2, rstd2, res, NULL, w, N, C, eps);
    CHECK(memcmp(out2, out, sizeof(out)) == 0 && memcmp(rstd2, rstd, sizeof(rstd)) == 0);
    // transformers' rounding order: out = rn(w * rn(x * rstd)), not rn(w * x * rstd) (they differ in BF16)
    int order = 1;
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++) {
            floatX e = rn(ld(w[c]) * ld(rn(ld(res[i * C + c]) * rstd[i])));
            order &= memcmp(&e, &out[i * C + c], sizeof(floatX)) == 0;
        }
    CHECK(order);
}

// ---- per-head RMSNorm (Qwen3's q_norm, k_norm) on the q and k heads of a fused qkv row

typedef struct { int BT, NH, NKV, HD; double eps; double *qkv, *wq, *wk, *dout; } HeadRmsRef;
// out: qkv with the q, k heads normalised (v copied); returns sum(dout * out) over the q and k heads
static double head_rms_ref(void* ctx_, double* out) {
    HeadRmsRef* r = (HeadRmsRef*)ctx_;
    int W = (r->NH + 2 * r->NKV) * r->HD;
    double L = 0.0;
    for (int bt = 0; bt < r->BT; bt++)
        for (int h = 0; h < r->NH + 2 * r->NKV; h++) {
            const double* x = r->qkv + bt * W + h * r->HD;
            if (h >= r->NH + r->NKV) { if (out) for (int c = 0; c < r->HD; c++) out[bt * W + h * r->HD + c] = x[c]; continue; }
            const double* w = h < r->NH ? r->wq : r->wk;
            double ms = 0.0;
            for (int c = 0; c < r->HD; c++) ms += x[c] * x[c];
            double s = 1.0 / sqrt(ms / r->HD + r->eps);
            for (int c = 0; c < r->HD; c++) {
                double y = w[c] * x[c] * s;
                if (out) out[bt * W + h * r->HD + c] = y;
                L += r->dout[bt * W + h * r->HD + c] * y;
            }
        }
    return L;
}
static double head_rms_loss(void* ctx) { return head_rms_ref(ctx, NULL); }

// Forward against float64 (v heads untouched, the input kept), every gradient against finite
// differences, GQA (NH 3, NKV 1) with an odd head size (HD 10); the backward leaves dv alone.
TEST(op_head_rmsnorm) {
    ops_workspace();
    enum { BT = 4, NH = 3, NKV = 1, HD = 10, W = (NH + 2 * NKV) * HD, QK = (NH + NKV) * HD };
    const float eps = 1e-6f;
    floatX qkv[BT * W], wq[HD], wk[HD], dout[BT * W], x[BT * QK];
    double qkvd[BT * W], wqd[HD], wkd[HD], doutd[BT * W], ref[BT * W], got[BT * W], fd[BT * W];
    float rstd[BT * (NH + NKV)], dwq[HD] = {0}, dwk[HD] = {0};
    ops_rand(qkv, qkvd, BT * W, 1.0, 61);
    ops_rand(wq, wqd, HD, 1.0, 62);
    ops_rand(wk, wkd, HD, 1.0, 63);
    ops_rand(dout, doutd, BT * W, 1.0, 64);
    floatX in[BT * W];
    memcpy(in, qkv, sizeof(in));
    op_head_rmsnorm_forward(qkv, x, rstd, wq, wk, BT, NH, NKV, HD, eps);
    HeadRmsRef r = {BT, NH, NKV, HD, (double)eps, qkvd, wqd, wkd, doutd};
    head_rms_ref(&r, ref);
    ops_to_d(qkv, got, BT * W);
    double ef = ops_relerr(got, ref, BT * W);
    int kept = 1, v_same = 1;
    for (int bt = 0; bt < BT; bt++) {
        kept &= memcmp(x + bt * QK, in + bt * W, sizeof(floatX) * QK) == 0;
        v_same &= memcmp(qkv + bt * W + QK, in + bt * W + QK, sizeof(floatX) * NKV * HD) == 0;
    }
    CHECKF(ef < TOL_OP_FWD, "forward %.3g", ef);
    CHECK(kept && v_same);
    floatX d[BT * W];
    memcpy(d, dout, sizeof(d));
    op_head_rmsnorm_backward(d, dwq, dwk, x, wq, wk, rstd, BT, NH, NKV, HD);
    ops_fd(qkvd, BT * W, head_rms_loss, &r, fd);
    double gq[BT * W], fq[BT * W];
    int n = 0, dv_same = 1;
    for (int bt = 0; bt < BT; bt++) {
        for (int i = 0; i < QK; i++) { gq[n] = ld(d[bt * W + i]); fq[n] = fd[bt * W + i]; n++; }
        dv_same &= memcmp(d + bt * W + QK, dout + bt * W + QK, sizeof(floatX) * NKV * HD) == 0;
    }
    double ei = ops_relerr(gq, fq, n);
    double fdq[HD], fdk[HD], g1[HD], g2[HD];
    ops_fd(wqd, HD, head_rms_loss, &r, fdq);
    ops_fd(wkd, HD, head_rms_loss, &r, fdk);
    ops_f_to_d(dwq, g1, HD);
    ops_f_to_d(dwk, g2, HD);
    double ewq = ops_relerr(g1, fdq, HD), ewk = ops_relerr(g2, fdk, HD);
    CHECKF(ei < TOL_OP_BWD, "dinp %.3g", ei);
    CHECKF(ewq < TOL_OP_BWD && ewk < TOL_OP_BWD, "dwq %.3g dwk %.3g", ewq, ewk);
    CHECK(dv_same);
    printf("    head rmsnorm: fwd %.2e dqk %.2e dwq %.2e dwk %.2e (v heads and dv untouched)\n", ef, ei, ewq, ewk);
    // no q/k norms (wq NULL): both directions leave everything as it was
    memcpy(qkv, in, sizeof(qkv));
    op_head_rmsnorm_forward(qkv, x, rstd, NULL, NULL, BT, NH, NKV, HD, eps);
    memcpy(d, dout, sizeof(d));
    op_head_rmsnorm_backward(d, NULL, NULL, x, NULL, NULL, rstd, BT, NH, NKV, HD);
    CHECK(memcmp(qkv, in, sizeof(qkv)) == 0 && memcmp(d, dout, sizeof(d)) == 0);
}

// ---- SwiGLU: out = silu(gate) * up, gu = gate ; up per row

typedef struct { int N, F; double *gu, *dout; } SwiRef;
static double swi_ref(void* ctx_, double* out) {
    SwiRef* r = (SwiRef*)ctx_;
    double L = 0.0;
    for (int n = 0; n < r->N; n++)
        for (int c = 0; c < r->F; c++) {
            double g = r->gu[(int64_t)n * 2 * r->F + c], u = r->gu[(int64_t)n * 2 * r->F + r->F + c];
            double y = g / (1.0 + exp(-g)) * u;
            if (out) out[n * r->F + c] = y;
            L += r->dout[n * r->F + c] * y;
        }
    return L;
}
static double swi_loss(void* ctx) { return swi_ref(ctx, NULL); }

TEST(op_swiglu) {
    ops_workspace();
    const int N = 5, F = 13;
    floatX gu[N * 2 * F], dout[N * F], out[N * F], dgu[N * 2 * F];
    double gud[N * 2 * F], doutd[N * F], ref[N * F], got[N * 2 * F], fd[N * 2 * F];
    ops_rand(gu, gud, N * 2 * F, 2.0, 61); // gates over silu's curved range
    ops_rand(dout, doutd, N * F, 1.0, 62);
    op_swiglu_forward(out, gu, N, F);
    SwiRef r = {N, F, gud, doutd};
    swi_ref(&r, ref);
    ops_to_d(out, got, N * F);
    double ef = ops_relerr(got, ref, N * F);
    op_swiglu_backward(dgu, dout, gu, N, F);
    ops_fd(gud, N * 2 * F, swi_loss, &r, fd);
    ops_to_d(dgu, got, N * 2 * F);
    double eb = ops_relerr(got, fd, N * 2 * F);
    CHECKF(ef < TOL_OP_FWD, "forward %.3g", ef);
    CHECKF(eb < TOL_OP_BWD, "dgu %.3g", eb);
    printf("    swiglu: fwd %.2e dgu %.2e\n", ef, eb);
}

// ---- RoPE (rotate_half layout on the q and k heads of qkv)

// rope_table against transformers' LlamaRotaryEmbedding (test/fixtures/rope.bin, dev/rope_fixture.py):
// default, linear and two llama3 cases (one with 500000 and 8192 as Llama 3.1 ships, one whose bands
// put frequencies in all three llama3 regions), and op_rope_forward against apply_rotary_pos_emb.
TEST(op_rope_matches_transformers) {
    Fixture fx;
    char err[512];
    if (fixture_load(&fx, "test/fixtures/rope.bin", err, sizeof(err))) { printf("    %s\n", err); CHECK(0); return; }
    for (int k = 0; k < 4; k++) {
        char name[64];
        snprintf(name, sizeof(name), "rope%d.cfg", k);
        const float* cfg = (const float*)fixture_get(&fx, name)->data;
        const int types[3] = {ROPE_DEFAULT, ROPE_LINEAR, ROPE_LLAMA3}; // the fixture's 0, 1, 2
        RopeParams p = {(int)cfg[0], (double)cfg[2], types[(int)cfg[3]], (double)cfg[4], (double)cfg[5], (double)cfg[6], (int)cfg[7]};
        int T = (int)cfg[1], H2 = p.HD / 2;
        float* tab = (float*)malloc(sizeof(float) * 2 * T * H2);
        rope_table(tab, &p, T);
        float inv[ROPE_MAX_HD / 2];
        rope_inv_freq(inv, &p);
        snprintf(name, sizeof(name), "rope%d.inv_freq", k);
        CHECKF(memcmp(inv, fixture_get(&fx, name)->data, sizeof(float) * H2) == 0, "table %d: inv_freq differs from transformers' bits", k);
        snprintf(name, sizeof(name), "rope%d.cos", k);
        const float* cref = (const float*)fixture_get(&fx, name)->data;
        snprintf(name, sizeof(name), "rope%d.sin", k);
        const float* sref = (const float*)fixture_get(&fx, name)->data;
        // inv_freq is transformers' to the bit; cos/sin: torch evaluates them with SLEEF's vectorised
        // cosf/sinf (1-ulp bound), we round the exact value: at most 1 ulp apart, and mostly equal
        int differ = 0, maxulp = 0;
        for (int i = 0; i < 2 * T * H2; i++) {
            float a = tab[i], b = i < T * H2 ? cref[i] : sref[i - T * H2];
            int32_t ia, ib;
            memcpy(&ia, &a, 4);
            memcpy(&ib, &b, 4);
            int ulp = (a == b) ? 0 : ((ia < 0) != (ib < 0)) ? 1 << 30 : abs(ia - ib);
            differ += ulp != 0;
            maxulp = ulp > maxulp ? ulp : maxulp;
        }
        printf("    rope table %d (HD %d, rope type %d): %d of %d values differ from transformers' bits, max %d ulp\n",
               k, p.HD, p.type, differ, 2 * T * H2, maxulp);
        CHECKF(maxulp <= 1 && differ * 5 < 2 * T * H2, "table %d: %d values differ, up to %d ulp", k, differ, maxulp);
        if (k == 0) { // apply to q and k
            const int* sh = (const int*)fixture_get(&fx, "apply.shape")->data;
            int B = sh[0], NH = sh[2], NKV = sh[3], HD = sh[4];
            const float* q = (const float*)fixture_get(&fx, "apply.q")->data;
            const float* kk = (const float*)fixture_get(&fx, "apply.k")->data;
            const float* qo = (const float*)fixture_get(&fx, "apply.q_out")->data;
            const float* ko = (const float*)fixture_get(&fx, "apply.k_out")->data;
            int64_t QKV = (int64_t)(NH + 2 * NKV) * HD, nr = (int64_t)B * T;
            floatX* qkv = (floatX*)calloc(nr * QKV, sizeof(floatX));
            double *got = (double*)calloc(nr * (NH + NKV) * HD, 8), *ref = (double*)calloc(nr * (NH + NKV) * HD, 8);
            for (int64_t r = 0; r < nr; r++) {
                for (int e = 0; e < NH * HD; e++) qkv[r * QKV + e] = rn(q[r * NH * HD + e]);
                for (int e = 0; e < NKV * HD; e++) {
                    qkv[r * QKV + NH * HD + e] = rn(kk[r * NKV * HD + e]);
                    qkv[r * QKV + (NH + NKV) * HD + e] = rn(7.0f); // v: untouched
                }
            }
            op_rope_forward(qkv, tab, NULL, B, T, NH, NKV, HD);
            int vsame = 1;
            for (int64_t r = 0; r < nr; r++) {
                for (int e = 0; e < NH * HD; e++) { got[r * (NH + NKV) * HD + e] = ld(qkv[r * QKV + e]); ref[r * (NH + NKV) * HD + e] = qo[r * NH * HD + e]; }
                for (int e = 0; e < NKV * HD; e++) {
                    got[r * (NH + NKV) * HD + NH * HD + e] = ld(qkv[r * QKV + NH * HD + e]);
                    ref[r * (NH + NKV) * HD + NH * HD + e] = ko[r * NKV * HD + e];
                    vsame &= ld(qkv[r * QKV + (NH + NKV) * HD + e]) == 7.0f;
                }
            }
            double ea = ops_relerr(got, ref, nr * (NH + NKV) * HD);
            printf("    rope apply vs apply_rotary_pos_emb: %.2e\n", ea);
            CHECKF(ea < TOL_OP_FWD, "apply %.3g", ea);
            CHECK(vsame);
            free(qkv); free(got); free(ref);
        }
        free(tab);
    }
    fixture_free(&fx);
}

// The rotation against a float64 formula written from the paper (angle t * theta^(-2i/HD), pairs
// (i, i + HD/2)), and the backward against finite differences; GQA layout (NH 3, NKV 1).
typedef struct { int B, T, NH, NKV, HD; double theta; double *qkv, *dout; } RopeRef;
static double rope_ref(void* ctx_, double* out) {
    RopeRef* r = (RopeRef*)ctx_;
    int H2 = r->HD / 2;
    int64_t QKV = (int64_t)(r->NH + 2 * r->NKV) * r->HD;
    double L = 0.0;
    for (int64_t bt = 0; bt < (int64_t)r->B * r->T; bt++) {
        int t = (int)(bt % r->T);
        for (int e = 0; e < QKV; e++) {
            int head = e / r->HD, d = e % r->HD, i = d % H2;
            const double* x = r->qkv + bt * QKV + head * r->HD;
            double y = x[d];
            if (head < r->NH + r->NKV) {
                double ang = t * pow(r->theta, -2.0 * i / r->HD);
                y = d < H2 ? x[i] * cos(ang) - x[i + H2] * sin(ang) : x[i + H2] * cos(ang) + x[i] * sin(ang);
            }
            if (out) out[bt * QKV + e] = y;
            L += r->dout[bt * QKV + e] * y;
        }
    }
    return L;
}
static double rope_loss(void* ctx) { return rope_ref(ctx, NULL); }

TEST(op_rope) {
    const int B = 2, T = 9, NH = 3, NKV = 1, HD = 10;
    const int64_t n = (int64_t)B * T * (NH + 2 * NKV) * HD;
    floatX qkv[n], dqkv[n];
    double qkvd[n], doutd[n], ref[n], got[n], fd[n];
    RopeParams p = {HD, 10000.0, ROPE_DEFAULT, 1.0, 0.0, 0.0, 0};
    float tab[2 * T * HD / 2];
    rope_table(tab, &p, T);
    ops_rand(qkv, qkvd, n, 1.0, 71);
    ops_rand(dqkv, doutd, n, 1.0, 72);
    op_rope_forward(qkv, tab, NULL, B, T, NH, NKV, HD);
    RopeRef r = {B, T, NH, NKV, HD, 10000.0, qkvd, doutd};
    rope_ref(&r, ref);
    ops_to_d(qkv, got, n);
    double ef = ops_relerr(got, ref, n);
    // the v heads pass unchanged, bit for bit (ref holds them exactly)
    int vsame = 1;
    for (int64_t bt = 0; bt < B * T; bt++)
        for (int e = (NH + NKV) * HD; e < (NH + 2 * NKV) * HD; e++) vsame &= got[bt * (NH + 2 * NKV) * HD + e] == ref[bt * (NH + 2 * NKV) * HD + e];
    op_rope_backward(dqkv, tab, NULL, B, T, NH, NKV, HD);
    ops_fd(qkvd, n, rope_loss, &r, fd);
    ops_to_d(dqkv, got, n);
    double eb = ops_relerr(got, fd, n);
    CHECKF(ef < TOL_OP_FWD, "forward %.3g", ef);
    CHECKF(eb < TOL_OP_BWD, "backward %.3g", eb);
    CHECK(vsame);
    printf("    rope: fwd %.2e bwd %.2e\n", ef, eb);
}

// ---- the segment table: per-example attention and positions (packed examples, issue 25)
//
// seg (B, T): seg[b*T + t] = the index of the first token of t's example; query t sees keys
// seg..t and sits at position t - seg. Each op with a table must compute, for every example, what
// it computes for that example alone at the start of a row (seg == NULL), bit for bit on the CPU in
// both builds (the loops start their key tiles at the example's first key, so the sums are the
// same sums in the same order) -- stricter than issue 25's 1e-6 (FP32) and stated BF16 tolerance.
// The attention is also checked against the float64 masked loop (att_ref with seg) and finite
// differences; dwpe, which sums over the examples, against float64 and across thread counts.

// seg of rows packed with examples of the given lengths, row after row; each row's lengths sum to T.
static void seg_from_lengths(int* seg, int B, int T, const int* len, int nlen) {
    int b = 0, t = 0;
    for (int e = 0; e < nlen; e++) {
        for (int k = 0; k < len[e]; k++) seg[b * T + t + k] = t;
        t += len[e];
        if (t == T) { b++; t = 0; }
    }
    if (b != B || t != 0) { fprintf(stderr, "seg_from_lengths: the lengths do not fill %d rows of %d\n", B, T); exit(1); }
}

// Rows [s, s + n) of row b of x (B, T, W) into y (n, W) and back.
static void seg_rows(floatX* y, const floatX* x, int b, int T, int s, int n, int64_t W) {
    memcpy(y, x + ((int64_t)b * T + s) * W, sizeof(floatX) * n * W);
}
static int seg_rows_equal(const floatX* x, const floatX* y, int b, int T, int s, int n, int64_t W) {
    return memcmp(y, x + ((int64_t)b * T + s) * W, sizeof(floatX) * n * W) == 0;
}

// Row 0: examples of 5, ATT_BK + 3 (over a key tile), 1 and 18 tokens; row 1: one example of T.
#define SEG_T (ATT_BK + 27)
static const int seg_lens[] = {5, ATT_BK + 3, 1, 18, SEG_T};

TEST(op_attention_seg) {
    ops_workspace();
    const int B = 2, T = SEG_T, NH = 2, NKV = 1, HD = 3, nl_ = 5;
    int64_t QKV = (NH + 2 * NKV) * HD, ATT = NH * HD;
    int64_t nq = B * T * QKV, no = B * T * ATT, nl = (int64_t)B * NH * T;
    int seg[B * T];
    seg_from_lengths(seg, B, T, seg_lens, nl_);
    floatX *qkv = (floatX*)calloc(nq, sizeof(floatX)), *out = (floatX*)calloc(no, sizeof(floatX));
    floatX *dout = (floatX*)calloc(no, sizeof(floatX)), *dqkv = (floatX*)calloc(nq, sizeof(floatX));
    floatX *out0 = (floatX*)calloc(no, sizeof(floatX)), *dqkv0 = (floatX*)calloc(nq, sizeof(floatX));
    float *lse = (float*)calloc(nl, sizeof(float)), *lse0 = (float*)calloc(nl, sizeof(float));
    double *qkvd = (double*)calloc(nq, 8), *doutd = (double*)calloc(no, 8), *ref = (double*)calloc(no, 8);
    double *got = (double*)calloc(nq, 8), *lsed = (double*)calloc(nl, 8), *lseg = (double*)calloc(nl, 8), *fd = (double*)calloc(nq, 8);
    ops_rand(qkv, qkvd, nq, 1.0, 81);
    ops_rand(dout, doutd, no, 1.0, 82);
    op_attention_forward(out, lse, qkv, seg, B, T, NH, NKV, HD);
    op_attention_backward(dqkv, dout, qkv, out, lse, seg, B, T, NH, NKV, HD);
    // against the float64 block-diagonal causal loop and its finite differences
    AttRef a = {B, T, NH, NKV, HD, qkvd, doutd, seg};
    att_ref(&a, ref, lsed);
    ops_to_d(out, got, no);
    double ef = ops_relerr(got, ref, no);
    ops_f_to_d(lse, lseg, nl);
    double el = ops_relerr(lseg, lsed, nl);
    ops_fd(qkvd, nq, att_loss, &a, fd);
    ops_to_d(dqkv, got, nq);
    double eb = ops_relerr(got, fd, nq);
    CHECKF(ef < TOL_OP_FWD, "forward %.3g", ef);
    CHECKF(el < TOL_OP_FWD, "lse %.3g", el);
    CHECKF(eb < TOL_OP_BWD, "dqkv %.3g", eb);
    printf("    attention with examples %d, %d, %d, %d | %d: fwd %.2e lse %.2e dqkv %.2e (float64, FD)\n",
           seg_lens[0], seg_lens[1], seg_lens[2], seg_lens[3], seg_lens[4], ef, el, eb);
    // each example alone (seg == NULL, at the start of a row): the same bits
    int same = 1, s = 0, b = 0;
    for (int e = 0; e < nl_; e++) {
        int n = seg_lens[e];
        floatX *q1 = (floatX*)calloc(n * QKV, sizeof(floatX)), *d1 = (floatX*)calloc(n * ATT, sizeof(floatX));
        floatX *o1 = (floatX*)calloc(n * ATT, sizeof(floatX)), *dq1 = (floatX*)calloc(n * QKV, sizeof(floatX));
        float* l1 = (float*)calloc((size_t)NH * n, sizeof(float));
        seg_rows(q1, qkv, b, T, s, n, QKV);
        seg_rows(d1, dout, b, T, s, n, ATT);
        op_attention_forward(o1, l1, q1, NULL, 1, n, NH, NKV, HD);
        op_attention_backward(dq1, d1, q1, o1, l1, NULL, 1, n, NH, NKV, HD);
        same &= seg_rows_equal(out, o1, b, T, s, n, ATT) && seg_rows_equal(dqkv, dq1, b, T, s, n, QKV);
        for (int h = 0; h < NH; h++) same &= memcmp(lse + ((int64_t)b * NH + h) * T + s, l1 + (int64_t)h * n, sizeof(float) * n) == 0;
        free(q1); free(d1); free(o1); free(dq1); free(l1);
        s += n;
        if (s == T) { b++; s = 0; }
    }
    CHECKF(same, "an example packed differs from the same example alone");
    // a row holding one example is the causal op: row 1 of the NULL run, bit for bit
    op_attention_forward(out0, lse0, qkv, NULL, B, T, NH, NKV, HD);
    op_attention_backward(dqkv0, dout, qkv, out0, lse0, NULL, B, T, NH, NKV, HD);
    same &= seg_rows_equal(out, out0 + T * ATT, 1, T, 0, T, ATT) && seg_rows_equal(dqkv, dqkv0 + T * QKV, 1, T, 0, T, QKV);
    CHECKF(same, "a row of one example differs from seg == NULL");
    printf("    each example alone at the start of a row: out, lse, dqkv %s\n", same ? "bit for bit" : "DIFFER");
    free(qkv); free(out); free(dout); free(dqkv); free(out0); free(dqkv0); free(lse); free(lse0);
    free(qkvd); free(doutd); free(ref); free(got); free(lsed); free(lseg); free(fd);
}

// RoPE at positions t - seg: each example rotated as alone (forward and backward, bit for bit).
TEST(op_rope_seg) {
    const int B = 2, T = SEG_T, NH = 3, NKV = 1, HD = 10, nl_ = 5;
    const int64_t W = (NH + 2 * NKV) * HD, n = (int64_t)B * T * W;
    int seg[B * T];
    seg_from_lengths(seg, B, T, seg_lens, nl_);
    floatX *x = (floatX*)calloc(n, sizeof(floatX)), *dx = (floatX*)calloc(n, sizeof(floatX));
    floatX *x0 = (floatX*)calloc(n, sizeof(floatX)), *dx0 = (floatX*)calloc(n, sizeof(floatX));
    double* tmp = (double*)calloc(n, 8);
    RopeParams p = {HD, 10000.0, ROPE_DEFAULT, 1.0, 0.0, 0.0, 0};
    float* tab = (float*)calloc((size_t)T * HD, sizeof(float));
    rope_table(tab, &p, T);
    ops_rand(x, tmp, n, 1.0, 83);
    ops_rand(dx, tmp, n, 1.0, 84);
    memcpy(x0, x, sizeof(floatX) * n);
    memcpy(dx0, dx, sizeof(floatX) * n);
    op_rope_forward(x, tab, seg, B, T, NH, NKV, HD);
    op_rope_backward(dx, tab, seg, B, T, NH, NKV, HD);
    int same = 1, s = 0, b = 0;
    for (int e = 0; e < nl_; e++) {
        int len = seg_lens[e];
        floatX *x1 = (floatX*)calloc(len * W, sizeof(floatX)), *d1 = (floatX*)calloc(len * W, sizeof(floatX));
        float* tab1 = (float*)calloc((size_t)len * HD, sizeof(float));
        rope_table(tab1, &p, len);
        seg_rows(x1, x0, b, T, s, len, W);
        seg_rows(d1, dx0, b, T, s, len, W);
        op_rope_forward(x1, tab1, NULL, 1, len, NH, NKV, HD);
        op_rope_backward(d1, tab1, NULL, 1, len, NH, NKV, HD);
        same &= seg_rows_equal(x, x1, b, T, s, len, W) && seg_rows_equal(dx, d1, b, T, s, len, W);
        free(x1); free(d1); free(tab1);
        s += len;
        if (s == T) { b++; s = 0; }
    }
    CHECKF(same, "an example packed differs from the same example alone");
    printf("    rope with examples: each as alone %s\n", same ? "bit for bit" : "DIFFERS");
    free(x); free(dx); free(x0); free(dx0); free(tmp); free(tab);
}

// Learned positions t - seg: the forward as alone (bit for bit); dwte and dwpe against float64 sums
// (dwpe now sums the rows of each position over every example of every row), and dwpe the same
// bits at 1, 2 and 3 threads (its order is fixed: rows sorted by position, ENC_CHUNK pieces).
TEST(op_encoder_seg) {
    ops_workspace();
    const int B = 2, T = SEG_T, C = 7, V = 11, nl_ = 5;
    int seg[B * T], tok[B * T];
    seg_from_lengths(seg, B, T, seg_lens, nl_);
    for (int i = 0; i < B * T; i++) tok[i] = (i * 7 + i / 5) % V;
    floatX *wte = (floatX*)calloc(V * C, sizeof(floatX)), *wpe = (floatX*)calloc(T * C, sizeof(floatX));
    floatX *dout = (floatX*)calloc(B * T * C, sizeof(floatX)), *out = (floatX*)calloc(B * T * C, sizeof(floatX));
    double *wted = (double*)calloc(V * C, 8), *wped = (double*)calloc(T * C, 8), *doutd = (double*)calloc(B * T * C, 8);
    double *refte = (double*)calloc(V * C, 8), *refpe = (double*)calloc(T * C, 8), *got = (double*)calloc(V * C + T * C, 8);
    float *dwte = (float*)calloc(V * C, 4), *dwpe[3];
    ops_rand(wte, wted, V * C, 1.0, 85);
    ops_rand(wpe, wped, T * C, 1.0, 86);
    ops_rand(dout, doutd, B * T * C, 1.0, 87);
    op_encoder_forward(out, tok, seg, wte, wpe, B, T, C);
    int same = 1, s = 0, b = 0;
    for (int e = 0; e < nl_; e++) {
        int len = seg_lens[e];
        floatX* o1 = (floatX*)calloc(len * C, sizeof(floatX));
        op_encoder_forward(o1, tok + b * T + s, NULL, wte, wpe, 1, len, C);
        same &= seg_rows_equal(out, o1, b, T, s, len, C);
        free(o1);
        s += len;
        if (s == T) { b++; s = 0; }
    }
    CHECKF(same, "a packed example's embedding differs from the example alone");
    for (int i = 0; i < B * T; i++)
        for (int c = 0; c < C; c++) {
            refte[tok[i] * C + c] += doutd[i * C + c];
            refpe[(i % T - seg[i]) * C + c] += doutd[i * C + c];
        }
    int saved = omp_get_max_threads(), det = 1;
    for (int th = 0; th < 3; th++) {
        dwpe[th] = (float*)calloc(T * C, 4);
        omp_set_num_threads(th + 1);
        memset(dwte, 0, sizeof(float) * V * C);
        op_encoder_backward(dwte, dwpe[th], dout, tok, seg, B, T, C, V);
        if (th) det &= memcmp(dwpe[th], dwpe[0], sizeof(float) * T * C) == 0;
    }
    omp_set_num_threads(saved);
    ops_f_to_d(dwte, got, V * C);
    double e1 = ops_relerr(got, refte, V * C);
    ops_f_to_d(dwpe[0], got, T * C);
    double e2 = ops_relerr(got, refpe, T * C);
    CHECKF(e1 < TOL_OP_BWD, "dwte %.3g", e1);
    CHECKF(e2 < TOL_OP_BWD, "dwpe %.3g", e2);
    CHECKF(det, "dwpe depends on the thread count");
    printf("    encoder with examples: fwd as alone %s, dwte %.2e dwpe %.2e (float64), dwpe at 1/2/3 threads %s\n",
           same ? "bit for bit" : "DIFFERS", e1, e2, det ? "bit for bit" : "DIFFERS");
    for (int th = 0; th < 3; th++) free(dwpe[th]);
    free(wte); free(wpe); free(dout); free(out); free(wted); free(wped); free(doutd); free(refte); free(refpe); free(got); free(dwte);
}

// The tensor-core kernels' walks with a segment table (att_first_key_tile, att_query_tile_end in
// ops/attention.cuh; the emulator cases check the kernels' results, this one the walks' coverage on
// the host, where it is cheap): for packed rows at T 2048, a tile is visited exactly when it holds a
// (query, key) pair the mask lets through -- none needed is skipped, none visited is wasted -- for
// the forward/dQ walk and for dK/dV at both head sizes' query-tile heights. Then the prediction
// docs/ops.md quotes: the tiles visited against causal attention for two SFT length mixes.

// Row of T tokens packed with examples whose lengths are log-uniform in [lo, hi] (the last one cut at
// the row's end, as a packed sample cuts it); returns the number of examples started.
static int seg_pack_row(int* seg, int T, int lo, int hi, uint64_t key, uint64_t* ctr) {
    int n = 0;
    for (int t = 0; t < T; n++) {
        int len = (int)floor(exp(log((double)lo) + rng_uniform(key, (*ctr)++) * (log((double)hi + 1) - log((double)lo))));
        for (int k = 0; k < len && t < T; k++, t++) seg[t] = t - k;
    }
    return n;
}
// Does the tile [q0, q0 + nq) x [k0, k0 + nk) hold a pair with seg[i] <= j <= i?
static int seg_tile_needed(const int* seg, int q0, int nq, int k0, int nk) {
    for (int i = q0; i < q0 + nq; i++) {
        int a = seg[i] > k0 ? seg[i] : k0, z = i < k0 + nk - 1 ? i : k0 + nk - 1;
        if (a <= z) return 1;
    }
    return 0;
}

TEST(op_attention_tc_walk) {
    const int T = 2048, nt = T / FA_TILE, rows = 200;
    const struct { int lo, hi; const char* what; } mixes[] = {
        {16, 512, "short SFT mix (Alpaca-like: log-uniform 16..512 tokens, mean ~140)"},
        {64, 2048, "long SFT mix (chat-like: log-uniform 64..2048 tokens, mean ~570)"},
    };
    int* seg = (int*)malloc(sizeof(int) * T);
    int64_t cf, ckv64, ckv128;
    attention_tc_tiles(NULL, T, 64, &cf, &ckv64);
    attention_tc_tiles(NULL, T, 128, &cf, &ckv128);
    int bad = 0;
    for (int m = 0; m < 2; m++) {
        uint64_t key = rng_key(2025, m, 0), ctr = 0;
        int64_t f = 0, kv64 = 0, kv128 = 0, examples = 0;
        double pairs = 0.0; // (query, key) pairs the mask lets through: the work at element granularity
        for (int r = 0; r < rows; r++) {
            examples += seg_pack_row(seg, T, mixes[m].lo, mixes[m].hi, key, &ctr);
            for (int i = 0; i < T; i++) pairs += i - seg[i] + 1;
            int64_t a, b, c;
            attention_tc_tiles(seg, T, 64, &a, &b);
            attention_tc_tiles(seg, T, 128, &a, &c);
            f += a; kv64 += b; kv128 += c;
            if (r >= 20) continue; // the exhaustive check on the first 20 rows of each mix
            for (int qt = 0; qt < nt; qt++)
                for (int kt = 0; kt <= qt; kt++) {
                    int visited = kt >= att_first_key_tile(seg, qt * FA_TILE, FA_TILE);
                    bad += visited != seg_tile_needed(seg, qt * FA_TILE, FA_TILE, kt * FA_TILE, FA_TILE);
                }
            for (int HS = 64; HS <= 128; HS += 64) {
                int bc = FA_DKDV_BC(HS), nq = T / bc;
                for (int kt = 0; kt < nt; kt++) {
                    int it0 = kt * FA_TILE / bc, end = att_query_tile_end(seg, kt * FA_TILE + FA_TILE - 1, it0, nq, bc);
                    for (int it = it0; it < nq; it++)
                        bad += (it < end) != seg_tile_needed(seg, it * bc, bc, kt * FA_TILE, FA_TILE);
                }
            }
        }
        printf("    T %d, %s: %.1f examples a row; tiles visited against causal: forward and dQ %.1f%%, "
               "dK/dV %.1f%% (HS 64) %.1f%% (HS 128); unmasked pairs %.1f%%\n", T, mixes[m].what,
               (double)examples / rows, 100.0 * f / (cf * rows), 100.0 * kv64 / (ckv64 * rows),
               100.0 * kv128 / (ckv128 * rows), 100.0 * pairs / (rows * (double)T * (T + 1) / 2));
        CHECKF(f < cf * rows && kv64 < ckv64 * rows, "packing skipped no tile");
    }
    CHECKF(bad == 0, "%d tiles visited without a visible pair, or skipped with one", bad);
    // no table: the causal walk, every tile on or below the diagonal
    CHECK(cf == (int64_t)nt * (nt + 1) / 2);
    free(seg);
}

// ---- LM head + softmax cross-entropy (padded vocabulary masked)

typedef struct { int N, C, V, Vp; const int* tgt; double *x, *wte; double dloss; } ClsRef;
static double cls_ref(void* ctx_, double* losses, double* logits) {
    ClsRef* r = (ClsRef*)ctx_;
    double L = 0.0;
    double* z = (double*)malloc(sizeof(double) * r->V);
    for (int n = 0; n < r->N; n++) {
        double mx = -1e300, sum = 0.0;
        for (int j = 0; j < r->V; j++) {
            double s = 0.0;
            for (int c = 0; c < r->C; c++) s += r->x[n * r->C + c] * r->wte[j * r->C + c];
            z[j] = s;
            if (logits) logits[n * r->V + j] = s;
            mx = s > mx ? s : mx;
        }
        for (int j = 0; j < r->V; j++) sum += exp(z[j] - mx);
        double loss = mx + log(sum) - z[r->tgt[n]];
        if (losses) losses[n] = loss;
        L += r->dloss * loss;
    }
    free(z);
    return L;
}
static double cls_loss(void* ctx) { return cls_ref(ctx, NULL, NULL); }

TEST(op_lm_head_cross_entropy) {
    ops_workspace();
    const int N = 5, C = 9, V = 13, Vp = 16;
    int tgt[N] = {0, 12, 7, 7, 3};
    floatX x[N * C], wte[Vp * C], logits[N * Vp], dx[N * C];
    double xd[N * C], wted[Vp * C], ref[N * V], got[Vp * C], fd[Vp * C], lref[N], lgot[N];
    float losses[N], dwte[Vp * C] = {0};
    ops_rand(x, xd, N * C, 1.0, 41);
    ops_rand(wte, wted, Vp * C, 1.0, 42);
    for (int i = V * C; i < Vp * C; i++) { wte[i] = rn(0.0f); wted[i] = 0.0; } // padded rows are zero
    float dloss = 1.0f / N;
    op_lm_head_forward(logits, losses, x, wte, tgt, dloss, 0, N, C, V, Vp); // losses only
    ClsRef r = {N, C, V, Vp, tgt, xd, wted, dloss};
    cls_ref(&r, lref, ref);
    double lg[N * V];
    for (int n = 0; n < N; n++)
        for (int j = 0; j < V; j++) lg[n * V + j] = ld(logits[n * Vp + j]);
    double ez = ops_relerr(lg, ref, N * V);
    ops_f_to_d(losses, lgot, N);
    double el = ops_relerr(lgot, lref, N);
    // training: dlogits in place, then the matmul backward gives dx and dwte
    op_lm_head_forward(logits, losses, x, wte, tgt, dloss, 1, N, C, V, Vp);
    int pad_zero = 1;
    for (int n = 0; n < N; n++)
        for (int j = V; j < Vp; j++) pad_zero &= ld(logits[n * Vp + j]) == 0.0f;
    op_matmul_backward(dx, dwte, NULL, logits, x, wte, NULL, N, C, Vp);
    ops_fd(xd, N * C, cls_loss, &r, fd);
    ops_to_d(dx, got, N * C);
    double ex = ops_relerr(got, fd, N * C);
    ops_fd(wted, V * C, cls_loss, &r, fd); // real rows; padded rows must get exactly 0
    ops_f_to_d(dwte, got, Vp * C);
    double ew = ops_relerr(got, fd, V * C);
    int pad_grad_zero = 1;
    for (int i = V * C; i < Vp * C; i++) pad_grad_zero &= dwte[i] == 0.0f;
    CHECKF(ez < TOL_OP_FWD, "logits %.3g", ez);
    CHECKF(el < TOL_OP_FWD, "losses %.3g", el);
    CHECKF(ex < TOL_OP_BWD, "dx %.3g", ex);
    CHECKF(ew < TOL_OP_BWD, "dwte %.3g", ew);
    CHECK(pad_zero);
    CHECK(pad_grad_zero);
    printf("    lm head: logits %.2e losses %.2e dx %.2e dwte %.2e\n", ez, el, ex, ew);
}

// The whole head chunk by chunk (op_classifier) against the same head in one chunk (the unchunked
// path: one op_lm_head_forward and one op_matmul_backward over all rows) and against float64: the
// losses and dx bit for bit, dW within TOL_CLASSIFIER_CHUNK (its FP32 sum grouped by chunk); the
// logits never need more than one chunk (a guard past the chunk's buffer stays untouched); masked
// rows (-1) count nothing; dW accumulates (+=); evaluation (dloss 0) and sampling (no targets:
// the last rows' logits) give the unchunked bits.
TEST(op_classifier_chunked) {
    ops_workspace();
    const int N = 37, C = 9, V = 13, Vp = 16, chunk = 8, guard = 64;
    int tgt[N];
    int counted = 0;
    for (int n = 0; n < N; n++) { tgt[n] = n % 5 == 3 ? -1 : (n * 7 + 2) % V; counted += tgt[n] >= 0; }
    static floatX x[N * C], wte[Vp * C], whole[N * Vp], part[chunk * Vp + guard], dx1[N * C], dx2[N * C];
    static double xd[N * C], wted[Vp * C], fd[Vp * C], got[Vp * C];
    static float l1[N], l2[N], dw1[Vp * C], dw2[Vp * C];
    ops_rand(x, xd, N * C, 1.0, 43);
    ops_rand(wte, wted, Vp * C, 1.0, 44);
    for (int i = V * C; i < Vp * C; i++) { wte[i] = rn(0.0f); wted[i] = 0.0; } // padded rows are zero
    for (int i = 0; i < Vp * C; i++) dw1[i] = dw2[i] = 0.25f * (float)(i % 3); // += onto what is there
    for (int i = 0; i < guard; i++) part[chunk * Vp + i] = rn(7.0f);
    float dloss = 1.0f / (float)counted;
    int r1 = op_classifier(whole, l1, dx1, dw1, x, wte, tgt, dloss, N, C, V, Vp, N);   // one chunk
    int r2 = op_classifier(part, l2, dx2, dw2, x, wte, tgt, dloss, N, C, V, Vp, chunk); // five
    int guard_ok = 1;
    for (int i = 0; i < guard; i++) guard_ok &= ld(part[chunk * Vp + i]) == 7.0f;
    CHECKF(guard_ok, "the chunked head wrote past one chunk of logits");
    CHECKF(r1 == 0 && r2 == 32, "row0 %d, %d (expected 0, 32)", r1, r2);
    CHECKF(memcmp(part, whole + 32 * Vp, sizeof(floatX) * 5 * Vp) == 0, "the last chunk's dlogits differ from the unchunked rows");
    CHECKF(memcmp(l1, l2, sizeof(l1)) == 0, "per-token losses differ from the unchunked head");
    CHECKF(memcmp(dx1, dx2, sizeof(dx1)) == 0, "dx differs from the unchunked head");
    for (int i = 0; i < Vp * C; i++) { dw1[i] -= 0.25f * (float)(i % 3); dw2[i] -= 0.25f * (float)(i % 3); }
    double d1[Vp * C], d2[Vp * C];
    ops_f_to_d(dw1, d1, Vp * C);
    ops_f_to_d(dw2, d2, Vp * C);
    double ec = ops_relerr(d2, d1, Vp * C);
    CHECKF(ec < TOL_CLASSIFIER_CHUNK, "chunked dW vs unchunked %.3g", ec);
    // against float64 (finite differences of the masked mean loss): only counted rows enter
    int tk[N], nk = 0;
    static double xk[N * C];
    for (int n = 0; n < N; n++)
        if (tgt[n] >= 0) { tk[nk] = tgt[n]; memcpy(xk + nk * C, xd + n * C, sizeof(double) * C); nk++; }
    ClsRef r = {nk, C, V, Vp, tk, xk, wted, dloss};
    ops_fd(wted, V * C, cls_loss, &r, fd);
    ops_f_to_d(dw2, got, Vp * C);
    double ew = ops_relerr(got, fd, V * C);
    CHECKF(ew < TOL_OP_BWD, "chunked dW vs float64 %.3g", ew);
    int masked_ok = 1;
    for (int n = 0; n < N; n++) if (tgt[n] < 0) { masked_ok &= l2[n] == 0.0f; for (int c = 0; c < C; c++) masked_ok &= ld(dx2[n * C + c]) == 0.0f; }
    CHECKF(masked_ok, "a masked row has a loss or a gradient");
    // evaluation: losses only, the last chunk's logits in the buffer
    float l3[N];
    int r3 = op_classifier(part, l3, NULL, NULL, x, wte, tgt, 0.0f, N, C, V, Vp, chunk);
    op_lm_head_forward(whole, NULL, x, wte, NULL, 0.0f, 0, N, C, V, Vp);
    CHECKF(r3 == 32 && memcmp(part, whole + 32 * Vp, sizeof(floatX) * 5 * Vp) == 0, "evaluation's last chunk of logits");
    int same = 1;
    for (int n = 0; n < N; n++) same &= l3[n] == l1[n];
    CHECKF(same, "evaluation's losses differ from training's");
    // sampling: the logits of the last `chunk` rows
    int r4 = op_classifier(part, NULL, NULL, NULL, x, wte, NULL, 0.0f, N, C, V, Vp, chunk);
    CHECKF(r4 == N - chunk && memcmp(part, whole + (N - chunk) * Vp, sizeof(floatX) * chunk * Vp) == 0, "sampling's logits (row0 %d)", r4);
    printf("    chunked head (%d rows, chunks of %d): losses, dx identical; dW vs unchunked %.2e, vs float64 %.2e\n", N, chunk, ec, ew);
}

// ---- AdamW: one update against the documented formula in float64

TEST(op_adamw) {
    const int n = 37;
    floatX p[n];
    float master[n], m[n], v[n], g[n];
    double md[n], vd[n], wd_[n], gd[n];
    uint64_t key = rng_key(7, 8, 9);
    for (int i = 0; i < n; i++) {
        master[i] = (float)rng_normal(key, 4 * i);
        m[i] = (float)(0.1 * rng_normal(key, 4 * i + 1));
        v[i] = (float)fabs(0.01 * rng_normal(key, 4 * i + 2));
        g[i] = (float)rng_normal(key, 4 * i + 3);
        wd_[i] = master[i]; md[i] = m[i]; vd[i] = v[i]; gd[i] = g[i];
    }
    Segment segs[2] = {{0, 20, 1}, {24, 13, 0}}; // elements 20..23 are padding: untouched
    AdamWParams hp = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 0, 0};
    adamw_bias_corrections(&hp, 3);
    float before[n];
    memcpy(before, master, sizeof(before));
    op_adamw(p, master, m, v, g, segs, 2, &hp);
    double err = 0.0, scale = 0.0;
    double bc1 = 1 - pow(0.9, 3), bc2 = 1 - pow(0.95, 3);
    for (int s = 0; s < 2; s++)
        for (int i = (int)segs[s].off; i < segs[s].off + segs[s].len; i++) {
            double gg = gd[i] * 0.5, mm = 0.9 * md[i] + 0.1 * gg, vv = 0.95 * vd[i] + 0.05 * gg * gg;
            double u = (mm / bc1) / (sqrt(vv / bc2) + 1e-8);
            double w = wd_[i] - 1e-2 * (u + (segs[s].decay ? 0.1 : 0.0) * wd_[i]);
            err = fmax(err, fabs(w - master[i]) / fabs(w) + fabs(mm - m[i]) / (fabs(mm) + 1e-30) + fabs(vv - v[i]) / vv);
            scale = fmax(scale, fabs(w));
            floatX want = rn(master[i]);
            CHECK(memcmp(&p[i], &want, sizeof(floatX)) == 0); // the parameter is the master rounded to nearest
        }
    for (int i = 20; i < 24; i++) CHECK(master[i] == before[i]);
    CHECKF(err < 1e-5, "max relative error %.3g", err);
}

// The overflow check before the update (op_adamw_check): it flags exactly the updates that would
// leave a non-finite m, v, master or stored parameter, writes nothing, and the update reading the
// flag (op_adamw_scalars) changes nothing when it is set; a normal update through the flagged path
// is bitwise op_adamw's. Cases: a normal step; the finite learning rate FLT_MAX (lr * u overflows,
// or w rounds to a BF16 infinity); one master at 3.4e38 (finite in FP32, infinite as BF16: flagged
// in the BF16 build only); m - g overflowing in m; a step whose norm is not finite (not checked).
TEST(op_adamw_check_overflow) {
    // adamw_finite's test of the stored parameter equals isfinite(ld(rn(w))), at the boundary too
    const uint32_t wbits[] = {0x7f7f7fffu, 0x7f7f8000u, 0x7f7f8001u, 0x7f7fffffu, 0x7f800000u, 0x7fc00000u, 0x3f800000u,
                              0x00000001u, 0xff7f7fffu, 0xff7f8000u, 0xff800000u, 0x7f7f0000u};
    for (size_t k = 0; k < sizeof(wbits) / sizeof(wbits[0]); k++) {
        float w;
        memcpy(&w, &wbits[k], 4);
        int want = isfinite(w) && isfinite(ld(rn(w)));
        CHECKF(adamw_finite(0.0f, 0.0f, w) == want, "w = %08x: adamw_finite %d, isfinite(ld(rn(w))) %d", wbits[k], adamw_finite(0.0f, 0.0f, w), want);
    }
    CHECK(!adamw_finite(INFINITY, 0.0f, 1.0f) && !adamw_finite(0.0f, NAN, 1.0f) && adamw_finite(FLT_MAX, FLT_MAX, 1.0f));
    const int n = 37;
    uint64_t key = rng_key(7, 8, 10);
    float master0[n], m0[n], v0[n], g[n];
    floatX p0[n];
    for (int i = 0; i < n; i++) {
        master0[i] = (float)rng_normal(key, 4 * i);
        m0[i] = (float)(0.1 * rng_normal(key, 4 * i + 1));
        v0[i] = (float)fabs(0.01 * rng_normal(key, 4 * i + 2));
        g[i] = (float)rng_normal(key, 4 * i + 3);
        p0[i] = rn(master0[i]);
    }
    Segment segs[2] = {{0, 20, 1}, {24, 13, 0}};
    const char* names[5] = {"normal step", "lr FLT_MAX", "master 3.4e38", "m - g overflows", "norm not finite"};
    for (int c = 0; c < 5; c++) {
        AdamWParams hp = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 0, 0};
        adamw_bias_corrections(&hp, 3);
        float master[n], m[n], v[n], gc[n];
        floatX p[n];
        memcpy(master, master0, sizeof(master)); memcpy(m, m0, sizeof(m)); memcpy(v, v0, sizeof(v)); memcpy(p, p0, sizeof(p));
        memcpy(gc, g, sizeof(gc));
        if (c == 1) hp.lr = FLT_MAX;
        if (c == 2) master[5] = 3.4e38f;
        if (c == 3) { m[30] = 3.4e38f; gc[30] = -3.4e38f; }
        StepScalars sc;
        memset(&sc, 0, sizeof(sc));
        sc.finite = c != 4;
        sc.grad_scale = 1.0f;
        float mb[n], vb[n], wb[n];
        memcpy(mb, m, sizeof(mb)); memcpy(vb, v, sizeof(vb)); memcpy(wb, master, sizeof(wb));
        op_adamw_check(master, m, v, gc, segs, 2, &hp, &sc);
        int want = c == 1 || c == 3 || (c == 2 && sizeof(floatX) == 2);
        printf("    %-16s overflow %d (expected %d)\n", names[c], sc.overflow, want);
        CHECKF(sc.overflow == want, "%s: overflow %d, expected %d", names[c], sc.overflow, want);
        CHECKF(!memcmp(mb, m, sizeof(m)) && !memcmp(vb, v, sizeof(v)) && !memcmp(wb, master, sizeof(master)), "%s: the check wrote", names[c]);
        // the update behind the flags, against op_adamw on a copy
        float m2[n], v2[n], w2[n];
        floatX p2[n];
        memcpy(m2, m, sizeof(m)); memcpy(v2, v, sizeof(v)); memcpy(w2, master, sizeof(master)); memcpy(p2, p, sizeof(p));
        op_adamw(p2, w2, m2, v2, gc, segs, 2, &hp);
        op_adamw_scalars(p, master, m, v, gc, segs, 2, &hp, &sc, NULL);
        int unchanged = !memcmp(mb, m, sizeof(m)) && !memcmp(vb, v, sizeof(v)) && !memcmp(wb, master, sizeof(master)) && !memcmp(p, p0, sizeof(p));
        if (c == 0) CHECKF(!memcmp(w2, master, sizeof(w2)) && !memcmp(m2, m, sizeof(m2)) && !memcmp(v2, v, sizeof(v2)) && !memcmp(p2, p, sizeof(p2)),
                           "normal step: not bitwise op_adamw");
        else CHECKF(unchanged == (sc.overflow || !sc.finite), "%s: the update %s", names[c], unchanged ? "changed nothing" : "was applied");
    }
}

// The check proved instead of run (adamw_bound_finite, used by -offload): over 6000 random updates
// whose state, gradient, learning rate, eps, betas and step span the float range, no update the
// bound proves finite overflows (adamw_check_host finds nothing), and adamw_host_max updates bitwise
// as adamw_host and reports the new state's maxima exactly. Not vacuous: many updates are proved and
// many overflow; a typical training update is proved; unknown maxima and eps = 0 are never proved.
static uint64_t bound_rng_state = 0x9E3779B97F4A7C15ull;
static double bound_u01(void) { // xorshift64*: uniform in [0, 1)
    bound_rng_state ^= bound_rng_state >> 12; bound_rng_state ^= bound_rng_state << 25; bound_rng_state ^= bound_rng_state >> 27;
    return (double)((bound_rng_state * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}
static double bound_pow10(double lo, double hi) { return pow(10.0, lo + (hi - lo) * bound_u01()); }

TEST(op_adamw_bound_sound) {
    enum { N = 16, TRIALS = 6000 };
    int proved = 0, overflowed = 0, unsound = 0, differ = 0;
    const float eps_c[] = {1e-8f, 1e-3f, 1e-30f, 1e-31f, 0.0f}, b2_c[] = {0.95f, 0.999f, 0.9999999f}, b1_c[] = {0.9f, 0.0f};
    const int t_c[] = {1, 10, 1000};
    for (int trial = 0; trial < TRIALS; trial++) {
        double M = bound_pow10(-6, 38.5), V = bound_pow10(-12, 38.5), W = bound_pow10(-3, 38.5), Gs = bound_pow10(-6, 38.5);
        float master[N], m[N], v[N], g[N];
        for (int i = 0; i < N; i++) {
            double s = i == 0 ? 1.0 : bound_u01(), sign = bound_u01() < 0.5 ? -1.0 : 1.0; // element 0 holds the maxima
            m[i] = (float)fmin(sign * s * M, FLT_MAX); v[i] = (float)fmin(bound_u01() * V, FLT_MAX);
            master[i] = (float)fmin(-sign * s * W, FLT_MAX); g[i] = (float)fmin((2 * bound_u01() - 1) * Gs, FLT_MAX);
        }
        v[0] = (float)fmin(V, FLT_MAX);
        if (bound_u01() < 0.5) g[1] = (float)fmin(Gs, FLT_MAX);
        AdamWParams hp = {(float)fmin(bound_pow10(-8, 38.5), FLT_MAX), b1_c[trial % 2], b2_c[(trial / 2) % 3], eps_c[(trial / 6) % 5],
                          bound_u01() < 0.5 ? 0.1f : 0.0f, 1.0f, 0, 0};
        adamw_bias_corrections(&hp, t_c[(trial / 30) % 3]);
        StepScalars sc;
        memset(&sc, 0, sizeof(sc));
        sc.finite = 1;
        for (int i = 0; i < N; i++) sc.sumsq += (double)g[i] * g[i];
        sc.grad_scale = bound_u01() < 0.5 ? 1.0f : (float)fmin(1.0, 1.0 / sqrt(sc.sumsq));
        hp.grad_scale = sc.grad_scale;
        AdamWMax mx = {0.0f, 0.0f, 0.0f, 1};
        for (int i = 0; i < N; i++) { mx.m = fmaxf(mx.m, fabsf(m[i])); mx.v = fmaxf(mx.v, v[i]); mx.w = fmaxf(mx.w, fabsf(master[i])); }
        Segment seg = {0, N, 1};
        int ok = adamw_bound_finite(&hp, &sc, &mx);
        adamw_check_host(master, m, v, g, &seg, 1, &hp, &sc);
        proved += ok; overflowed += sc.overflow; unsound += ok && sc.overflow;
        if (ok && unsound == 1 && sc.overflow)
            printf("    unsound: M %g V %g W %g G %g lr %g eps %g b1 %g b2 %g\n", M, V, W, Gs, (double)hp.lr, (double)hp.eps, (double)hp.beta1, (double)hp.beta2);
        if (!sc.overflow) { // the update with maxima: bitwise adamw_host's, maxima exact
            float w1[N], m1[N], v1[N], w2[N], m2[N], v2[N];
            floatX p1[N], p2[N];
            memcpy(w1, master, sizeof(w1)); memcpy(m1, m, sizeof(m1)); memcpy(v1, v, sizeof(v1));
            memcpy(w2, master, sizeof(w2)); memcpy(m2, m, sizeof(m2)); memcpy(v2, v, sizeof(v2));
            adamw_host(p1, w1, m1, v1, g, &seg, 1, &hp, NULL);
            AdamWMax after = {0.0f, 0.0f, 0.0f, 1};
            adamw_host_max(p2, w2, m2, v2, g, &seg, 1, &hp, &after);
            float em = 0, ev = 0, ew = 0;
            for (int i = 0; i < N; i++) { em = fmaxf(em, fabsf(m1[i])); ev = fmaxf(ev, v1[i]); ew = fmaxf(ew, fabsf(w1[i])); }
            differ += memcmp(w1, w2, sizeof(w1)) || memcmp(m1, m2, sizeof(m1)) || memcmp(v1, v2, sizeof(v1)) || memcmp(p1, p2, sizeof(p1)) ||
                      after.m != em || after.v != ev || after.w != ew || !after.known;
        }
    }
    printf("    %d updates: %d proved finite by the bound, %d overflow (checked), %d both\n", TRIALS, proved, overflowed, unsound);
    CHECKF(unsound == 0, "%d updates proved finite overflowed", unsound);
    CHECKF(differ == 0, "%d updates: adamw_host_max differs from adamw_host or reports other maxima", differ);
    CHECKF(proved >= TRIALS / 10 && overflowed >= TRIALS / 20, "the random cases do not exercise both sides: %d proved, %d overflow", proved, overflowed);
    // a typical training update is proved; unknown maxima, eps 0 and beta2 too close to 1 are not
    AdamWParams hp = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 0, 0};
    adamw_bias_corrections(&hp, 1);
    StepScalars sc;
    memset(&sc, 0, sizeof(sc));
    sc.finite = 1; sc.sumsq = 100.0; sc.grad_scale = 0.1f;
    AdamWMax mx = {1e-2f, 1e-4f, 2.0f, 1};
    CHECK(adamw_bound_finite(&hp, &sc, &mx));
    mx.known = 0;
    CHECK(!adamw_bound_finite(&hp, &sc, &mx));
    mx.known = 1; hp.eps = 0.0f;
    CHECK(!adamw_bound_finite(&hp, &sc, &mx));
    hp.eps = 1e-8f; hp.beta2 = 0.9999999f;
    CHECK(!adamw_bound_finite(&hp, &sc, &mx));
}

// The host AdamW's SIMD paths (adamw.cuh: avx2, avx512, whichever this CPU has) give the scalar
// loop's bits: the update, the update with maxima and the check, over states that hold zeros of both
// signs, subnormals, values near FLT_MAX (g*g, m - g, lr*u overflow), infinite and NaN gradients,
// in segments of odd lengths at odd offsets (heads and tails off the 16-element grid, pieces shorter
// than a vector), with 1, 2 and 3 threads and several hyperparameter sets; the check's flag for one
// bad element at each position of a short segment (head, vector body, tail); and the rounding to
// storage (rn) on special and random bit patterns. A path this CPU lacks is skipped (said so).
static uint32_t simd_rng = 12345u;
static uint32_t simd_u32(void) { simd_rng ^= simd_rng << 13; simd_rng ^= simd_rng >> 17; simd_rng ^= simd_rng << 5; return simd_rng; }
static float simd_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
// One value of a mixed state: mostly ordinary, some zero, subnormal, huge or (grad only) non-finite.
static float simd_value(float scale, int grad) {
    uint32_t r = simd_u32() % 100;
    float sign = simd_u32() & 1 ? -1.0f : 1.0f;
    if (r < 6) return sign * 0.0f;
    if (r < 12) return simd_bits((simd_u32() & 0x007fffffu) | 1u) * sign;       // subnormal
    if (r < 16) return sign * simd_bits(0x7f000000u | (simd_u32() & 0x007fffffu)); // 1.7e38 .. 3.4e38
    if (grad && r < 18) return sign * INFINITY;
    if (grad && r < 20) return simd_bits(0x7fc00000u | (simd_u32() & 0x3fffffu));  // a NaN with a payload
    if (r < 24) return sign * (float)(1e19 * (simd_u32() % 1000 + 1));            // its square overflows
    return sign * scale * (float)((simd_u32() % 100000) / 50000.0);
}

#if defined(ZT_X86) && !defined(ENABLE_FP32)
// rn() through a path's vector store (adamw_store_rn16 / adamw_store_rn8), n a multiple of 16: in
// functions of their own with the path's target attribute, as every intrinsic must be
// (test/check_intrinsics.py): called from a plain function they do not compile for a CPU without it.
ZT_TARGET_AVX512 static void simd_rn_avx512(floatX* got, const float* x, int n) {
    for (int i = 0; i < n; i += 16) adamw_store_rn16(got + i, _mm512_loadu_ps(x + i));
}
ZT_TARGET_AVX2 static void simd_rn_avx2(floatX* got, const float* x, int n) {
    for (int i = 0; i < n; i += 8) adamw_store_rn8(got + i, _mm256_loadu_ps(x + i));
}
#endif

TEST(op_adamw_simd_bitwise) {
    enum { N = 1500 };
    static floatX p0[N], p1[N];
    static float w0[N], m0[N], v0[N], g[N], w1[N], m1[N], v1[N], ws[N], ms[N], vs[N];
    const Segment segs[] = {{3, 1, 1}, {5, 37, 0}, {45, 16, 1}, {64, 611, 1}, {677, 7, 0}, {690, 809, 1}}; // odd offsets and lengths
    const int nseg = sizeof(segs) / sizeof(segs[0]);
    AdamWParams hps[4] = {{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, 0, 0}, {3e38f, 0.9f, 0.999f, 1e-8f, 0.1f, 1.0f, 0, 0},
                          {1e-2f, 0.0f, 0.5f, 1e-30f, 0.0f, 1e-38f, 0, 0}, {0.5f, 0.99f, 0.9999f, 1e-3f, 1.0f, 3.0f, 0, 0}};
    int saved = g_simd, threads = num_threads(), paths = 0, cases = 0, differ = 0;
    int64_t saved_min = g_adamw_parallel_min;
    g_adamw_parallel_min = 0; // these small states cut between threads too
    for (int level = SIMD_AVX2; level < SIMD_COUNT; level++) {
        if (!simd_supported(level)) { printf("    %s: not on this CPU, skipped\n", simd_names[level]); continue; }
        paths++;
        for (int c = 0; c < 24; c++) {
            const AdamWParams* hp0 = &hps[c % 4];
            AdamWParams hp = *hp0;
            adamw_bias_corrections(&hp, 1 + c % 3 * 50);
            int clean = c % 8 >= 6; // a state without non-finite gradients: the flag 0 and maxima known
            for (int i = 0; i < N; i++) {
                w0[i] = simd_value(0.05f, 0); m0[i] = simd_value(1e-2f, 0); v0[i] = fabsf(simd_value(1e-4f, 0)); g[i] = simd_value(1e-3f, !clean);
                if (clean) { w0[i] = fminf(fmaxf(w0[i], -1e3f), 1e3f); m0[i] = fminf(fmaxf(m0[i], -1e3f), 1e3f); v0[i] = fminf(v0[i], 1e3f); g[i] = fminf(fmaxf(g[i], -1.0f), 1.0f); }
                p0[i] = p1[i] = rn(-1.0f);
            }
#ifdef _OPENMP
            omp_set_num_threads(1 + c % 3);
#endif
            for (int mode = ADAMW_UPDATE; mode <= ADAMW_CHECK; mode++, cases++) {
                float acc0[3] = {0.0f, 0.0f, 0.0f}, acc1[3] = {0.0f, 0.0f, 0.0f};
                memcpy(ws, w0, sizeof(ws)); memcpy(ms, m0, sizeof(ms)); memcpy(vs, v0, sizeof(vs));
                memcpy(w1, w0, sizeof(w1)); memcpy(m1, m0, sizeof(m1)); memcpy(v1, v0, sizeof(v1));
                g_simd = SIMD_SCALAR;
                int bad0 = adamw_host_pass(mode, p0, ws, ms, vs, g, segs, nseg, &hp, hp.grad_scale, acc0);
                g_simd = level;
                int bad1 = adamw_host_pass(mode, p1, w1, m1, v1, g, segs, nseg, &hp, hp.grad_scale, acc1);
                int d = bad0 != bad1 || memcmp(acc0, acc1, sizeof(acc0)) || memcmp(ws, w1, sizeof(ws)) || memcmp(ms, m1, sizeof(ms)) ||
                        memcmp(vs, v1, sizeof(vs)) || memcmp(p0, p1, sizeof(p0));
                if (d && differ < 3) {
                    for (int i = 0; i < N; i++)
                        if (memcmp(&ws[i], &w1[i], 4) || memcmp(&ms[i], &m1[i], 4) || memcmp(&vs[i], &v1[i], 4) || memcmp(&p0[i], &p1[i], sizeof(floatX))) {
                            printf("    %s case %d mode %d: element %d: w %a %a m %a %a v %a %a (w0 %a m0 %a v0 %a g %a)\n", simd_names[level], c, mode, i,
                                   (double)ws[i], (double)w1[i], (double)ms[i], (double)m1[i], (double)vs[i], (double)v1[i], (double)w0[i], (double)m0[i],
                                   (double)v0[i], (double)g[i]);
                            break;
                        }
                    printf("    %s case %d mode %d: flag %d %d, maxima %a %a %a vs %a %a %a\n", simd_names[level], c, mode, bad0, bad1, (double)acc0[0],
                           (double)acc0[1], (double)acc0[2], (double)acc1[0], (double)acc1[1], (double)acc1[2]);
                }
                differ += d;
                if (clean && mode == ADAMW_CHECK) CHECKF(hp0 != &hps[0] || bad0 == 0, "case %d: a clean state flagged", c); // (not vacuous)
                if (!clean && mode == ADAMW_CHECK) CHECKF(bad0 == 1, "case %d: non-finite gradients not flagged", c);
            }
#ifdef _OPENMP
            omp_set_num_threads(threads);
#endif
        }
        // the check's flag for one bad gradient at each position of a 37-element segment at offset 5
        AdamWParams hp = hps[0];
        adamw_bias_corrections(&hp, 1);
        for (int i = 0; i < N; i++) { w0[i] = 0.01f; m0[i] = 0.0f; v0[i] = 0.0f; g[i] = 1e-3f; }
        for (int k = 5; k < 42; k++) {
            g[k] = k % 2 ? INFINITY : NAN;
            float acc[3] = {0.0f, 0.0f, 0.0f};
            g_simd = level;
            int bad = adamw_host_pass(ADAMW_CHECK, NULL, w0, m0, v0, g, &segs[1], 1, &hp, 1.0f, acc);
            CHECKF(bad == 1, "%s: a non-finite gradient at element %d not flagged", simd_names[level], k);
            g[k] = 1e-3f;
        }
        float acc[3] = {0.0f, 0.0f, 0.0f};
        CHECKF(adamw_host_pass(ADAMW_CHECK, NULL, w0, m0, v0, g, &segs[1], 1, &hp, 1.0f, acc) == 0, "%s: a finite state flagged", simd_names[level]);
#if defined(ZT_X86) && !defined(ENABLE_FP32)
        // rn() in integer lanes: every special value and 2^16 random bit patterns, against rn()
        enum { R = 1 << 16 };
        static float x[R];
        static floatX want[R], got[R];
        const uint32_t special[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x7f7f7fffu, 0x7f7f8000u, 0x7f7fffffu, 0x7f800000u,
                                    0xff800000u, 0x7fc00000u, 0xffc00001u, 0x7f800001u, 0xff80ffffu, 0x3f808000u, 0x3f818000u, 0x3f80ffffu};
        for (int i = 0; i < R; i++) x[i] = simd_bits(i < 16 ? special[i] : simd_u32());
        for (int i = 0; i < R; i++) want[i] = rn(x[i]);
        if (level == SIMD_AVX512) simd_rn_avx512(got, x, R);
        else simd_rn_avx2(got, x, R);
        CHECKF(!memcmp(want, got, sizeof(want)), "%s: the rounding to BF16 differs from rn()", simd_names[level]);
#endif
    }
    g_simd = saved;
    g_adamw_parallel_min = saved_min;
    printf("    %d SIMD path(s) x %d passes against the scalar loop: %d differ\n", paths, cases / (paths > 0 ? paths : 1), differ);
    CHECKF(differ == 0, "%d passes differ from the scalar loop", differ);
    if (paths == 0) TEST_SKIP("no SIMD path on this CPU");
}

// The CPU GEMM's bits (ops/matmul.cuh, "CPU GEMM core"): every path (scalar, and avx2 / avx512 where
// this CPU has them), at 1..3 threads, with the tests' workspace and with one cut small (row blocks
// of the partial sums), gives each element exactly the plain loop acc = fmaf(A[i,k], B[k,j], acc)
// over k in order, then the epilogue: compared bit for bit on odd shapes (edges of the 8 x 32 tile,
// K cut into blocks of GEMM_KC), through the three stride patterns of op_matmul_forward /
// op_matmul_backward (forward: B = W^T; dinp: B = W; dweight: A = dout^T) and every epilogue kind.
// A GEMM operand: mostly ordinary values of either sign, some zeros and subnormals.
static float gemm_value(float scale) {
    uint32_t r = simd_u32() % 100;
    float sign = simd_u32() & 1 ? -1.0f : 1.0f;
    if (r < 5) return sign * 0.0f;
    if (r < 8) return simd_bits((simd_u32() & 0x007fffffu) | 1u) * sign; // subnormal
    return sign * scale * (float)((simd_u32() % 1000003) / 1000003.0);
}
TEST(op_gemm_simd_bitwise) {
    ops_workspace();
    size_t work_floats = g_work_floats;
    const int64_t shapes[][3] = {{1, 1, 1},    {7, 13, 5},    {9, 33, 17},    {17, 65, 129}, {8, 32, 512},
                                 {23, 41, 513}, {33, 31, 1100}, {3, 200, 1025}, {70, 9, 600}};
    const int nshape = sizeof(shapes) / sizeof(shapes[0]);
    int saved = g_simd, threads = num_threads(), paths = 0, cases = 0, differ = 0;
    size_t most = 0;
    for (int s = 0; s < nshape; s++)
        for (int d = 0; d < 3; d++) {
            size_t n = (size_t)shapes[s][d] * shapes[s][(d + 1) % 3];
            if (n > most) most = n;
        }
    floatX *A = (floatX*)malloc(sizeof(floatX) * most), *B = (floatX*)malloc(sizeof(floatX) * most), *bias = (floatX*)malloc(sizeof(floatX) * most);
    floatX *pre_in = (floatX*)malloc(sizeof(floatX) * most), *want = (floatX*)malloc(sizeof(floatX) * most), *got = (floatX*)malloc(sizeof(floatX) * most);
    floatX *pre_want = (floatX*)malloc(sizeof(floatX) * most), *pre_got = (floatX*)malloc(sizeof(floatX) * most);
    float *start = (float*)malloc(sizeof(float) * most), *fwant = (float*)malloc(sizeof(float) * most), *fgot = (float*)malloc(sizeof(float) * most);
    float* acc = (float*)malloc(sizeof(float) * most);
    for (int level = SIMD_SCALAR; level < SIMD_COUNT; level++) {
        if (!simd_supported(level)) { printf("    %s: not on this CPU, skipped\n", simd_names[level]); continue; }
        paths++;
        for (int s = 0; s < nshape; s++)
            for (int pat = 0; pat < 3; pat++) {
                int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
                int64_t a_rs = K, a_cs = 1, b_rs = 1, b_cs = K;           // forward: A = inp (M, K), B = W^T, W (N, K)
                if (pat == 1) { b_rs = N; b_cs = 1; }                     // dinp: A = dout (M, K), B = W (K, N)
                if (pat == 2) { a_rs = 1; a_cs = M; b_rs = N; b_cs = 1; } // dweight: A = dout^T, dout (K, M); B = inp (K, N)
                for (int64_t i = 0; i < M * K; i++) A[i] = rn(gemm_value(1.0f));
                for (int64_t i = 0; i < K * N; i++) B[i] = rn(gemm_value(1.0f));
                for (int64_t j = 0; j < N; j++) bias[j] = rn(gemm_value(0.5f));
                for (int64_t i = 0; i < M * N; i++) { pre_in[i] = rn(gemm_value(2.0f)); start[i] = gemm_value(1.0f); }
                for (int64_t i = 0; i < M; i++) // the reference: the plain chain
                    for (int64_t j = 0; j < N; j++) {
                        float a = 0.0f;
                        for (int64_t k = 0; k < K; k++) a = fmaf(ld(A[i * a_rs + k * a_cs]), ld(B[k * b_rs + j * b_cs]), a);
                        acc[i * N + j] = a;
                    }
                GemmEpilogue kind = (GemmEpilogue)((s + pat + level) % 4);
                int biased = (kind == EPI_STORE_X || kind == EPI_STORE_X_GELU) && (s + pat) % 2 == 0;
                GemmOut ow = {kind, want, fwant, kind == EPI_STORE_X_DGELU ? pre_in : pre_want, biased ? bias : NULL};
                memcpy(fwant, start, sizeof(float) * M * N);
                for (int64_t i = 0; i < M; i++) gemm_epilogue_row(&ow, i, 0, (int)N, N, acc + i * N);
                for (int small = 0; small < 2; small++, cases++) {
                    GemmOut og = {kind, got, fgot, kind == EPI_STORE_X_DGELU ? pre_in : pre_got, ow.bias};
                    memcpy(fgot, start, sizeof(float) * M * N);
                    memset(got, 0, sizeof(floatX) * M * N);
                    memset(pre_got, 0, sizeof(floatX) * M * N);
                    g_simd = level;
                    // small: room for one k block's panel strip and 16 rows of partial sums (row blocks when K > GEMM_KC)
                    g_work_floats = small ? (size_t)GEMM_KC * GEMM_NR + 16 * (size_t)N : work_floats;
#ifdef _OPENMP
                    omp_set_num_threads(1 + (s + pat + small) % 3);
#endif
                    cpu_gemm(M, N, K, A, a_rs, a_cs, B, b_rs, b_cs, &og);
#ifdef _OPENMP
                    omp_set_num_threads(threads);
#endif
                    g_work_floats = work_floats;
                    int d = kind == EPI_ACCUM_F32 ? memcmp(fgot, fwant, sizeof(float) * M * N) != 0 : memcmp(got, want, sizeof(floatX) * M * N) != 0;
                    if (kind == EPI_STORE_X_GELU) d |= memcmp(pre_got, pre_want, sizeof(floatX) * M * N) != 0;
                    if (d && differ < 3)
                        printf("    %s: M %lld N %lld K %lld, pattern %d, epilogue %d, %s workspace: differs from the plain loop\n", simd_names[level],
                               (long long)M, (long long)N, (long long)K, pat, (int)kind, small ? "small" : "full");
                    differ += d;
                }
            }
    }
    g_simd = saved;
    free(A); free(B); free(bias); free(pre_in); free(want); free(got); free(pre_want); free(pre_got);
    free(start); free(fwant); free(fgot); free(acc);
    printf("    %d path(s) x %d GEMMs against the plain fmaf loop: %d differ\n", paths, cases / (paths > 0 ? paths : 1), differ);
    CHECKF(differ == 0, "%d GEMMs differ from the plain loop", differ);
    CHECKF(paths >= 2 || !simd_supported(SIMD_AVX2), "no SIMD path ran");
}

// Initialisation runs on every OpenMP thread and gives the same bits for any thread count: the
// whole logical vector of a small model filled with 1 and with 2 threads (and from two halves),
// compared bitwise; the time per parameter is printed.
TEST(init_parallel_same_bits) {
    GPTConfig c = gpt2_config(2, 128, 4, 1000, 1024, 256);
    ModelDesc d;
    model_describe(&d, &c);
    int64_t n = d.num_params;
    float* one = (float*)malloc(sizeof(float) * n);
    float* two = (float*)malloc(sizeof(float) * n);
    InitCtx ic = {&d, 1337};
#ifdef _OPENMP
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
#endif
    double t0 = test_now_s();
    init_fill(&ic, one, 0, n);
    double t1 = test_now_s();
#ifdef _OPENMP
    omp_set_num_threads(2);
#endif
    init_fill(&ic, two, 0, n / 3);                 // and in two pieces that cut a tensor in the middle
    init_fill(&ic, two + n / 3, n / 3, n - n / 3);
    double t2 = test_now_s();
#ifdef _OPENMP
    omp_set_num_threads(saved);
#endif
    int nonzero = 0;
    for (int64_t i = 0; i < n; i++) nonzero += one[i] != 0.0f && one[i] != 1.0f;
    printf("    %lld parameters: 1 thread %.1f ns each, 2 threads %.1f ns each; %d random values\n", (long long)n,
           1e9 * (t1 - t0) / n, 1e9 * (t2 - t1) / n, nonzero);
    CHECK(!memcmp(one, two, sizeof(float) * n));
    CHECK(nonzero > n / 2);
    free(one);
    free(two);
}
