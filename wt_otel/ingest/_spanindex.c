/* The native span index: the same walk as `scan_wire` in spanindex.py, with identical results
 * (the tests compare it with both Python implementations on every producer fixture and on fuzzed
 * bytes). Read that module first: it documents what an entry holds and which inputs are errors; this
 * file mirrors the wire walk function by function (_fields, _skip, _skip_group, _value, _key_value,
 * _event, _span) and raises the same messages.
 *
 * The tables (GenAI key prefixes, ...) are not compiled in: spanindex.py passes them to configure(),
 * so wt_otel.ingest.keys stays the one place they are written. Memory: the walk has a fixed depth,
 * never recurses, and allocates per span (the entry) and per level (offset arrays), both bounded
 * by the input's length. scan() holds the GIL throughout (it builds Python objects as it goes);
 * scan_runs() walks without it (offsets only) and takes it to build the runs serve keeps.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_utf8.h"

typedef struct {
    const uint8_t *p;
    Py_ssize_t n;
} bstr;

typedef struct {
    bstr *items;
    Py_ssize_t count;
    uint8_t first[256]; /* first bytes of the non-empty items: most keys miss every table at their first byte */
    int has_empty;
} btable;

#define MAX_WANTED 32

static btable genai_prefixes, genai_keys, name_prefixes, wanted, mark_keys, mark_prefixes, operations;
static bstr event_prefix;
static PyObject *table_refs = NULL;      /* keeps the bytes behind every bstr alive */
static PyObject *operation_strs = NULL;  /* tuple of str, parallel to `operations` */
static PyTypeObject *entry_type = NULL;
static PyObject *error_cls = NULL;
static PyObject *resolve_fn = NULL;

/* ------------------------------------------------------------------ errors */

/* Set while scan_runs walks without the GIL: fail() and push_range() then touch no Python state (the
 * caller, back under the GIL, falls back to scan(), which raises the error with its message). */
static _Thread_local int quiet;

static int fail(const char *fmt, ...) {
    if (quiet)
        return -1;
    va_list vargs;
    va_start(vargs, fmt);
    PyErr_FormatV(error_cls ? error_cls : PyExc_ValueError, fmt, vargs);
    va_end(vargs);
    return -1;
}

/* ------------------------------------------------------------------ wire primitives */

static int read_varint(const uint8_t *b, Py_ssize_t *pos, Py_ssize_t end, uint64_t *out) {
    uint64_t result = 0;
    int shift = 0;
    for (;;) {
        if (*pos >= end)
            return fail("truncated varint at byte %zd", *pos);
        uint8_t c = b[(*pos)++];
        if (shift < 64)
            result |= (uint64_t)(c & 0x7F) << shift;
        if (c < 0x80) {
            *out = result;
            return 0;
        }
        shift += 7;
        if (shift >= 70)
            return fail("varint longer than 10 bytes at byte %zd", *pos);
    }
}

static int skip_group(const uint8_t *b, Py_ssize_t *pos, Py_ssize_t end, uint64_t field);

/* _skip: past a field the walk does not read (or a read field with an unexpected wire type, which
 * protobuf keeps as an unknown field). */
static int skip_field(const uint8_t *b, Py_ssize_t *pos, Py_ssize_t end, unsigned wire, uint64_t field) {
    uint64_t n;
    switch (wire) {
    case 0:
        return read_varint(b, pos, end, &n);
    case 2:
        if (read_varint(b, pos, end, &n) < 0)
            return -1;
        break;
    case 1:
        n = 8;
        break;
    case 5:
        n = 4;
        break;
    case 3:
        return skip_group(b, pos, end, field);
    case 4:
        return fail("field %llu ends a group that was not started (wire type 4) at byte %zd",
                    (unsigned long long)field, *pos);
    default:
        return fail("field %llu has wire type %u (not a protobuf wire type) at byte %zd", (unsigned long long)field,
                    wire, *pos);
    }
    if (n > (uint64_t)(end - *pos))
        return fail("field %llu runs past the end of its message (byte %zd)", (unsigned long long)field, end);
    *pos += (Py_ssize_t)n;
    return 0;
}

/* _skip_group: to the end-group tag of `field`, counting nested groups instead of recursing (their
 * numbers are not checked). skip_field never sees wire type 3 from here, so this does not recurse. */
static int skip_group(const uint8_t *b, Py_ssize_t *pos, Py_ssize_t end, uint64_t field) {
    Py_ssize_t depth = 0;
    for (;;) {
        uint64_t tag, number;
        unsigned wire;
        if (*pos >= end)
            return fail("group field %llu is not closed before byte %zd", (unsigned long long)field, end);
        if (read_varint(b, pos, end, &tag) < 0)
            return -1;
        number = tag >> 3;
        wire = (unsigned)(tag & 7);
        if (wire == 3) {
            depth++;
        } else if (wire == 4) {
            if (depth == 0) {
                if (number != field)
                    return fail("group field %llu is closed by field %llu at byte %zd", (unsigned long long)field,
                                (unsigned long long)number, *pos);
                return 0;
            }
            depth--;
        } else if (skip_field(b, pos, end, wire, number) < 0) {
            return -1;
        }
    }
}

/* The tag at *pos: field number and wire type. */
static int read_tag(const uint8_t *b, Py_ssize_t *pos, Py_ssize_t end, uint64_t *field, unsigned *wire) {
    uint64_t tag;
    if (b[*pos] < 0x80) {
        tag = b[(*pos)++];
    } else if (read_varint(b, pos, end, &tag) < 0) {
        return -1;
    }
    *field = tag >> 3;
    *wire = (unsigned)(tag & 7);
    return 0;
}

