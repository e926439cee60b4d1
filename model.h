// model.h — the model's description: GPTConfig, the tensor table (GPT2_TENSORS), each tensor's
// logical offset (llm.c's file order) and the block layout for R ranks. Nothing here allocates or
// computes; train_gpt.cu (section 1) and checkpoint.h both build on it.
//
// May call: zero.h (the block layout).
#ifndef ZT_MODEL_H
#define ZT_MODEL_H
#include "zero.h" // defines: BlockLayout, layout_init, layout_add_tensor, layout_finish

typedef struct {
    int L, C, NH, V, Vp, maxT; // layers, channels, heads, vocabulary (padded: Vp), max sequence
} GPTConfig;

typedef enum { INIT_NORMAL, INIT_RESID, INIT_ONE, INIT_ZERO } InitKind;

// X(name, io (1: io block, 0: one per layer), rows, cols, decay, init)
// INIT_NORMAL: N(0, 0.02); INIT_RESID: N(0, 0.02/sqrt(2L)) for the projections into the residual
// stream (GPT-2's scaled init); INIT_ONE / INIT_ZERO: layernorm gains / biases.
// 3C and 4C are computed in 64 bits: a model file's header is data, and 3 * C overflows int.
#define GPT2_TENSORS(X)                                                  \
    X(wte,      1, c->Vp,             c->C,              1, INIT_NORMAL) \
    X(wpe,      1, c->maxT,           c->C,              1, INIT_NORMAL) \
    X(ln1w,     0, 1,                 c->C,              0, INIT_ONE)    \
    X(ln1b,     0, 1,                 c->C,              0, INIT_ZERO)   \
    X(qkvw,     0, 3 * (int64_t)c->C, c->C,              1, INIT_NORMAL) \
    X(qkvb,     0, 1,                 3 * (int64_t)c->C, 0, INIT_ZERO)   \
    X(attprojw, 0, c->C,              c->C,              1, INIT_RESID)  \
    X(attprojb, 0, 1,                 c->C,              0, INIT_ZERO)   \
    X(ln2w,     0, 1,                 c->C,              0, INIT_ONE)    \
    X(ln2b,     0, 1,                 c->C,              0, INIT_ZERO)   \
    X(fcw,      0, 4 * (int64_t)c->C, c->C,              1, INIT_NORMAL) \
    X(fcb,      0, 1,                 4 * (int64_t)c->C, 0, INIT_ZERO)   \
    X(fcprojw,  0, c->C,              4 * (int64_t)c->C, 1, INIT_RESID)  \
    X(fcprojb,  0, 1,                 c->C,              0, INIT_ZERO)   \
    X(lnfw,     1, 1,                 c->C,              0, INIT_ONE)    \
    X(lnfb,     1, 1,                 c->C,              0, INIT_ZERO)

enum {
#define X(name, io, rows, cols, decay, init) T_##name,
    GPT2_TENSORS(X)
#undef X
    NUM_TENSORS
};

typedef struct {
    const char* name;
    int io;          // lives in the io block (1) or in every layer block (0)
    int64_t n;       // elements (per layer for layer tensors)
    int64_t logical; // offset of its first element in the logical vector (llm.c's file order)
    int decay;
    InitKind init;
    int64_t off;     // offset inside its block (filled from the layout)
} TensorInfo;

typedef struct {
    GPTConfig cfg;
    TensorInfo t[NUM_TENSORS];
    int64_t num_params;   // logical elements (llm.c's count, padded vocabulary rows included)
    int64_t num_real;     // the same without the padded vocabulary rows
} ModelDesc;

static void model_describe(ModelDesc* d, const GPTConfig* c) {
    memset(d, 0, sizeof(*d));
    d->cfg = *c;
    int64_t logical = 0;
#define X(tname, tio, rows, cols, tdecay, tinit)                                    \
    {                                                                               \
        TensorInfo* t = &d->t[T_##tname];                                           \
        t->name = #tname; t->io = tio; t->n = (int64_t)(rows) * (int64_t)(cols);     \
        t->logical = logical; t->decay = tdecay; t->init = tinit;                   \
        logical += t->n * (tio ? 1 : c->L);                                         \
    }
    GPT2_TENSORS(X)
#undef X
    d->num_params = logical;
    d->num_real = logical - (int64_t)(c->Vp - c->V) * c->C;
}

// Block layout for R ranks: block 0 = io tensors, block 1 + l = layer l's tensors, in table order.
static void model_layout(ModelDesc* d, BlockLayout* lay, int R, int r) {
    const GPTConfig* c = &d->cfg;
    layout_init(lay, 1 + c->L, R, r);
    for (int b = 0; b <= c->L; b++)
        for (int k = 0; k < NUM_TENSORS; k++) {
            TensorInfo* t = &d->t[k];
            if (t->io != (b == 0)) continue;
            int layer = b - 1;
            layout_add_tensor(lay, b, k, t->io ? -1 : layer, t->n, t->logical + (t->io ? 0 : layer * t->n), t->decay);
        }
    layout_finish(lay);
    for (int b = 0; b < 2 && b <= c->L; b++) // offsets inside a block are the same for every layer
        for (int k = 0; k < lay->ntensors[b]; k++) d->t[lay->tensors[b][k].tensor].off = lay->tensors[b][k].off;
}

#endif // ZT_MODEL_H
