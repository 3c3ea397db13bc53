/* The native wire check: whether a serialized protobuf message would decode, without decoding it and
 * without the GIL (see wirecheck.py, which builds the schema from the message's descriptors and owns
 * the fallback).
 *
 * The promise is one-way: when check() finds no problem, the message parses (upb's FromString
 * succeeds). Where upb is lenient the check is stricter and says "not checked here" (a wire type that
 * does not match a known field, groups, nesting deeper than MAX_DEPTH, a varint past 64 bits): the
 * caller then decodes as usual, and decode() names what is wrong, if anything. The tests hold the
 * promise against upb on producer fixtures and fuzzed bytes.
 *
 * What upb checks and so must be checked here: every tag, varint, length and fixed-width value is
 * whole and inside its message; field number 0 is invalid; every `string` field is valid UTF-8
 * (strict: no surrogates, no overlong forms, nothing past U+10FFFF); nested messages end where their
 * length says. The walk is iterative (an explicit stack), so hostile nesting cannot overflow C's.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_utf8.h"

enum { K_VARINT, K_FIXED64, K_FIXED32, K_STRING, K_BYTES, K_MESSAGE, K_UNSUPPORTED };
#define MAX_DEPTH 64
#define MAX_FIELD 536870911u /* 2^29 - 1 */

typedef struct {
    uint32_t number;
    uint8_t kind;
    uint8_t repeated;
    int32_t child; /* K_MESSAGE: index of the field's message in the schema */
} field_t;

typedef struct {
    field_t *fields;
    Py_ssize_t count;
} message_t;

typedef struct {
    message_t *messages;
    Py_ssize_t count;
    field_t *all; /* one allocation behind every message's fields */
} schema_t;

#define CAPSULE_NAME "wt_otel.ingest._wirecheck.schema"

/* ------------------------------------------------------------------ the walk (no Python API: no GIL) */

typedef struct {
    const char *what; /* a static message; NULL: no problem */
    Py_ssize_t at;
    uint32_t field;
} problem_t;

static int bad(problem_t *p, const char *what, Py_ssize_t at, uint32_t field) {
    p->what = what;
    p->at = at;
    p->field = field;
    return -1;
}

/* A varint of at most 10 bytes whose value fits 64 bits (the 10th byte is 0 or 1). */
static int varint(const uint8_t *b, Py_ssize_t *pos, Py_ssize_t end, uint64_t *out) {
    uint64_t result = 0;
    for (int i = 0; i < 10; i++) {
        if (*pos >= end)
            return -1;
        uint8_t c = b[(*pos)++];
        if (i == 9 && c > 1)
            return -1;
        result |= (uint64_t)(c & 0x7F) << (7 * i);
        if (c < 0x80) {
            *out = result;
            return 0;
        }
    }
    return -1;
}

static const field_t *find(const message_t *m, uint32_t number) {
    for (Py_ssize_t i = 0; i < m->count; i++)
        if (m->fields[i].number == number)
            return &m->fields[i];
    return NULL;
}

/* The payload of a packed repeated scalar: whole values only. */
static int packed(const uint8_t *b, Py_ssize_t pos, Py_ssize_t end, uint8_t kind) {
    if (kind == K_FIXED64)
        return (end - pos) % 8 == 0 ? 0 : -1;
    if (kind == K_FIXED32)
        return (end - pos) % 4 == 0 ? 0 : -1;
    uint64_t v;
    while (pos < end)
        if (varint(b, &pos, end, &v) < 0)
            return -1;
    return 0;
}

