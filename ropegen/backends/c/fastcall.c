/* The per-call part of a bound C kernel call, in C: backends/c/fastcall.py builds this file
 * (against the running Python and NumPy) and backends/c/call.py's BoundCall hands it what it bound.
 *
 * At decode sizes the Python side of a call was most of it: llama3 q + k at T = 1 took ~4.4 us
 * from Python for a 0.6 us kernel (one thread), spent reading addresses, making ctypes objects and
 * converting 15 arguments. This module does the same per-call work over NumPy's own fields: each
 * input is checked against the bound signature (exact ndarray type, dtype, shape, strides, alignment
 * and, where the bound outputs are the caller's, that it does not overlap them); new outputs are
 * allocated; and the kernel is called through its words entry point (every parameter one int64 word,
 * templates/c/_host.inc.j2), so one C prototype serves every operator.
 *
 * Where the caller gives the outputs (out=), a call may pass new ones after the inputs, each checked
 * as an input is and for writeability, and none sharing a byte with another output or any input.
 *
 * A call this does not take returns None (a differing array, an overlap, a scalar): the caller then
 * makes the same call in Python, which says why or runs it. A nonzero kernel status is handed to the
 * bound `on_status(code, arrays)`, which raises the operator's error.
 *
 * Over 400 lines because half of it reads and checks the constructor's arguments (fastcall.py's
 * call_for), so that each call is plain C loops over what was read once.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>
#include <stdint.h>
#include <stddef.h>
#include <string.h>

typedef int (*rg_words_fn)(const int64_t *);

/* a dtype's item size: a function since NumPy 2's ABI, a field before */
#if NPY_ABI_VERSION >= 0x02000000
#define RG_ELSIZE(d) PyDataType_ELSIZE(d)
#else
#define RG_ELSIZE(d) ((npy_intp)(d)->elsize)
#endif

/* Words a kernel may take (a parameter each) and inputs it may have: far above any operator's, so that
 * a call's words and addresses live on the stack. */
#define RG_MAX_WORDS 1024
#define RG_MAX_INPUTS 64

typedef struct {
    PyArray_Descr *descr;        /* owned */
    int nd;
    npy_intp dims[NPY_MAXDIMS], strides[NPY_MAXDIMS];
    npy_intp mask;               /* address bits that must be zero (alignment) */
    Py_ssize_t nptr, ptr[4];     /* the words its address goes to */
    npy_intp lo, hi;             /* its byte span from its address; hi < lo: none checked */
} rg_in;

typedef struct {
    PyArray_Descr *descr;        /* owned */
    int nd;
    npy_intp dims[NPY_MAXDIMS];
    PyObject *alloc, *shape;     /* owned: a Python allocator and its shape argument, or NULL: on a line here */
    npy_intp nbytes;             /* its size, for the buffer allocated here */
    Py_ssize_t nptr, ptr[4];
} rg_out;

typedef struct {               /* in place: an output written over input src */
    Py_ssize_t src, nptr, ptr[4];
} rg_src;

typedef struct {               /* in place: output o's bytes from its address */
    Py_ssize_t o;
    npy_intp lo, hi;
} rg_span;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;   /* call_vectorcall: calls skip building an argument tuple */
    rg_words_fn fn;
    Py_ssize_t nwords, nin, nout, nspans;
    int64_t words[RG_MAX_WORDS];  /* the bound words: sizes, strides, threads, fixed addresses */
    rg_in *in;
    rg_out *out;                 /* outputs allocated per call (nout of them) */
    npy_intp (*spans)[2];        /* the fixed outputs' byte spans */
    Py_ssize_t nsrc, nospans;    /* in place: each output's source, and the outputs' spans */
    rg_src *srcs;
    rg_span *ospans;
    Py_ssize_t ngiven;           /* out=: outputs a call may pass after its inputs, checked as these */
    rg_in *given;
    PyObject *fixed;             /* the value returned when the outputs are the caller's, else NULL */
    int single;
    int state;                   /* 0: new, 1: being initialized (or that failed), 2: ready */
    PyObject *on_status;
} rg_call;

