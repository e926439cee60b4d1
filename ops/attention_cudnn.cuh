// ops/attention_cudnn.cuh — causal attention through cuDNN 9's fused SDPA ("flash") graphs, -attn cudnn.
//
//   forward:  qkv (B, T, QKV) -> out (B, T, NH*HS) [BF16, =], lse (B, NH, T) [FP32, =]
//   backward: dout (B, T, NH*HS), qkv, out, lse -> dqkv (B, T, QKV) [BF16, =]
// The same op as ops/attention.cuh (read its header for the layout and the math), computed by
// cuDNN's SDPA forward and backward through cudnn-frontend's graph API. Every tensor is described
// in place with strides (dims B, H, T, HS): Q at qkv + 0, K at qkv + NH*HS, V at qkv + (NH+NKV)*HS,
// each with row stride QKV = (NH + 2 NKV) HS; O and dO with row stride NH*HS; dQ/dK/dV in dqkv like
// Q/K/V. Grouped-query attention is cuDNN's own (K and V with NKV heads). Causal: the diagonal band
// with right bound 0, aligned top-left (key j <= query i). Scale 1/sqrt(HS).
// Stats: cuDNN's softmax stats are the log-sum-exp of the scaled scores in natural log
// (max + ln(sum exp)), the definition of our lse (ops/attention.cuh: lse = m + log(l)), so the
// buffer keeps its meaning; within one path forward and backward use cuDNN's own numbers, and a
// backward that falls back to our kernels (-attn auto, a shape cuDNN refuses) reads a consistent lse.
// Backward: deterministic algorithm (SDPA_backward_attributes::set_deterministic_algorithm, as
// DESIGN.md's "no order-dependent atomics"); on Hopper that takes cuDNN's dP workspace, about
// 2 B NH T^2 bytes (attention_cudnn_workspace_bytes: the planner's estimate).
//
// Graphs: built once per shape (B, T, NH, NKV, HS, pass) and kept (ATT_CUDNN_GRAPHS of them);
// execution binds the pointers by uid. Workspace: the ops' g_work (its users never overlap on the
// one stream); cuDNN's reported size is checked against it when a graph is built.
// Loading: cudnn-frontend's NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING: every cuDNN call goes through
// dlsym on cudnn_frontend::cudnn_dlhandle, which attention_cudnn_load sets from dlopen("libcudnn.so.9")
// on first use; the binary does not link cuDNN, so it starts where cuDNN is absent. Its version
// (cudnnGetVersion through the loaded library) must be at least ATT_CUDNN_MIN_VERSION.
// Refused (attention_cudnn_refusal): a segment table (-doc-attention 1: cuDNN's ragged/padding
// masks are not mapped to it yet), the FP32 build (cuDNN's SDPA takes BF16/FP16), head sizes not a
// multiple of 8 or above 256, and whatever cuDNN's own support check refuses on this GPU and version.
//
// Built with make USE_CUDNN=1 (ZT_CUDNN); cudnn-frontend's headers from the PyPI package
// nvidia-cudnn-frontend (pinned in the Makefile, CUDNN_FRONTEND_PIN). Limits: builds only — never
// run on a GPU yet (docs/cudnn.md).
//
// defines: attention_cudnn_forward, attention_cudnn_backward, attention_cudnn_load,
//          attention_cudnn_refusal, ATT_CUDNN_MIN_VERSION
//
// May call: device.cuh, cudnn-frontend (and through it libcudnn.so.9, dlopen'd).
#ifndef ZT_OPS_ATTENTION_CUDNN_CUH
#define ZT_OPS_ATTENTION_CUDNN_CUH
#if defined(__CUDACC__) && defined(ZT_CUDNN) && !defined(ENABLE_FP32)

#include <dlfcn.h>
#include <cudnn_frontend.h> // cudnn-frontend (header-only C++), NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING set by the Makefile
#include "../device.cuh"    // defines: floatX, g_stream, g_work, g_work_floats, die

#ifndef NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#error "ops/attention_cudnn.cuh: build with -DNV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING (make USE_CUDNN=1): cuDNN is loaded at run time"
#endif