/* A length prefix at *pos; fails (with `what` and `field` in the message) when it runs past `end`. */
static int read_len(const uint8_t *b, Py_ssize_t *pos, Py_ssize_t end, const char *what, uint64_t field,
                    Py_ssize_t *stop) {
    uint64_t n;
    if (*pos < end && b[*pos] < 0x80) {
        n = b[(*pos)++];
    } else if (read_varint(b, pos, end, &n) < 0) {
        return -1;
    }
    if (n > (uint64_t)(end - *pos))
        return fail("%s field %llu of %llu bytes runs past the end (byte %zd)", what, (unsigned long long)field,
                    (unsigned long long)n, end);
    *stop = *pos + (Py_ssize_t)n;
    return 0;
}

/* ------------------------------------------------------------------ tables */

static int has_prefix(const uint8_t *p, Py_ssize_t n, const btable *t) {
    if (!t->has_empty && (n == 0 || !t->first[p[0]]))
        return 0;
    for (Py_ssize_t i = 0; i < t->count; i++) {
        const bstr *x = &t->items[i];
        if (x->n <= n && memcmp(p, x->p, (size_t)x->n) == 0)
            return 1;
    }
    return 0;
}

static Py_ssize_t find_exact(const uint8_t *p, Py_ssize_t n, const btable *t) {
    if (n > 0 && !t->first[p[0]])
        return -1;
    for (Py_ssize_t i = 0; i < t->count; i++) {
        const bstr *x = &t->items[i];
        if (x->n == n && memcmp(p, x->p, (size_t)n) == 0)
            return i;
    }
    return -1;
}

/* A model call in any namespace, by its keys alone (`wt_otel.ingest.keys.model_call_bits`, the same words): a
 * key that names the model (1) and one that counts tokens (2): `acme.model.name`, `acme.usage.input_tokens`. */
static int has_word(const uint8_t *p, Py_ssize_t n, const char *w) {
    Py_ssize_t wn = (Py_ssize_t)strlen(w);
    for (Py_ssize_t i = 0; i + wn <= n; i++) {
        Py_ssize_t j = 0;
        while (j < wn && (uint8_t)(p[i + j] >= 'A' && p[i + j] <= 'Z' ? p[i + j] + 32 : p[i + j]) == (uint8_t)w[j])
            j++;
        if (j == wn)
            return 1;
    }
    return 0;
}

static unsigned model_call_bits(const uint8_t *p, Py_ssize_t n) {
    unsigned bits = has_word(p, n, "model") ? 1u : 0u;
    if ((has_word(p, n, "token") || has_word(p, n, "usage")) &&
        (has_word(p, n, "input") || has_word(p, n, "output") || has_word(p, n, "prompt") ||
         has_word(p, n, "completion") || has_word(p, n, "total")))
        bits |= 2u;
    return bits;
}

static int is_mark(const uint8_t *p, Py_ssize_t n) {
    return find_exact(p, n, &mark_keys) >= 0 || has_prefix(p, n, &mark_prefixes);
}

/* ------------------------------------------------------------------ offset lists */

typedef struct {
    Py_ssize_t *v; /* start, end pairs */
    Py_ssize_t n, cap;
} spans_t;