static void call_dealloc(rg_call *self)
{
    for (Py_ssize_t i = 0; i < self->nin; ++i) Py_XDECREF(self->in[i].descr);
    for (Py_ssize_t o = 0; o < self->ngiven; ++o) Py_XDECREF(self->given[o].descr);
    PyMem_Free(self->given);
    for (Py_ssize_t o = 0; o < self->nout; ++o) {
        Py_XDECREF(self->out[o].descr);
        Py_XDECREF(self->out[o].alloc);
        Py_XDECREF(self->out[o].shape);
    }
    PyMem_Free(self->in);
    PyMem_Free(self->out);
    PyMem_Free(self->spans);
    PyMem_Free(self->srcs);
    PyMem_Free(self->ospans);
    Py_XDECREF(self->fixed);
    Py_XDECREF(self->on_status);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* a sequence of ints into out[0..n), n <= cap; -1 with an exception */
static int read_ints(PyObject *seq, npy_intp *out, Py_ssize_t cap, Py_ssize_t *n, const char *what)
{
    PyObject *fast = PySequence_Fast(seq, what);
    if (!fast) return -1;
    *n = PySequence_Fast_GET_SIZE(fast);
    if (*n > cap) {
        PyErr_Format(PyExc_ValueError, "%s: more than %zd entries", what, cap);
        Py_DECREF(fast);
        return -1;
    }
    for (Py_ssize_t i = 0; i < *n; ++i) {
        out[i] = (npy_intp)PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(fast, i));
        if (out[i] == -1 && PyErr_Occurred()) { Py_DECREF(fast); return -1; }
    }
    Py_DECREF(fast);
    return 0;
}

/* up to 4 word indices, each below nwords, into ptr[0..*n); -1 with an exception */
static int read_ptrs(PyObject *seq, Py_ssize_t nwords, Py_ssize_t *ptr, Py_ssize_t *n)
{
    npy_intp tmp[4];
    if (read_ints(seq, tmp, 4, n, "pointer words") < 0) return -1;
    for (Py_ssize_t j = 0; j < *n; ++j) {
        if (tmp[j] < 0 || tmp[j] >= nwords) {
            PyErr_SetString(PyExc_ValueError, "pointer word out of range");
            return -1;
        }
        ptr[j] = tmp[j];
    }
    return 0;
}

static int read_dtype(PyObject *obj, PyArray_Descr **descr)
{
    if (!PyArray_DescrCheck(obj)) {
        PyErr_SetString(PyExc_TypeError, "expected a numpy dtype");
        return -1;
    }
    Py_INCREF(obj);
    *descr = (PyArray_Descr *)obj;
    return 0;
}

/* arrays described as (dtype, shape, strides, mask, pointer words, lo, hi) into a[0..*count); each
 * descr is owned once counted; -1 with an exception */
static int read_arrays(PyObject *seq, const char *what, Py_ssize_t nwords, rg_in **into, Py_ssize_t *count)
{
    PyObject *fast = PySequence_Fast(seq, what);
    if (!fast) return -1;
    const Py_ssize_t n_all = PySequence_Fast_GET_SIZE(fast);
    if (n_all > RG_MAX_INPUTS) { Py_DECREF(fast); PyErr_Format(PyExc_ValueError, "too many %s", what); return -1; }
    rg_in *arr = *into = PyMem_Calloc(n_all ? n_all : 1, sizeof(rg_in));
    if (!arr) { Py_DECREF(fast); PyErr_NoMemory(); return -1; }
    for (Py_ssize_t i = 0; i < n_all; ++i) {
        rg_in *a = &arr[i];
        PyObject *dt, *shape, *strides, *ptrs;
        Py_ssize_t mask, lo, hi, n, nd2;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fast, i), "OOOnOnn", &dt, &shape, &strides, &mask, &ptrs,
                              &lo, &hi)
            || read_dtype(dt, &a->descr) < 0) { Py_DECREF(fast); return -1; }
        *count = i + 1;   /* the descr is owned from here (dealloc) */
        if (read_ints(shape, a->dims, NPY_MAXDIMS, &n, "shape") < 0
            || read_ints(strides, a->strides, NPY_MAXDIMS, &nd2, "strides") < 0
            || read_ptrs(ptrs, nwords, a->ptr, &a->nptr) < 0) { Py_DECREF(fast); return -1; }
        if (nd2 != n) { Py_DECREF(fast); PyErr_SetString(PyExc_ValueError, "shape and strides differ in rank"); return -1; }
        a->nd = (int)n;
        a->mask = mask;
        a->lo = lo;
        a->hi = hi;
    }
    Py_DECREF(fast);
    return 0;
}