#define ATT_CUDNN_MIN_VERSION 90000 // cudnnGetVersion(): 9.0.0, the first cuDNN 9 (cuDNN's checks refuse what an older 9.x cannot run)
#define ATT_CUDNN_GRAPHS 16         // graphs kept (shapes x passes); a run uses 2 (train shape) to 4 (eval, sampling)

namespace cudnn_frontend { void* cudnn_dlhandle = nullptr; } // the frontend's dlsym handle (declared extern in its shim)
namespace fe = cudnn_frontend;

static cudnnHandle_t g_cudnn = nullptr;

// Once per process: dlopen libcudnn.so.9, check its version, create the handle. 0 on success;
// else why (the library's name and dlerror, or its version) in why.
static int attention_cudnn_load(char* why, size_t cap) {
    static int state = 0; // 0 not tried, 1 loaded, -1 failed
    static char reason[512] = "";
    if (state == 0) {
        state = -1;
        void* h = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            const char* e = dlerror();
            snprintf(reason, sizeof(reason), "libcudnn.so.9 could not be loaded (%s)", e ? e : "dlopen failed");
        } else {
            fe::cudnn_dlhandle = h;
            size_t (*get_version)(void) = (size_t(*)(void))dlsym(h, "cudnnGetVersion");
            size_t v = get_version ? get_version() : 0;
            if (v < ATT_CUDNN_MIN_VERSION) {
                snprintf(reason, sizeof(reason), "libcudnn.so.9 is version %zu.%zu.%zu, below the %d.%d.0 this build needs", v / 10000,
                         v / 100 % 100, v % 100, ATT_CUDNN_MIN_VERSION / 10000, ATT_CUDNN_MIN_VERSION / 100 % 100);
            } else {
                try {
                    cudnnStatus_t st = fe::detail::create_handle(&g_cudnn);
                    if (st != CUDNN_STATUS_SUCCESS)
                        snprintf(reason, sizeof(reason), "cudnnCreate failed: %s (status %d)", fe::detail::get_error_string(st), (int)st);
                    else state = 1;
                } catch (const std::exception& ex) {
                    snprintf(reason, sizeof(reason), "cudnnCreate: %s", ex.what());
                }
            }
        }
    }
    if (state != 1 && why) snprintf(why, cap, "%s", reason);
    return state == 1 ? 0 : -1;
}

// The library's version as cudnnGetVersion gives it (0 when not loaded), for the start-up line.
static size_t attention_cudnn_version(void) {
    if (!fe::cudnn_dlhandle) return 0;
    size_t (*get_version)(void) = (size_t(*)(void))dlsym(fe::cudnn_dlhandle, "cudnnGetVersion");
    return get_version ? get_version() : 0;
}

// The uids that bind a graph's tensors to pointers at execution.
enum { ATT_UID_Q = 1, ATT_UID_K, ATT_UID_V, ATT_UID_O, ATT_UID_STATS, ATT_UID_DO, ATT_UID_DQ, ATT_UID_DK, ATT_UID_DV };

typedef struct {
    int B, T, NH, NKV, HS, backward; // the key
    int ok;                          // 1 built; 0 cuDNN refused the shape (why)
    int64_t workspace;               // bytes cuDNN reported
    std::shared_ptr<fe::graph::Graph> graph;
    char why[256];
} AttCudnnGraph;
static AttCudnnGraph g_cudnn_graphs[ATT_CUDNN_GRAPHS];
static int g_cudnn_graphs_n = 0;

// A (B, H, T, HS) view of heads stored in rows of `row` elements (a head's HS channels contiguous).
static std::shared_ptr<fe::graph::Tensor_attributes> att_cudnn_tensor(fe::graph::Graph& g, const char* name, int64_t uid, int B, int H,
                                                                      int T, int HS, int64_t row) {
    return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim({B, H, T, HS}).set_stride({(int64_t)T * row, HS, row, 1}));
}