static int push_range(spans_t *s, Py_ssize_t a, Py_ssize_t b) {
    if (s->n + 2 > s->cap) {
        Py_ssize_t cap = s->cap ? s->cap * 2 : 32;
        Py_ssize_t *v = PyMem_RawRealloc(s->v, (size_t)cap * sizeof(Py_ssize_t));
        if (!v) {
            if (!quiet)
                PyErr_NoMemory();
            return -1;
        }
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = a;
    s->v[s->n++] = b;
    return 0;
}

/* _fields: (start, end) of each length-delimited field `want` in b[pos:end], into `out`. */
static int collect_fields(const uint8_t *b, Py_ssize_t pos, Py_ssize_t end, uint64_t want, const char *what,
                          spans_t *out) {
    out->n = 0;
    while (pos < end) {
        uint64_t field;
        unsigned wire;
        if (read_tag(b, &pos, end, &field, &wire) < 0)
            return -1;
        if (field == 0)
            return fail("field number 0 in %s at byte %zd", what, pos);
        if (field == want && wire == 2) {
            Py_ssize_t stop;
            if (read_len(b, &pos, end, what, want, &stop) < 0)
                return -1;
            if (push_range(out, pos, stop) < 0)
                return -1;
            pos = stop;
        } else if (skip_field(b, &pos, end, wire, field) < 0) {
            return -1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ values */

static PyObject *resolve(const uint8_t *b, Py_ssize_t start, Py_ssize_t end) {
    PyObject *raw = PyBytes_FromStringAndSize((const char *)b + start, end - start);
    if (!raw)
        return NULL;
    PyObject *v = PyObject_CallOneArg(resolve_fn, raw);
    Py_DECREF(raw);
    return v;
}

/* _value: a lone well-typed scalar field is read here, anything else by protobuf (resolve). */
static PyObject *read_value(const uint8_t *b, Py_ssize_t pos, Py_ssize_t end) {
    Py_ssize_t start = pos;
    uint64_t tag, field, n;
    unsigned wire;
    if (pos == end)
        Py_RETURN_NONE;
    if (read_varint(b, &pos, end, &tag) < 0)
        return NULL;
    field = tag >> 3;
    wire = (unsigned)(tag & 7);
    if (wire == 2 && (field == 1 || field == 7)) {
        if (read_varint(b, &pos, end, &n) < 0)
            return NULL;
        if (n == (uint64_t)(end - pos)) {
            if (field == 7)
                return PyBytes_FromStringAndSize((const char *)b + pos, (Py_ssize_t)n);
            PyObject *s = PyUnicode_DecodeUTF8((const char *)b + pos, (Py_ssize_t)n, NULL);
            if (!s && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                PyErr_Clear();
                fail("a string attribute value is not valid UTF-8");
            }
            return s;
        }
    } else if (wire == 0 && (field == 2 || field == 3)) {
        if (read_varint(b, &pos, end, &n) < 0)
            return NULL;
        if (pos == end) {
            if (field == 2)
                return PyBool_FromLong(n != 0);
            return PyLong_FromLongLong((long long)n);
        }
    } else if (wire == 1 && field == 4 && end - pos == 8) {
        double d = PyFloat_Unpack8((const char *)b + pos, 1);
        if (d == -1.0 && PyErr_Occurred())
            return NULL;
        return PyFloat_FromDouble(d);
    }
    return resolve(b, start, end);
}

typedef struct {
    const uint8_t *key;
    Py_ssize_t key_n, vstart, vend, count;
} kv_t;

static int read_key_value(const uint8_t *b, Py_ssize_t pos, Py_ssize_t end, kv_t *kv) {
    kv->key = b + pos;
    kv->key_n = 0;
    kv->vstart = kv->vend = kv->count = 0;
    while (pos < end) {
        uint64_t field;
        unsigned wire;
        if (read_tag(b, &pos, end, &field, &wire) < 0)
            return -1;
        if (field == 0)
            return fail("field number 0 in an attribute at byte %zd", pos);
        if ((field == 1 || field == 2) && wire == 2) {
            Py_ssize_t stop;
            if (read_len(b, &pos, end, "attribute", field, &stop) < 0)
                return -1;
            if (field == 1) {
                kv->key = b + pos;
                kv->key_n = stop - pos;
            } else {
                kv->vstart = pos;
                kv->vend = stop;
                kv->count++;
            }
            pos = stop;
        } else if (skip_field(b, &pos, end, wire, field) < 0) {
            return -1;
        }
    }
    return 0;
}

/* _mark: an incident/feedback attribute into the dict *marks (created on first use): a repeated key
 * keeps its first place and takes the last value, as in the decoder's attribute dict. */
static int add_mark(const uint8_t *b, const kv_t *kv, PyObject **marks) {
    if (kv->count > 1)
        return fail("an attribute read by the index has its value field more than once");
    PyObject *key = PyUnicode_DecodeUTF8((const char *)kv->key, kv->key_n, NULL);
    if (!key) {
        if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
            PyErr_Clear();
            fail("an attribute key is not valid UTF-8");
        }
        return -1;
    }
    PyObject *value;
    if (kv->count) {
        value = read_value(b, kv->vstart, kv->vend);
        if (!value) {
            Py_DECREF(key);
            return -1;
        }
    } else {
        value = Py_NewRef(Py_None);
    }
    int rc = -1;
    if (*marks || (*marks = PyDict_New()))
        rc = PyDict_SetItem(*marks, key, value);
    Py_DECREF(key);
    Py_DECREF(value);
    return rc;
}

/* The (key, value) pairs of a marks dict appended to the list *out (created on first use). */
static int extend_items(PyObject *dict, PyObject **out) {
    PyObject *key, *value;
    Py_ssize_t at = 0;
    if (!*out && !(*out = PyList_New(0)))
        return -1;
    while (PyDict_Next(dict, &at, &key, &value)) {
        PyObject *pair = PyTuple_Pack(2, key, value);
        if (!pair)
            return -1;
        int rc = PyList_Append(*out, pair);
        Py_DECREF(pair);
        if (rc < 0)
            return -1;
    }
    return 0;
}

/* _event: 1 when the event's name is a GenAI event name, 0 when not, -1 on error; its marks are
 * appended to the list *marks (created on first use). With `marks` NULL (scan_runs' walk, without the
 * GIL) no mark is read: *seen says whether the event has one. */
static int read_event(const uint8_t *b, Py_ssize_t pos, Py_ssize_t end, PyObject **marks, int *seen) {
    const uint8_t *name = b + pos;
    Py_ssize_t name_n = 0;
    PyObject *own = NULL;
    while (pos < end) {
        uint64_t field;
        unsigned wire;
        if (read_tag(b, &pos, end, &field, &wire) < 0)
            goto error;
        if (field == 0) {
            fail("field number 0 in a span event at byte %zd", pos);
            goto error;
        }
        if ((field == 2 || field == 3) && wire == 2) {
            Py_ssize_t stop;
            if (read_len(b, &pos, end, "span event", field, &stop) < 0)
                goto error;
            if (field == 2) {
                name = b + pos;
                name_n = stop - pos;
            } else {
                kv_t kv;
                if (read_key_value(b, pos, stop, &kv) < 0)
                    goto error;
                if (is_mark(kv.key, kv.key_n)) {
                    if (!marks)
                        *seen = 1;
                    else if (add_mark(b, &kv, &own) < 0)
                        goto error;
                }
            }
            pos = stop;
        } else if (skip_field(b, &pos, end, wire, field) < 0) {
            goto error;
        }
    }
    if (own) {
        int rc = extend_items(own, marks);
        Py_DECREF(own);
        if (rc < 0)
            return -1;
    }
    return event_prefix.n <= name_n && memcmp(name, event_prefix.p, (size_t)event_prefix.n) == 0;
error:
    Py_XDECREF(own);
    return -1;
}

static PyObject *hex_str(const uint8_t *p, Py_ssize_t n) {
    static const char digits[] = "0123456789abcdef";
    PyObject *s = PyUnicode_New(n * 2, 127);
    if (!s)
        return NULL;
    Py_UCS1 *d = PyUnicode_1BYTE_DATA(s);
    for (Py_ssize_t i = 0; i < n; i++) {
        d[2 * i] = (Py_UCS1)digits[p[i] >> 4];
        d[2 * i + 1] = (Py_UCS1)digits[p[i] & 15];
    }
    return s;
}

typedef struct {
    Py_ssize_t vstart, vend, count;
    int seen;
} slot_t;

/* _span: one SpanEntry (a new reference), or NULL with the error set. */
static PyObject *read_span(const uint8_t *b, Py_ssize_t pos, Py_ssize_t end) {
    const uint8_t *trace = b, *span = b, *parent = b, *name = b;
    Py_ssize_t trace_n = 0, span_n = 0, parent_n = 0, name_n = 0;
    int genai = 0, event_genai = 0;
    unsigned model_bits = 0;
    slot_t slots[MAX_WANTED];
    PyObject *values[MAX_WANTED];
    PyObject *marks = NULL, *event_marks = NULL, *entry = NULL;
    Py_ssize_t nw = wanted.count, i;
    memset(slots, 0, sizeof(slots));
    memset(values, 0, sizeof(values));

    while (pos < end) {
        uint64_t field;
        unsigned wire;
        Py_ssize_t stop;
        if (read_tag(b, &pos, end, &field, &wire) < 0)
            goto error;
        if (field == 0) {
            fail("field number 0 in a span at byte %zd", pos);
            goto error;
        }
        if (wire == 2 && (field == 1 || field == 2 || field == 4 || field == 5 || field == 9 || field == 11)) {
            if (read_len(b, &pos, end, "span", field, &stop) < 0)
                goto error;
            if (field == 9) {
                kv_t kv;
                Py_ssize_t slot;
                if (read_key_value(b, pos, stop, &kv) < 0)
                    goto error;
                if (!genai && (has_prefix(kv.key, kv.key_n, &genai_prefixes) ||
                               find_exact(kv.key, kv.key_n, &genai_keys) >= 0))
                    genai = 1;
                else if (!genai && model_bits != 3u)
                    model_bits |= model_call_bits(kv.key, kv.key_n);
                slot = find_exact(kv.key, kv.key_n, &wanted);
                if (slot >= 0) {
                    slots[slot].vstart = kv.vstart;
                    slots[slot].vend = kv.vend;
                    slots[slot].count = kv.count;
                    slots[slot].seen = 1;
                }
                if (is_mark(kv.key, kv.key_n) && add_mark(b, &kv, &marks) < 0)
                    goto error;
            } else if (field == 11) {
                int g = read_event(b, pos, stop, &event_marks, NULL);
                if (g < 0)
                    goto error;
                if (g)
                    event_genai = 1;
            } else if (field == 1) {
                trace = b + pos;
                trace_n = stop - pos;
            } else if (field == 2) {
                span = b + pos;
                span_n = stop - pos;
            } else if (field == 4) {
                parent = b + pos;
                parent_n = stop - pos;
            } else {
                name = b + pos;
                name_n = stop - pos;
            }
            pos = stop;
        } else if (skip_field(b, &pos, end, wire, field) < 0) {
            goto error;
        }
    }

    for (i = 0; i < nw; i++) {
        if (!slots[i].seen)
            continue;
        if (slots[i].count > 1) {
            fail("an attribute read by the index has its value field more than once");
            goto error;
        }
        values[i] = slots[i].count ? read_value(b, slots[i].vstart, slots[i].vend) : Py_NewRef(Py_None);
        if (!values[i])
            goto error;
    }

    PyObject *conversation = NULL, *operation = NULL;
    for (i = 0; i < nw - 1; i++) {
        PyObject *v = values[i];
        if (v && v != Py_None && !(PyUnicode_CheckExact(v) && PyUnicode_GET_LENGTH(v) == 0)) {
            conversation = PyObject_Str(v);
            if (!conversation)
                goto error;
            break;
        }
    }
    if (!conversation)
        conversation = Py_NewRef(Py_None);
    if (parent_n == 0) {
        PyObject *op = values[nw - 1];
        if (op && PyUnicode_Check(op)) {
            operation = Py_NewRef(op);
        } else {
            Py_ssize_t head = 0;
            while (head < name_n && name[head] != ' ')
                head++;
            Py_ssize_t k = find_exact(name, head, &operations);
            operation = Py_NewRef(k >= 0 ? PyTuple_GET_ITEM(operation_strs, k) : Py_None);
        }
    } else {
        operation = Py_NewRef(Py_None);
    }

    PyObject *trace_s = hex_str(trace, trace_n);
    PyObject *span_s = hex_str(span, span_n);
    PyObject *parent_s = parent_n ? hex_str(parent, parent_n) : Py_NewRef(Py_None);
    PyObject *marks_t = NULL;
    if (marks) {  /* the span's own marks first, then the events' */
        PyObject *all = NULL;
        if (extend_items(marks, &all) == 0 && (!event_marks || PyList_SetSlice(all, PY_SSIZE_T_MAX,
                                                                            PY_SSIZE_T_MAX, event_marks) == 0))
            marks_t = PyList_AsTuple(all);
        Py_XDECREF(all);
    } else {
        marks_t = event_marks ? PyList_AsTuple(event_marks) : PyTuple_New(0);
    }
    int is_genai = genai || event_genai || model_bits == 3u || has_prefix(name, name_n, &name_prefixes);
    entry = entry_type->tp_alloc(entry_type, 7);
    if (!trace_s || !span_s || !parent_s || !marks_t || !entry) {
        Py_XDECREF(trace_s);
        Py_XDECREF(span_s);
        Py_XDECREF(parent_s);
        Py_XDECREF(marks_t);
        Py_XDECREF(entry);
        Py_DECREF(conversation);
        Py_DECREF(operation);
        entry = NULL;
        goto error;
    }
    PyTuple_SET_ITEM(entry, 0, trace_s);
    PyTuple_SET_ITEM(entry, 1, span_s);
    PyTuple_SET_ITEM(entry, 2, parent_s);
    PyTuple_SET_ITEM(entry, 3, PyBool_FromLong(is_genai));
    PyTuple_SET_ITEM(entry, 4, conversation);
    PyTuple_SET_ITEM(entry, 5, operation);
    PyTuple_SET_ITEM(entry, 6, marks_t);

error:
    for (i = 0; i < nw; i++)
        Py_XDECREF(values[i]);
    Py_XDECREF(marks);
    Py_XDECREF(event_marks);
    return entry;
}

/* ------------------------------------------------------------------ the request's spans */

/* Each span of the request (request > resource_spans > scope_spans > span), in wire order, to `on_span`
 * (0 to go on, -1 to stop); -1 when malformed or when `on_span` stopped. No Python of its own: scan()
 * walks with the GIL, scan_runs() without it. */
static int each_span(const uint8_t *b, Py_ssize_t len, int (*on_span)(const uint8_t *, Py_ssize_t, Py_ssize_t, void *),
                     void *ctx) {
    spans_t rs = {0}, ss = {0}, sp = {0};
    int rc = -1;
    if (collect_fields(b, 0, len, 1, "the request", &rs) < 0)
        goto done;
    for (Py_ssize_t i = 0; i < rs.n; i += 2) {
        if (collect_fields(b, rs.v[i], rs.v[i + 1], 2, "a resource_spans", &ss) < 0)
            goto done;
        for (Py_ssize_t j = 0; j < ss.n; j += 2) {
            if (collect_fields(b, ss.v[j], ss.v[j + 1], 2, "a scope_spans", &sp) < 0)
                goto done;
            for (Py_ssize_t k = 0; k < sp.n; k += 2)
                if (on_span(b, sp.v[k], sp.v[k + 1], ctx) < 0)
                    goto done;
        }
    }
    rc = 0;
done:
    PyMem_RawFree(rs.v);
    PyMem_RawFree(ss.v);
    PyMem_RawFree(sp.v);
    return rc;
}

/* ------------------------------------------------------------------ module functions */

static int append_entry(const uint8_t *b, Py_ssize_t start, Py_ssize_t end, void *out) {
    PyObject *entry = read_span(b, start, end);
    if (!entry)
        return -1;
    int rc = PyList_Append((PyObject *)out, entry);
    Py_DECREF(entry);
    return rc;
}

static PyObject *scan(PyObject *self, PyObject *arg) {
    Py_buffer view;
    PyObject *out = NULL;
    (void)self;
    if (!entry_type) {
        PyErr_SetString(PyExc_RuntimeError, "_spanindex.configure() was not called");
        return NULL;
    }
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if ((out = PyList_New(0)) && each_span(view.buf, view.len, append_entry, out) < 0)
        Py_CLEAR(out);
    PyBuffer_Release(&view);
    return out;
}

/* ------------------------------------------------------------------ scan_runs: `runs_python(scan(body))`, mostly without the GIL */

enum { V_NONE, V_STR, V_OTHER };

/* What read_value makes of b[pos:end], without making it: None; a str (its valid UTF-8 at *at, *n); or
 * anything else (another type, bad UTF-8, an error), for which the span is read the GIL-held way. */
static int classify_value(const uint8_t *b, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t *at, Py_ssize_t *n) {
    uint64_t tag, len;
    if (pos == end)
        return V_NONE;
    if (read_varint(b, &pos, end, &tag) < 0)
        return V_OTHER;
    if ((tag & 7) == 2 && (tag >> 3) == 1) {
        if (read_varint(b, &pos, end, &len) < 0)
            return V_OTHER;
        if (len == (uint64_t)(end - pos) && utf8_valid(b + pos, (Py_ssize_t)len)) {
            *at = pos;
            *n = (Py_ssize_t)len;
            return V_STR;
        }
    }
    return V_OTHER;
}

/* A span as the GIL-free walk saw it: where its ids and values are, or `slow` (read_span reads it later). */
typedef struct {
    Py_ssize_t start, end, trace, trace_n, span, span_n, parent_n, name, name_n, conv, conv_n, op, op_n;
    unsigned char genai, slow, has_op;
} peek_t;

typedef struct {
    peek_t *v;
    Py_ssize_t n, cap;
} peeks_t;

/* read_span's walk without Python (0, or -1 when malformed). A span whose marks or values need Python
 * (a mark, a value not a string, bad UTF-8, a repeated value field) is marked `slow`. */
static int peek_span(const uint8_t *b, Py_ssize_t pos, Py_ssize_t end, peek_t *p) {
    slot_t slots[MAX_WANTED];
    Py_ssize_t nw = wanted.count;
    int genai = 0, event_genai = 0;
    unsigned model_bits = 0;
    memset(slots, 0, sizeof(slots));
    memset(p, 0, sizeof(*p));
    p->start = pos;
    p->end = end;
    p->conv_n = -1;
    while (pos < end) {
        uint64_t field;
        unsigned wire;
        Py_ssize_t stop;
        if (read_tag(b, &pos, end, &field, &wire) < 0 || field == 0)
            return -1;
        if (wire == 2 && (field == 1 || field == 2 || field == 4 || field == 5 || field == 9 || field == 11)) {
            if (read_len(b, &pos, end, "span", field, &stop) < 0)
                return -1;
            if (field == 9) {
                kv_t kv;
                if (read_key_value(b, pos, stop, &kv) < 0)
                    return -1;
                if (!genai && (has_prefix(kv.key, kv.key_n, &genai_prefixes) ||
                               find_exact(kv.key, kv.key_n, &genai_keys) >= 0))
                    genai = 1;
                else if (!genai && model_bits != 3u)
                    model_bits |= model_call_bits(kv.key, kv.key_n);
                Py_ssize_t slot = find_exact(kv.key, kv.key_n, &wanted);
                if (slot >= 0) {
                    slots[slot].vstart = kv.vstart;
                    slots[slot].vend = kv.vend;
                    slots[slot].count = kv.count;
                    slots[slot].seen = 1;
                }
                if (is_mark(kv.key, kv.key_n))
                    p->slow = 1;
            } else if (field == 11) {
                int seen = 0, g = read_event(b, pos, stop, NULL, &seen);
                if (g < 0)
                    return -1;
                if (g)
                    event_genai = 1;
                if (seen)
                    p->slow = 1;
            } else if (field == 1) {
                p->trace = pos;
                p->trace_n = stop - pos;
            } else if (field == 2) {
                p->span = pos;
                p->span_n = stop - pos;
            } else if (field == 4) {
                p->parent_n = stop - pos;
            } else {
                p->name = pos;
                p->name_n = stop - pos;
            }
            pos = stop;
        } else if (skip_field(b, &pos, end, wire, field) < 0) {
            return -1;
        }
    }
    for (Py_ssize_t i = 0; i < nw; i++) {
        Py_ssize_t at = 0, n = 0;
        if (!slots[i].seen)
            continue;
        int kind = slots[i].count > 1 ? V_OTHER : slots[i].count ? classify_value(b, slots[i].vstart, slots[i].vend, &at, &n)
                                                                : V_NONE;
        if (kind == V_OTHER) {
            p->slow = 1;
        } else if (kind == V_STR && i == nw - 1) {
            p->has_op = 1;
            p->op = at;
            p->op_n = n;
        } else if (kind == V_STR && n > 0 && p->conv_n < 0) {
            p->conv = at;
            p->conv_n = n;
        }
    }
    p->genai = genai || event_genai || model_bits == 3u || has_prefix(b + p->name, p->name_n, &name_prefixes);
    return 0;
}

/* One span into the peeks (each_span's callback, without the GIL): -1 when malformed or out of memory. */
static int add_peek(const uint8_t *b, Py_ssize_t start, Py_ssize_t end, void *ctx) {
    peeks_t *out = ctx;
    if (out->n == out->cap) {
        Py_ssize_t cap = out->cap ? out->cap * 2 : 64;
        peek_t *v = PyMem_RawRealloc(out->v, (size_t)cap * sizeof(peek_t));
        if (!v)
            return -1;
        out->v = v;
        out->cap = cap;
    }
    if (peek_span(b, start, end, &out->v[out->n]) < 0)
        return -1;
    out->n++;
    return 0;
}

static int nonzero(const uint8_t *p, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++)
        if (p[i])
            return 1;
    return 0;
}

/* Decoded strings of one request, memoized by their bytes (a session's spans repeat its conversation id
 * and a few operation names); `keep` owns them. */
#define MEMO 16
typedef struct {
    const uint8_t *p[MEMO];
    Py_ssize_t n[MEMO];
    PyObject *s[MEMO];
    int next;
    PyObject *keep;
} memo_t;

static PyObject *memo_str(memo_t *m, const uint8_t *p, Py_ssize_t n) {
    for (int i = 0; i < MEMO; i++)
        if (m->s[i] && m->n[i] == n && memcmp(m->p[i], p, (size_t)n) == 0)
            return m->s[i];
    PyObject *s = PyUnicode_DecodeUTF8((const char *)p, n, NULL);
    if (!s || PyList_Append(m->keep, s) < 0) {
        Py_XDECREF(s);
        return NULL;
    }
    Py_DECREF(s); /* `keep` holds it */
    m->p[m->next] = p;
    m->n[m->next] = n;
    m->s[m->next] = s;
    m->next = (m->next + 1) % MEMO;
    return s;
}

/* One span as runs_python groups it (borrowed references). */
typedef struct {
    PyObject *conv, *op, *marks; /* conv NULL: none; op only for a root; marks NULL: none */
    Py_ssize_t trace;           /* index into the traces table */
    int root, genai;
} row_t;

typedef struct {
    const uint8_t *id; /* 16 bytes */
    PyObject *one;     /* the trace's one conversation id in the request (NULL: none, or several) */
    int several;
} trace_t;

typedef struct {
    Py_ssize_t trace, *ordinals, n, cap;
    size_t hash;
    PyObject *conv, *roots, *marks;
    int genai;
} run_t;

static int same_conv(PyObject *a, PyObject *b) {
    if (a == b)
        return 1;
    if (!a || !b)
        return 0;
    return PyObject_RichCompareBool(a, b, Py_EQ);
}

/* scan_runs(body) -> (spans, runs | None), or NotImplemented when the request is malformed (the caller
 * then runs scan(), which says what is wrong, and runs_python). The same as (len(scan(body)),
 * runs_python(scan(body))), with the wire walk done without the GIL and no object made per span. */
static PyObject *scan_runs(PyObject *self, PyObject *arg) {
    Py_buffer view;
    peeks_t ps = {0};
    memo_t memo = {0};
    row_t *rows = NULL;
    trace_t *traces = NULL;
    Py_ssize_t *slots = NULL, ntraces = 0, mask = 0;
    run_t *runs = NULL;
    Py_ssize_t nruns = 0, caps = 0;
    PyObject *slow = NULL, *out = NULL, *list = NULL;
    int rc;
    (void)self;
    if (!entry_type) {
        PyErr_SetString(PyExc_RuntimeError, "_spanindex.configure() was not called");
        return NULL;
    }
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const uint8_t *b = view.buf;
    Py_BEGIN_ALLOW_THREADS
    quiet = 1;
    rc = each_span(b, view.len, add_peek, &ps);
    quiet = 0;
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        out = Py_NewRef(Py_NotImplemented);
        goto done;
    }
    Py_ssize_t n = ps.n;
    if (!(memo.keep = PyList_New(0)) || !(slow = PyList_New(0)))
        goto done;
    rows = PyMem_Calloc((size_t)(n ? n : 1), sizeof(row_t));
    for (mask = 16; mask < 2 * n; mask *= 2)
        ;
    traces = PyMem_Calloc((size_t)(n ? n : 1), sizeof(trace_t));
    slots = PyMem_Malloc((size_t)mask * sizeof(Py_ssize_t));
    if (!rows || !traces || !slots) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < mask; i++)
        slots[i] = -1;
    mask -= 1;
    /* each span's values (the slow ones read by read_span, in wire order, so its errors come as scan's) */
    int valid = 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        peek_t *p = &ps.v[i];
        row_t *r = &rows[i];
        r->root = p->parent_n == 0;
        if (p->slow) {
            PyObject *entry = read_span(b, p->start, p->end);
            if (!entry || PyList_Append(slow, entry) < 0) {
                Py_XDECREF(entry);
                goto done;
            }
            Py_DECREF(entry); /* `slow` holds it */
            PyObject *conv = PyTuple_GET_ITEM(entry, 4), *marks = PyTuple_GET_ITEM(entry, 6);
            r->conv = conv == Py_None ? NULL : conv;
            r->op = PyTuple_GET_ITEM(entry, 5);
            r->marks = PyTuple_GET_SIZE(marks) ? marks : NULL;
            r->genai = PyTuple_GET_ITEM(entry, 3) == Py_True;
        } else {
            r->genai = p->genai;
            if (p->conv_n >= 0 && !(r->conv = memo_str(&memo, b + p->conv, p->conv_n)))
                goto done;
            if (r->root) {
                if (p->has_op) {
                    if (!(r->op = memo_str(&memo, b + p->op, p->op_n)))
                        goto done;
                } else {
                    const uint8_t *name = b + p->name;
                    Py_ssize_t head = 0;
                    while (head < p->name_n && name[head] != ' ')
                        head++;
                    Py_ssize_t k = find_exact(name, head, &operations);
                    r->op = k >= 0 ? PyTuple_GET_ITEM(operation_strs, k) : Py_None;
                }
            }
        }
        if (!(p->trace_n == 16 && nonzero(b + p->trace, 16) && p->span_n == 8 && nonzero(b + p->span, 8) &&
              (p->parent_n == 0 || p->parent_n == 8)))
            valid = 0;
    }
    if (!valid) {
        out = Py_BuildValue("(nO)", n, Py_None);
        goto done;
    }
    /* the traces (by their 16 bytes) and each one's one conversation id, for its spans that carry none */
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint8_t *id = b + ps.v[i].trace;
        /* the interpreter's keyed hash: trace ids are the sender's to choose, so no chosen set of them collides */
        size_t h = (size_t)_Py_HashBytes(id, 16);
        for (h &= (size_t)mask; slots[h] >= 0 && memcmp(traces[slots[h]].id, id, 16) != 0; h = (h + 1) & (size_t)mask)
            ;
        if (slots[h] < 0) {
            slots[h] = ntraces;
            traces[ntraces].id = id;
            ntraces++;
        }
        trace_t *t = &traces[slots[h]];
        row_t *r = &rows[i];
        r->trace = slots[h];
        if (r->conv && !t->several) {
            if (!t->one) {
                t->one = r->conv;
            } else {
                int same = same_conv(t->one, r->conv);
                if (same < 0)
                    goto done;
                if (!same) {
                    t->several = 1;
                    t->one = NULL;
                }
            }
        }
    }
    /* the runs, in order of first appearance, found by (trace, conversation) in a table of the same size
     * (at most one run per span); the slots are reused, the traces' are no longer needed */
    for (Py_ssize_t i = 0; i <= mask; i++)
        slots[i] = -1;
    Py_ssize_t last = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        row_t *r = &rows[i];
        trace_t *t = &traces[r->trace];
        PyObject *conv = r->conv ? r->conv : t->one;
        Py_ssize_t at = -1;
        if (last >= 0 && runs[last].trace == r->trace) {  /* a run's spans mostly come together */
            int same = same_conv(runs[last].conv, conv);
            if (same < 0)
                goto done;
            if (same)
                at = last;
        }
        size_t h = 0, probe = 0;
        if (at < 0) {
            Py_hash_t ch = conv ? PyObject_Hash(conv) : 0;
            if (ch == -1 && PyErr_Occurred())
                goto done;
            h = (size_t)ch ^ ((size_t)r->trace * (size_t)0x9E3779B97F4A7C15ULL);
            for (probe = h & (size_t)mask; slots[probe] >= 0; probe = (probe + 1) & (size_t)mask) {
                run_t *k = &runs[slots[probe]];
                if (k->trace != r->trace || k->hash != h)
                    continue;
                int same = same_conv(k->conv, conv);
                if (same < 0)
                    goto done;
                if (same) {
                    at = slots[probe];
                    break;
                }
            }
        }
        if (at < 0) {
            if (nruns == caps) {
                Py_ssize_t cap = caps ? caps * 2 : 16;
                run_t *v = PyMem_Realloc(runs, (size_t)cap * sizeof(run_t));
                if (!v) {
                    PyErr_NoMemory();
                    goto done;
                }
                runs = v;
                caps = cap;
            }
            at = nruns++;
            memset(&runs[at], 0, sizeof(run_t));
            runs[at].trace = r->trace;
            runs[at].conv = conv;
            runs[at].hash = h;
            slots[probe] = at;
        }
        run_t *run = &runs[at];
        last = at;
        if (run->n == run->cap) {
            Py_ssize_t cap = run->cap ? run->cap * 2 : 16;
            Py_ssize_t *v = PyMem_Realloc(run->ordinals, (size_t)cap * sizeof(Py_ssize_t));
            if (!v) {
                PyErr_NoMemory();
                goto done;
            }
            run->ordinals = v;
            run->cap = cap;
        }
        run->ordinals[run->n++] = i;
        if (r->root) {
            if (!run->roots && !(run->roots = PyList_New(0)))
                goto done;
            PyObject *root = Py_BuildValue("(nO)", i, r->op);
            int bad = !root || PyList_Append(run->roots, root) < 0;
            Py_XDECREF(root);
            if (bad)
                goto done;
        }
        if (r->marks) {
            if (!run->marks && !(run->marks = PyList_New(0)))
                goto done;
            if (PyList_SetSlice(run->marks, PY_SSIZE_T_MAX, PY_SSIZE_T_MAX, r->marks) < 0)
                goto done;
        }
        run->genai |= r->genai;
    }
    if (!(list = PyList_New(nruns)))
        goto done;
    for (Py_ssize_t k = 0; k < nruns; k++) {
        run_t *run = &runs[k];
        PyObject *ordinals = PyList_New(run->n);
        if (!ordinals)
            goto done;
        for (Py_ssize_t j = 0; j < run->n; j++) {
            PyObject *o = PyLong_FromSsize_t(run->ordinals[j]);
            if (!o) {
                Py_DECREF(ordinals);
                goto done;
            }
            PyList_SET_ITEM(ordinals, j, o);
        }
        PyObject *trace = hex_str(traces[run->trace].id, 16);
        PyObject *roots = run->roots ? PyList_AsTuple(run->roots) : PyTuple_New(0);
        PyObject *marks = run->marks ? PyList_AsTuple(run->marks) : PyTuple_New(0);
        PyObject *t = (trace && roots && marks) ? PyTuple_Pack(6, trace, run->conv ? run->conv : Py_None, ordinals,
                                                               roots, marks, run->genai ? Py_True : Py_False)
                                                : NULL;
        Py_XDECREF(trace);
        Py_XDECREF(roots);
        Py_XDECREF(marks);
        Py_DECREF(ordinals);
        if (!t)
            goto done;
        PyList_SET_ITEM(list, k, t);
    }
    out = Py_BuildValue("(nO)", n, list);