/* Call(fn, words, inputs, outputs, fixed, spans, single, on_status, sources, out_spans, given):
 *   inputs:    (dtype, shape, strides, mask, pointer words, lo, hi) each
 *   outputs:   (dtype, shape, allocator or None, pointer words) each, when allocated per call
 *   spans:     (lo, hi) absolute byte spans of the fixed outputs (fixed: what is returned)
 *   sources:   in place: (source input, pointer words) per output
 *   out_spans: in place: (output, lo, hi), its bytes from its address
 *   given:     out=: the outputs a call may pass after its inputs, described as inputs are (with
 *              fixed None, a call must pass them) */
static int call_init(rg_call *self, PyObject *args, PyObject *kwds)
{
    unsigned long long fn;
    PyObject *words, *inputs, *outputs, *fixed, *spans, *on_status, *sources, *out_spans, *given;
    int single;
    npy_intp tmp[RG_MAX_WORDS];
    Py_ssize_t n;
    if (self->state) {   /* once: calls on other threads read the fields without a lock */
        PyErr_SetString(PyExc_TypeError, "a Call is initialized once");
        return -1;
    }
    self->state = 1;
    if (kwds && PyDict_GET_SIZE(kwds)) {
        PyErr_SetString(PyExc_TypeError, "Call takes positional arguments only");
        return -1;
    }
    if (!PyArg_ParseTuple(args, "KOOOOOpOOOO", &fn, &words, &inputs, &outputs, &fixed, &spans, &single,
                          &on_status, &sources, &out_spans, &given))
        return -1;
    if (!fn) {
        PyErr_SetString(PyExc_ValueError, "no function address");
        return -1;
    }
    self->fn = (rg_words_fn)(uintptr_t)fn;
    if (read_ints(words, tmp, RG_MAX_WORDS, &self->nwords, "words") < 0) return -1;
    for (Py_ssize_t w = 0; w < self->nwords; ++w) self->words[w] = (int64_t)tmp[w];
    if (!PyCallable_Check(on_status)) {
        PyErr_SetString(PyExc_TypeError, "on_status must be callable");
        return -1;
    }
    Py_INCREF(on_status);
    self->on_status = on_status;
    if (fixed != Py_None) {
        Py_INCREF(fixed);
        self->fixed = fixed;
    }
    self->single = single;

    if (read_arrays(inputs, "inputs", self->nwords, &self->in, &self->nin) < 0
        || read_arrays(given, "given outputs", self->nwords, &self->given, &self->ngiven) < 0)
        return -1;
    if (self->nin + self->ngiven > RG_MAX_INPUTS) {
        PyErr_SetString(PyExc_ValueError, "too many inputs and outputs");
        return -1;
    }

    PyObject *outs = PySequence_Fast(outputs, "outputs");
    if (!outs) return -1;
    Py_ssize_t nout = PySequence_Fast_GET_SIZE(outs);
    self->out = PyMem_Calloc(nout ? nout : 1, sizeof(rg_out));
    if (!self->out) { Py_DECREF(outs); PyErr_NoMemory(); return -1; }
    for (Py_ssize_t o = 0; o < nout; ++o) {
        rg_out *y = &self->out[o];
        PyObject *dt, *shape, *alloc, *ptrs;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(outs, o), "OOOO", &dt, &shape, &alloc, &ptrs)
            || read_dtype(dt, &y->descr) < 0) { Py_DECREF(outs); return -1; }
        self->nout = o + 1;
        if (read_ints(shape, y->dims, NPY_MAXDIMS, &n, "shape") < 0
            || read_ptrs(ptrs, self->nwords, y->ptr, &y->nptr) < 0) { Py_DECREF(outs); return -1; }
        y->nd = (int)n;
        y->nbytes = PyArray_MultiplyList(y->dims, y->nd) * RG_ELSIZE(y->descr);
        if (alloc != Py_None) {
            Py_INCREF(alloc);
            Py_INCREF(shape);
            y->alloc = alloc;
            y->shape = shape;
        }
    }
    Py_DECREF(outs);

    PyObject *sp = PySequence_Fast(spans, "spans");
    if (!sp) return -1;
    self->nspans = PySequence_Fast_GET_SIZE(sp);
    self->spans = PyMem_Calloc(self->nspans ? self->nspans : 1, sizeof(*self->spans));
    if (!self->spans) { Py_DECREF(sp); PyErr_NoMemory(); return -1; }
    for (Py_ssize_t s = 0; s < self->nspans; ++s) {
        if (read_ints(PySequence_Fast_GET_ITEM(sp, s), self->spans[s], 2, &n, "span") < 0 || n != 2) {
            Py_DECREF(sp);
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a span is (lo, hi)");
            return -1;
        }
    }
    Py_DECREF(sp);

    PyObject *src = PySequence_Fast(sources, "sources");
    if (!src) return -1;
    self->nsrc = PySequence_Fast_GET_SIZE(src);
    self->srcs = PyMem_Calloc(self->nsrc ? self->nsrc : 1, sizeof(rg_src));
    if (!self->srcs) { Py_DECREF(src); PyErr_NoMemory(); return -1; }
    for (Py_ssize_t o = 0; o < self->nsrc; ++o) {
        rg_src *y = &self->srcs[o];
        PyObject *ptrs;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(src, o), "nO", &y->src, &ptrs)
            || read_ptrs(ptrs, self->nwords, y->ptr, &y->nptr) < 0) { Py_DECREF(src); return -1; }
        if (y->src < 0 || y->src >= self->nin) { Py_DECREF(src); PyErr_SetString(PyExc_ValueError, "source out of range"); return -1; }
    }
    Py_DECREF(src);
    PyObject *os = PySequence_Fast(out_spans, "out_spans");
    if (!os) return -1;
    self->nospans = PySequence_Fast_GET_SIZE(os);
    self->ospans = PyMem_Calloc(self->nospans ? self->nospans : 1, sizeof(rg_span));
    if (!self->ospans) { Py_DECREF(os); PyErr_NoMemory(); return -1; }
    for (Py_ssize_t n = 0; n < self->nospans; ++n) {
        rg_span *y = &self->ospans[n];
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(os, n), "nnn", &y->o, &y->lo, &y->hi)) { Py_DECREF(os); return -1; }
        if (y->o < 0 || y->o >= self->nsrc) { Py_DECREF(os); PyErr_SetString(PyExc_ValueError, "output out of range"); return -1; }
    }
    Py_DECREF(os);
    if (self->nsrc && (self->nout || self->fixed || self->ngiven)) {
        PyErr_SetString(PyExc_ValueError, "in place takes no other outputs");
        return -1;
    }
    if (self->ngiven && self->nout) {
        PyErr_SetString(PyExc_ValueError, "outputs are given or allocated, not both");
        return -1;
    }
    self->state = 2;
    return 0;
}