static int walk(const schema_t *schema, const uint8_t *b, Py_ssize_t n, problem_t *p) {
    Py_ssize_t ends[MAX_DEPTH + 1];
    int32_t msgs[MAX_DEPTH + 1];
    int depth = 0;
    Py_ssize_t pos = 0;
    ends[0] = n;
    msgs[0] = 0;
    for (;;) {
        while (pos == ends[depth]) {
            if (depth == 0)
                return 0;
            depth--;
        }
        const message_t *m = &schema->messages[msgs[depth]];
        Py_ssize_t end = ends[depth], at = pos;
        uint64_t tag, len;
        if (varint(b, &pos, end, &tag) < 0 || pos - at > 5 || tag > 0xFFFFFFFFu)
            return bad(p, "a malformed tag", at, 0);
        uint32_t number = (uint32_t)(tag >> 3);
        unsigned wire = (unsigned)(tag & 7);
        if (number == 0 || number > MAX_FIELD)
            return bad(p, "an invalid field number", at, number);
        const field_t *f = find(m, number);
        if (wire == 2) {
            if (varint(b, &pos, end, &len) < 0 || len > (uint64_t)(end - pos))
                return bad(p, "a length that runs past the end of its message", at, number);
        }
        if (!f) { /* an unknown field: upb keeps it; only its extent matters */
            switch (wire) {
            case 0:
                if (varint(b, &pos, end, &len) < 0)
                    return bad(p, "a malformed varint", at, number);
                continue;
            case 1:
            case 5:
                if ((Py_ssize_t)(wire == 1 ? 8 : 4) > end - pos)
                    return bad(p, "a fixed-width value that runs past the end of its message", at, number);
                pos += wire == 1 ? 8 : 4;
                continue;
            case 2:
                pos += (Py_ssize_t)len;
                continue;
            default:
                return bad(p, "a group or an invalid wire type (not checked here)", at, number);
            }
        }
        switch (f->kind) {
        case K_VARINT:
        case K_FIXED64:
        case K_FIXED32: {
            unsigned expected = f->kind == K_VARINT ? 0 : f->kind == K_FIXED64 ? 1 : 5;
            if (wire == 2 && f->repeated) {
                if (packed(b, pos, pos + (Py_ssize_t)len, f->kind) < 0)
                    return bad(p, "a malformed packed field", at, number);
                pos += (Py_ssize_t)len;
            } else if (wire != expected) {
                return bad(p, "a wire type that does not match the field (not checked here)", at, number);
            } else if (wire == 0) {
                if (varint(b, &pos, end, &len) < 0)
                    return bad(p, "a malformed varint", at, number);
            } else {
                if ((Py_ssize_t)(wire == 1 ? 8 : 4) > end - pos)
                    return bad(p, "a fixed-width value that runs past the end of its message", at, number);
                pos += wire == 1 ? 8 : 4;
            }
            continue;
        }
        case K_STRING:
        case K_BYTES:
            if (wire != 2)
                return bad(p, "a wire type that does not match the field (not checked here)", at, number);
            if (f->kind == K_STRING && !utf8_valid(b + pos, (Py_ssize_t)len))
                return bad(p, "a string field that is not valid UTF-8", at, number);
            pos += (Py_ssize_t)len;
            continue;
        case K_MESSAGE:
            if (wire != 2)
                return bad(p, "a wire type that does not match the field (not checked here)", at, number);
            if (depth == MAX_DEPTH)
                return bad(p, "messages nested too deep (not checked here)", at, number);
            depth++;
            ends[depth] = pos + (Py_ssize_t)len;
            msgs[depth] = f->child;
            continue;
        default:
            return bad(p, "a field of a kind not checked here", at, number);
        }
    }
}

/* ------------------------------------------------------------------ module functions */

static void free_schema(PyObject *capsule) {
    schema_t *s = PyCapsule_GetPointer(capsule, CAPSULE_NAME);
    if (s) {
        PyMem_Free(s->all);
        PyMem_Free(s->messages);
        PyMem_Free(s);
    }
}