done:
    for (Py_ssize_t k = 0; k < nruns; k++) {
        PyMem_Free(runs[k].ordinals);
        Py_XDECREF(runs[k].roots);
        Py_XDECREF(runs[k].marks);
    }
    PyMem_Free(runs);
    PyMem_Free(rows);
    PyMem_Free(traces);
    PyMem_Free(slots);
    PyMem_RawFree(ps.v);
    Py_XDECREF(list);
    Py_XDECREF(slow);
    Py_XDECREF(memo.keep);
    PyBuffer_Release(&view);
    return out;
}

/* A tuple of bytes -> btable; the tuple is kept in table_refs so the pointers stay valid. */
static int load_table(PyObject *refs, PyObject *seq, btable *t, const char *name) {
    PyObject *tuple = PySequence_Tuple(seq);
    if (!tuple)
        return -1;
    Py_ssize_t n = PyTuple_GET_SIZE(tuple);
    bstr *items = PyMem_Calloc((size_t)(n ? n : 1), sizeof(bstr));
    if (!items) {
        Py_DECREF(tuple);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyTuple_GET_ITEM(tuple, i);
        if (!PyBytes_Check(item)) {
            PyMem_Free(items);
            Py_DECREF(tuple);
            PyErr_Format(PyExc_TypeError, "configure(%s=...): items must be bytes", name);
            return -1;
        }
        items[i].p = (const uint8_t *)PyBytes_AS_STRING(item);
        items[i].n = PyBytes_GET_SIZE(item);
    }
    int rc = PyList_Append(refs, tuple);
    Py_DECREF(tuple);
    if (rc < 0) {
        PyMem_Free(items);
        return -1;
    }
    PyMem_Free(t->items);
    t->items = items;
    t->count = n;
    memset(t->first, 0, sizeof(t->first));
    t->has_empty = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (items[i].n)
            t->first[items[i].p[0]] = 1;
        else
            t->has_empty = 1;
    }
    return 0;
}