/* In place: every source written is writeable, and no output shares a byte with another output or
 * with any input but its own source (runtime/numpy_host.py's HostCall.apart); 0: decline. */
static int apart(const rg_call *self, PyObject *const *args, const npy_intp *addr)
{
    for (Py_ssize_t o = 0; o < self->nsrc; ++o)
        if (!PyArray_ISWRITEABLE((PyArrayObject *)args[self->srcs[o].src])) return 0;
    for (Py_ssize_t n = 0; n < self->nospans; ++n) {
        const rg_span *a = &self->ospans[n];
        const Py_ssize_t own = self->srcs[a->o].src;
        const npy_intp lo = addr[own] + a->lo, hi = addr[own] + a->hi;
        for (Py_ssize_t m = n + 1; m < self->nospans; ++m) {
            const rg_span *b = &self->ospans[m];
            const npy_intp base = addr[self->srcs[b->o].src];
            if (base + b->lo <= hi && lo <= base + b->hi) return 0;
        }
        for (Py_ssize_t i = 0; i < self->nin; ++i) {
            const rg_in *in = &self->in[i];
            if (i != own && in->hi >= in->lo && addr[i] + in->lo <= hi && lo <= addr[i] + in->hi) return 0;
        }
    }
    return 1;
}

/* out= passed: each output (after the inputs in args) of the bound signature, aligned and writeable,
 * its words set, and sharing no byte with another output or with any input (runtime/numpy_host.py's
 * HostCall.apart; an output exactly over its own source is left to it); 0: decline. */