/* compile(messages): messages[0] is the root; each is a sequence of (number, kind, repeated, child). */
static PyObject *compile_schema(PyObject *self, PyObject *arg) {
    (void)self;
    PyObject *seq = PySequence_Fast(arg, "compile(messages): a sequence of messages");
    if (!seq)
        return NULL;
    Py_ssize_t nm = PySequence_Fast_GET_SIZE(seq), total = 0;
    PyObject *lists = NULL; /* each message's fields as a list: sizes fixed before anything is allocated */
    schema_t *s = NULL;
    if (nm < 1 || nm > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "compile(messages): at least one message (the root)");
        goto fail;
    }
    if (!(lists = PyList_New(nm)))
        goto fail;
    for (Py_ssize_t i = 0; i < nm; i++) {
        PyObject *fields = PySequence_Fast(PySequence_Fast_GET_ITEM(seq, i), "a message: a sequence of fields");
        if (!fields)
            goto fail;
        PyList_SET_ITEM(lists, i, fields);
        total += PySequence_Fast_GET_SIZE(fields);
    }
    if (!(s = PyMem_Calloc(1, sizeof(schema_t))) || !(s->messages = PyMem_Calloc((size_t)nm, sizeof(message_t))) ||
        !(s->all = PyMem_Calloc((size_t)(total ? total : 1), sizeof(field_t)))) {
        PyErr_NoMemory();
        goto fail;
    }
    s->count = nm;
    field_t *next = s->all;
    for (Py_ssize_t i = 0; i < nm; i++) {
        PyObject *fields = PyList_GET_ITEM(lists, i);
        s->messages[i].fields = next;
        s->messages[i].count = PySequence_Fast_GET_SIZE(fields);
        for (Py_ssize_t j = 0; j < s->messages[i].count; j++, next++) {
            unsigned long number;
            int kind, repeated, child;
            if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fields, j), "kiii:field", &number, &kind, &repeated,
                                  &child))
                goto fail;
            if (number == 0 || number > MAX_FIELD || kind < K_VARINT || kind > K_UNSUPPORTED ||
                (kind == K_MESSAGE && (child < 0 || child >= nm))) {
                PyErr_Format(PyExc_ValueError, "compile(): message %zd field %lu: bad number, kind or child", i,
                             number);
                goto fail;
            }
            *next = (field_t){(uint32_t)number, (uint8_t)kind, (uint8_t)(repeated != 0), child};
        }
    }
    Py_DECREF(lists);
    Py_DECREF(seq);
    PyObject *capsule = PyCapsule_New(s, CAPSULE_NAME, free_schema);
    if (!capsule) {
        PyMem_Free(s->all);
        PyMem_Free(s->messages);
        PyMem_Free(s);
    }
    return capsule;
fail:
    Py_XDECREF(lists);
    Py_DECREF(seq);
    if (s) {
        PyMem_Free(s->all);
        PyMem_Free(s->messages);
        PyMem_Free(s);
    }
    return NULL;
}

/* check(body, schema) -> None when the message decodes, else what stops the check. */
static PyObject *check(PyObject *self, PyObject *args) {
    Py_buffer view;
    PyObject *capsule;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*O:check", &view, &capsule))
        return NULL;
    schema_t *s = PyCapsule_GetPointer(capsule, CAPSULE_NAME);
    if (!s) {
        PyBuffer_Release(&view);
        return NULL;
    }
    problem_t p = {NULL, 0, 0};
    int rc;
    Py_BEGIN_ALLOW_THREADS /* the buffer is pinned by the view and the schema by the capsule we hold */
    rc = walk(s, view.buf, view.len, &p);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (rc == 0)
        Py_RETURN_NONE;
    return PyUnicode_FromFormat("%s (field %u, at byte %zd)", p.what, p.field, p.at);
}

static PyMethodDef methods[] = {
    {"compile", compile_schema, METH_O, "compile(messages) -> a schema for check() (see wirecheck.py)."},
    {"check", check, METH_VARARGS, "check(body, schema) -> None when body decodes, else why it was not settled."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_wirecheck", "The native wire check (see wt_otel/ingest/wirecheck.py).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__wirecheck(void) { return PyModule_Create(&module); }