static PyObject *configure(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"genai_prefixes", "genai_keys", "name_prefixes", "event_prefix", "wanted",
                             "mark_keys", "mark_prefixes", "operations", "entry_type", "error", "resolve", NULL};
    PyObject *gp, *gk, *np, *ep, *wk, *mk, *mp, *ops, *et, *err, *res;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOSOOOOOOO:configure", kwlist, &gp, &gk, &np, &ep, &wk, &mk,
                                     &mp, &ops, &et, &err, &res))
        return NULL;
    if (!PyType_Check(et) || !PyType_IsSubtype((PyTypeObject *)et, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "configure(entry_type=...): a tuple subclass (a NamedTuple) is needed");
        return NULL;
    }
    if (!PyCallable_Check(res) || !PyType_Check(err)) {
        PyErr_SetString(PyExc_TypeError, "configure(): error must be a class and resolve a callable");
        return NULL;
    }
    PyObject *refs = PyList_New(0);
    if (!refs)
        return NULL;
    if (load_table(refs, gp, &genai_prefixes, "genai_prefixes") < 0 ||
        load_table(refs, gk, &genai_keys, "genai_keys") < 0 ||
        load_table(refs, np, &name_prefixes, "name_prefixes") < 0 || load_table(refs, wk, &wanted, "wanted") < 0 ||
        load_table(refs, mk, &mark_keys, "mark_keys") < 0 ||
        load_table(refs, mp, &mark_prefixes, "mark_prefixes") < 0 ||
        load_table(refs, ops, &operations, "operations") < 0) {
        Py_DECREF(refs);
        return NULL;
    }
    if (wanted.count < 1 || wanted.count > MAX_WANTED) {
        Py_DECREF(refs);
        PyErr_Format(PyExc_ValueError, "configure(wanted=...): 1 to %d keys (the operation key last)", MAX_WANTED);
        return NULL;
    }
    PyObject *strs = PyTuple_New(operations.count);
    if (!strs) {
        Py_DECREF(refs);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < operations.count; i++) {
        PyObject *s = PyUnicode_DecodeASCII((const char *)operations.items[i].p, operations.items[i].n, NULL);
        if (!s) {
            Py_DECREF(strs);
            Py_DECREF(refs);
            return NULL;
        }
        PyTuple_SET_ITEM(strs, i, s);
    }
    if (PyList_Append(refs, ep) < 0) {
        Py_DECREF(strs);
        Py_DECREF(refs);
        return NULL;
    }
    event_prefix.p = (const uint8_t *)PyBytes_AS_STRING(ep);
    event_prefix.n = PyBytes_GET_SIZE(ep);
    Py_XSETREF(table_refs, refs);
    Py_XSETREF(operation_strs, strs);
    Py_XSETREF(entry_type, (PyTypeObject *)Py_NewRef(et));
    Py_XSETREF(error_cls, Py_NewRef(err));
    Py_XSETREF(resolve_fn, Py_NewRef(res));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_O, "scan(body) -> list[SpanEntry]: every span of a serialized OTLP traces request."},
    {"scan_runs", scan_runs, METH_O, "scan_runs(body) -> (spans, runs or None), or NotImplemented when malformed."},
    {"configure", (PyCFunction)(void (*)(void))configure, METH_VARARGS | METH_KEYWORDS,
     "configure(...): the key tables, the entry type, the error class and the value resolver."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_spanindex", "The native span index (see wt_otel/ingest/spanindex.py).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__spanindex(void) { return PyModule_Create(&module); }