static int given_apart(const rg_call *self, PyObject *const *args, const npy_intp *addr, int64_t *words)
{
    npy_intp lo[RG_MAX_INPUTS], hi[RG_MAX_INPUTS];
    for (Py_ssize_t o = 0; o < self->ngiven; ++o) {
        const rg_in *want = &self->given[o];
        PyObject *obj = args[self->nin + o];
        if (!PyArray_CheckExact(obj)) return 0;
        PyArrayObject *a = (PyArrayObject *)obj;
        PyArray_Descr *d = PyArray_DESCR(a);
        if ((d != want->descr && !PyArray_EquivTypes(d, want->descr)) || PyArray_NDIM(a) != want->nd
            || !PyArray_CompareLists(PyArray_DIMS(a), want->dims, want->nd)
            || !PyArray_CompareLists(PyArray_STRIDES(a), want->strides, want->nd) || !PyArray_ISWRITEABLE(a))
            return 0;
        const npy_intp at = (npy_intp)(uintptr_t)PyArray_DATA(a);
        if (at & want->mask) return 0;
        lo[o] = at + want->lo;
        hi[o] = at + want->hi;
        for (Py_ssize_t j = 0; j < want->nptr; ++j) words[want->ptr[j]] = (int64_t)at;
    }
    for (Py_ssize_t o = 0; o < self->ngiven; ++o) {
        if (self->given[o].hi < self->given[o].lo) continue;   /* empty */
        for (Py_ssize_t m = o + 1; m < self->ngiven; ++m)
            if (self->given[m].hi >= self->given[m].lo && lo[m] <= hi[o] && lo[o] <= hi[m]) return 0;
        for (Py_ssize_t i = 0; i < self->nin; ++i) {
            const rg_in *in = &self->in[i];
            if (in->hi >= in->lo && addr[i] + in->lo <= hi[o] && lo[o] <= addr[i] + in->hi) return 0;
        }
    }
    return 1;
}