// Build (or find) the graph of one shape and pass. Returns the entry; entry->ok == 0 says why not.
static AttCudnnGraph* att_cudnn_graph(int B, int T, int NH, int NKV, int HS, int backward) {
    for (int i = 0; i < g_cudnn_graphs_n; i++) {
        AttCudnnGraph* e = &g_cudnn_graphs[i];
        if (e->B == B && e->T == T && e->NH == NH && e->NKV == NKV && e->HS == HS && e->backward == backward) return e;
    }
    if (g_cudnn_graphs_n == ATT_CUDNN_GRAPHS)
        die(1, "attention (cuDNN): more than %d shapes (internal error). HINT: -attn own", ATT_CUDNN_GRAPHS);
    AttCudnnGraph* e = &g_cudnn_graphs[g_cudnn_graphs_n++];
    e->B = B; e->T = T; e->NH = NH; e->NKV = NKV; e->HS = HS; e->backward = backward;
    e->ok = 0;
    e->workspace = 0;
    e->why[0] = 0;
    int64_t QKV = (int64_t)(NH + 2 * NKV) * HS, ATT = (int64_t)NH * HS;
    try {
        auto g = std::make_shared<fe::graph::Graph>();
        g->set_io_data_type(fe::DataType_t::BFLOAT16).set_intermediate_data_type(fe::DataType_t::FLOAT).set_compute_data_type(fe::DataType_t::FLOAT);
        auto Q = att_cudnn_tensor(*g, "Q", ATT_UID_Q, B, NH, T, HS, QKV);
        auto K = att_cudnn_tensor(*g, "K", ATT_UID_K, B, NKV, T, HS, QKV);
        auto V = att_cudnn_tensor(*g, "V", ATT_UID_V, B, NKV, T, HS, QKV);
        float scale = 1.0f / sqrtf((float)HS);
        std::vector<int64_t> sdim = {B, NH, T, 1}, sstride = {(int64_t)NH * T, T, 1, 1}; // lse (B, NH, T)
        if (!backward) {
            auto opt = fe::graph::SDPA_attributes().set_name("attention").set_generate_stats(true).set_causal_mask(true).set_attn_scale(scale);
            auto outs = g->sdpa(Q, K, V, opt);
            outs[0]->set_output(true).set_uid(ATT_UID_O).set_dim({B, NH, T, HS}).set_stride({(int64_t)T * ATT, HS, ATT, 1});
            outs[1]->set_output(true).set_uid(ATT_UID_STATS).set_data_type(fe::DataType_t::FLOAT).set_dim(sdim).set_stride(sstride);
        } else {
            auto O = att_cudnn_tensor(*g, "O", ATT_UID_O, B, NH, T, HS, ATT);
            auto dO = att_cudnn_tensor(*g, "dO", ATT_UID_DO, B, NH, T, HS, ATT);
            auto S = g->tensor(fe::graph::Tensor_attributes().set_name("Stats").set_uid(ATT_UID_STATS).set_dim(sdim).set_stride(sstride)
                                   .set_data_type(fe::DataType_t::FLOAT));
            auto opt = fe::graph::SDPA_backward_attributes().set_name("attention_backward").set_causal_mask(true).set_attn_scale(scale)
                           .set_deterministic_algorithm(true);
            auto grads = g->sdpa_backward(Q, K, V, O, dO, S, opt);
            grads[0]->set_output(true).set_uid(ATT_UID_DQ).set_dim({B, NH, T, HS}).set_stride({(int64_t)T * QKV, HS, QKV, 1});
            grads[1]->set_output(true).set_uid(ATT_UID_DK).set_dim({B, NKV, T, HS}).set_stride({(int64_t)T * QKV, HS, QKV, 1});
            grads[2]->set_output(true).set_uid(ATT_UID_DV).set_dim({B, NKV, T, HS}).set_stride({(int64_t)T * QKV, HS, QKV, 1});
        }
        // validate (the frontend's support checks for this GPU and cuDNN version), the backend's
        // operation graph, heuristics' plans (mode A), their support, the chosen plan built, its workspace
        int steps = 0;
        for (; steps < 6; steps++) {
            fe::error_t st = steps == 0 ? g->validate()
                           : steps == 1 ? g->build_operation_graph(g_cudnn)
                           : steps == 2 ? g->create_execution_plans({fe::HeurMode_t::A})
                           : steps == 3 ? g->check_support(g_cudnn)
                           : steps == 4 ? g->build_plans(g_cudnn)
                                        : g->get_workspace_size(e->workspace);
            if (!st.is_good()) {
                snprintf(e->why, sizeof(e->why), "%s", st.get_message().c_str());
                return e;
            }
        }
        e->graph = g;
        e->ok = 1;
    } catch (const std::exception& ex) {
        snprintf(e->why, sizeof(e->why), "%s", ex.what());
    }
    if (e->ok && (size_t)e->workspace > g_work_floats * sizeof(float)) {
        snprintf(e->why, sizeof(e->why), "its workspace, %.1f MiB, is above the ops' workspace of %.1f MiB that the planner sized (an estimate: "
                 "please report)", e->workspace / 1048576.0, g_work_floats * sizeof(float) / 1048576.0);
        e->ok = 0;
        e->graph.reset();
    }
    return e;
}