/* One new output of the bound signature, its words set; NULL with an exception. */
static PyObject *new_output(rg_out *y, int64_t *words)
{
    PyObject *a;
    if (y->alloc) {
        a = PyObject_CallFunctionObjArgs(y->alloc, y->shape, (PyObject *)y->descr, NULL);
        if (a && (!PyArray_CheckExact(a) || !PyArray_IS_C_CONTIGUOUS((PyArrayObject *)a)
                  || PyArray_NDIM((PyArrayObject *)a) != y->nd
                  || !PyArray_CompareLists(PyArray_DIMS((PyArrayObject *)a), y->dims, y->nd))) {
            Py_DECREF(a);
            PyErr_SetString(PyExc_RuntimeError, "the output allocator returned an array of another layout");
            return NULL;
        }
    } else {
        /* a fresh buffer from a 64-byte line: runtime/aligned.py's fresh_on_a_line, a view of a byte
         * array 63 bytes longer (its base); NumPy's own start 16 bytes into a line, and a store split
         * across two lines cost more than the view (llama3 f32 q + k, T = 16: 25.4 -> 14.1 us) */
        npy_intp n = y->nbytes + 63;
        PyObject *raw = PyArray_SimpleNew(1, &n, NPY_UINT8);
        if (!raw) return NULL;
        char *at = PyArray_BYTES((PyArrayObject *)raw);
        at += (size_t)(-(uintptr_t)at & 63u);
        Py_INCREF(y->descr);   /* stolen */
        a = PyArray_NewFromDescr(&PyArray_Type, y->descr, y->nd, y->dims, NULL, at, NPY_ARRAY_CARRAY, NULL);
        if (!a) {
            Py_DECREF(raw);
            return NULL;
        }
        if (PyArray_SetBaseObject((PyArrayObject *)a, raw) < 0) {   /* steals raw, even on failure */
            Py_DECREF(a);
            return NULL;
        }
    }
    if (!a) return NULL;
    const int64_t at = (int64_t)(uintptr_t)PyArray_DATA((PyArrayObject *)a);
    for (Py_ssize_t j = 0; j < y->nptr; ++j) words[y->ptr[j]] = at;
    return a;
}