// Whether a shape may go to cuDNN at all (before asking cuDNN): NULL, or why not.
static const char* attention_cudnn_refusal(const int* seg, int HS) {
    if (seg) return "a segment table (-doc-attention 1): cuDNN's ragged/padding masks are not mapped to it yet";
    if (HS % 8 != 0 || HS > 256) return "a head size that is not a multiple of 8 up to 256";
    return NULL;
}

// Run one graph; 0 on success, -1 when cuDNN refused the shape (why filled).
static int att_cudnn_run(AttCudnnGraph* e, std::unordered_map<int64_t, void*>& pack, char* why, size_t cap) {
    if (!e->ok) { snprintf(why, cap, "%s", e->why); return -1; }
    cudnnStatus_t s = fe::detail::set_stream(g_cudnn, g_stream);
    if (s != CUDNN_STATUS_SUCCESS) die(1, "attention (cuDNN): cudnnSetStream failed (status %d)", (int)s);
    fe::error_t st = e->graph->execute(g_cudnn, pack, g_work);
    if (!st.is_good())
        die(1, "attention (cuDNN): executing the %s graph (B %d, T %d, NH %d, NKV %d, HS %d) failed: %s. HINT: -attn own",
            e->backward ? "backward" : "forward", e->B, e->T, e->NH, e->NKV, e->HS, st.get_message().c_str());
    return 0;
}

// out (B, T, NH*HS) [=], lse (B, NH, T) [=] from qkv. 0: done; -1: cuDNN refused this shape (why).
static int attention_cudnn_forward(floatX* out, float* lse, const floatX* qkv, int B, int T, int NH, int NKV, int HS, char* why, size_t cap) {
    AttCudnnGraph* e = att_cudnn_graph(B, T, NH, NKV, HS, 0);
    floatX* q = (floatX*)qkv;
    std::unordered_map<int64_t, void*> pack = {{ATT_UID_Q, q}, {ATT_UID_K, q + (int64_t)NH * HS}, {ATT_UID_V, q + (int64_t)(NH + NKV) * HS},
                                               {ATT_UID_O, out}, {ATT_UID_STATS, lse}};
    return att_cudnn_run(e, pack, why, cap);
}

// dqkv (B, T, QKV) [=] from dout, qkv, out and the forward's lse. 0: done; -1: refused (why).
static int attention_cudnn_backward(floatX* dqkv, const floatX* dout, const floatX* qkv, const floatX* out, const float* lse, int B, int T,
                                    int NH, int NKV, int HS, char* why, size_t cap) {
    AttCudnnGraph* e = att_cudnn_graph(B, T, NH, NKV, HS, 1);
    floatX* q = (floatX*)qkv;
    std::unordered_map<int64_t, void*> pack = {
        {ATT_UID_Q, q}, {ATT_UID_K, q + (int64_t)NH * HS}, {ATT_UID_V, q + (int64_t)(NH + NKV) * HS}, {ATT_UID_O, (void*)out},
        {ATT_UID_DO, (void*)dout}, {ATT_UID_STATS, (void*)lse}, {ATT_UID_DQ, dqkv}, {ATT_UID_DK, dqkv + (int64_t)NH * HS},
        {ATT_UID_DV, dqkv + (int64_t)(NH + NKV) * HS}};
    return att_cudnn_run(e, pack, why, cap);
}

#endif // __CUDACC__ && ZT_CUDNN && !ENABLE_FP32
#endif // ZT_OPS_ATTENTION_CUDNN_CUH