static PyObject *call_vectorcall(PyObject *obj, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    rg_call *self = (rg_call *)obj;
    const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (self->state != 2 || kwnames) Py_RETURN_NONE;
    /* out= passed: the outputs follow the inputs (the bound outputs' spans do not apply) */
    const int passed = self->ngiven && nargs == self->nin + self->ngiven;
    if (!passed && (nargs != self->nin || (self->ngiven && !self->fixed))) Py_RETURN_NONE;
    int64_t words[RG_MAX_WORDS];
    npy_intp addr[RG_MAX_INPUTS];
    memcpy(words, self->words, sizeof(int64_t) * (size_t)self->nwords);
    for (Py_ssize_t i = 0; i < self->nin; ++i) {
        const rg_in *want = &self->in[i];
        if (!PyArray_CheckExact(args[i])) Py_RETURN_NONE;
        PyArrayObject *a = (PyArrayObject *)args[i];
        PyArray_Descr *d = PyArray_DESCR(a);
        if ((d != want->descr && !PyArray_EquivTypes(d, want->descr)) || PyArray_NDIM(a) != want->nd
            || !PyArray_CompareLists(PyArray_DIMS(a), want->dims, want->nd)
            || !PyArray_CompareLists(PyArray_STRIDES(a), want->strides, want->nd))
            Py_RETURN_NONE;
        const npy_intp at = (npy_intp)(uintptr_t)PyArray_DATA(a);
        if (at & want->mask) Py_RETURN_NONE;
        if (want->hi >= want->lo && !passed) {
            for (Py_ssize_t s = 0; s < self->nspans; ++s)
                if (self->spans[s][0] <= at + want->hi && at + want->lo <= self->spans[s][1]) Py_RETURN_NONE;
        }
        for (Py_ssize_t j = 0; j < want->nptr; ++j) words[want->ptr[j]] = (int64_t)at;
        addr[i] = at;
    }
    if (passed && !given_apart(self, args, addr, words)) Py_RETURN_NONE;
    if (self->nsrc) {
        if (!apart(self, args, addr)) Py_RETURN_NONE;
        for (Py_ssize_t o = 0; o < self->nsrc; ++o)
            for (Py_ssize_t j = 0; j < self->srcs[o].nptr; ++j) words[self->srcs[o].ptr[j]] = (int64_t)addr[self->srcs[o].src];
    }
    PyObject *made[8], **outs = made, *result = NULL;
    if (self->nout > 8 && !(outs = PyMem_Calloc((size_t)self->nout, sizeof(PyObject *)))) return PyErr_NoMemory();
    Py_ssize_t done = 0;
    for (; done < self->nout; ++done)
        if (!(outs[done] = new_output(&self->out[done], words))) goto out;
    /* other Python threads run meanwhile, as through ctypes (the arguments and outputs are held) */
    int code;
    Py_BEGIN_ALLOW_THREADS
    code = self->fn(words);
    Py_END_ALLOW_THREADS
    if (code) {
        PyObject *given = PyTuple_New(self->nin);
        if (given) {
            for (Py_ssize_t i = 0; i < self->nin; ++i) { Py_INCREF(args[i]); PyTuple_SET_ITEM(given, i, args[i]); }
            PyObject *r = PyObject_CallFunction(self->on_status, "iO", code, given);
            Py_XDECREF(r);
            Py_DECREF(given);
        }
        if (!PyErr_Occurred()) PyErr_Format(PyExc_RuntimeError, "kernel status %d", code);
        goto out;
    }
    if (passed) {    /* the outputs the call passed */
        const Py_ssize_t n_out = self->ngiven;
        if (self->single && n_out == 1) {
            result = args[self->nin];
            Py_INCREF(result);
        } else if ((result = PyTuple_New(n_out)))
            for (Py_ssize_t o = 0; o < n_out; ++o) {
                Py_INCREF(args[self->nin + o]);
                PyTuple_SET_ITEM(result, o, args[self->nin + o]);
            }
    } else if (self->fixed) {
        Py_INCREF(self->fixed);
        result = self->fixed;
    } else if (self->nsrc) {    /* in place: the sources are the outputs */
        if (self->single && self->nsrc == 1) {
            result = args[self->srcs[0].src];
            Py_INCREF(result);
        } else if ((result = PyTuple_New(self->nsrc)))
            for (Py_ssize_t o = 0; o < self->nsrc; ++o) {
                PyObject *y = args[self->srcs[o].src];
                Py_INCREF(y);
                PyTuple_SET_ITEM(result, o, y);
            }
    } else if (self->single && self->nout == 1) {
        result = outs[0];
        outs[0] = NULL;
    } else {
        result = PyTuple_New(self->nout);
        if (result)
            for (Py_ssize_t o = 0; o < self->nout; ++o) { PyTuple_SET_ITEM(result, o, outs[o]); outs[o] = NULL; }
    }
out:
    for (Py_ssize_t o = 0; o < done; ++o) Py_XDECREF(outs[o]);
    if (outs != made) PyMem_Free(outs);
    return result;
}

static PyObject *call_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    (void)args;
    (void)kwds;
    rg_call *self = (rg_call *)type->tp_alloc(type, 0);   /* zeroed */
    if (self) self->vectorcall = call_vectorcall;
    return (PyObject *)self;
}

static PyObject *call_tp_call(PyObject *obj, PyObject *args, PyObject *kwds)
{
    return PyVectorcall_Call(obj, args, kwds);
}

static PyTypeObject CallType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ropegen_fastcall.Call",
    .tp_doc = "A bound kernel call: call(*arrays) -> outputs, or None where the Python path must take it",
    .tp_basicsize = sizeof(rg_call),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = call_new,
    .tp_init = (initproc)call_init,
    .tp_dealloc = (destructor)call_dealloc,
    .tp_call = call_tp_call,
    .tp_vectorcall_offset = offsetof(rg_call, vectorcall),
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "ropegen_fastcall", "Bound C kernel calls (ropegen/backends/c/fastcall.py)", -1, NULL,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit_ropegen_fastcall(void)
{
    import_array();
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyType_Ready(&CallType) < 0 || PyModule_AddObjectRef(m, "Call", (PyObject *)&CallType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    PyModule_AddIntConstant(m, "MAX_WORDS", RG_MAX_WORDS);
    PyModule_AddIntConstant(m, "MAX_INPUTS", RG_MAX_INPUTS);
    return m;
}
