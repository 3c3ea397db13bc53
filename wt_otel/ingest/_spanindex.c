/* The native span index: the same walk as `scan_wire` in spanindex.py, with identical results
 * (the tests compare it with both Python implementations on every producer fixture and on fuzzed
 * bytes). Read that module first: it documents what an entry holds and which inputs are errors; this
 * file mirrors the wire walk function by function (_fields, _skip, _skip_group, _value, _key_value,
 * _event, _span) and raises the same messages.
 *
 * The tables (GenAI key prefixes, ...) are not compiled in: spanindex.py passes them to configure(),
 * so wt_otel.ingest.keys stays the one place they are written. Memory: the walk has a fixed depth,
 * never recurses, and allocates per span (the entry) and per level (offset arrays), both bounded
 * by the input's length. The GIL is held throughout (it builds Python objects as it goes).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

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

static int fail(const char *fmt, ...) {
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
        Py_ssize_t *v = PyMem_Realloc(s->v, (size_t)cap * sizeof(Py_ssize_t));
        if (!v) {
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
 * appended to the list *marks (created on first use). */
static int read_event(const uint8_t *b, Py_ssize_t pos, Py_ssize_t end, PyObject **marks) {
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
                if (is_mark(kv.key, kv.key_n) && add_mark(b, &kv, &own) < 0)
                    goto error;
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
                int g = read_event(b, pos, stop, &event_marks);
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
    int is_genai = genai || event_genai || has_prefix(name, name_n, &name_prefixes);
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

/* ------------------------------------------------------------------ module functions */

static PyObject *scan(PyObject *self, PyObject *arg) {
    Py_buffer view;
    spans_t rs = {0}, ss = {0}, sp = {0};
    PyObject *out = NULL;
    (void)self;
    if (!entry_type) {
        PyErr_SetString(PyExc_RuntimeError, "_spanindex.configure() was not called");
        return NULL;
    }
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const uint8_t *b = view.buf;
    if (!(out = PyList_New(0)))
        goto done;
    if (collect_fields(b, 0, view.len, 1, "the request", &rs) < 0)
        goto fail;
    for (Py_ssize_t i = 0; i < rs.n; i += 2) {
        if (collect_fields(b, rs.v[i], rs.v[i + 1], 2, "a resource_spans", &ss) < 0)
            goto fail;
        for (Py_ssize_t j = 0; j < ss.n; j += 2) {
            if (collect_fields(b, ss.v[j], ss.v[j + 1], 2, "a scope_spans", &sp) < 0)
                goto fail;
            for (Py_ssize_t k = 0; k < sp.n; k += 2) {
                PyObject *entry = read_span(b, sp.v[k], sp.v[k + 1]);
                if (!entry)
                    goto fail;
                int rc = PyList_Append(out, entry);
                Py_DECREF(entry);
                if (rc < 0)
                    goto fail;
            }
        }
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    PyMem_Free(rs.v);
    PyMem_Free(ss.v);
    PyMem_Free(sp.v);
    PyBuffer_Release(&view);
    return out;
}

/* ------------------------------------------------------------------ runs: `runs_python`, in C */

/* A W3C id as the entries hold it: `n` lowercase hex digits, not all zero (what _entry_problem checks). */
static int valid_id(PyObject *s, Py_ssize_t n) {
    if (!PyUnicode_CheckExact(s) || PyUnicode_GET_LENGTH(s) != n || PyUnicode_KIND(s) != PyUnicode_1BYTE_KIND)
        return 0;
    const Py_UCS1 *d = PyUnicode_1BYTE_DATA(s);
    for (Py_ssize_t i = 0; i < n; i++)
        if (d[i] != '0')
            return 1;
    return 0;
}

/* runs(entries) -> list of (trace_id, conversation, ordinals, roots, marks, genai) | None: see runs_python. */
static PyObject *runs(PyObject *self, PyObject *entries) {
    (void)self;
    if (!PyList_CheckExact(entries)) {
        PyErr_SetString(PyExc_TypeError, "runs(entries): a list of SpanEntry");
        return NULL;
    }
    PyObject *index = PyDict_New(), *order = PyList_New(0), *convs = PyDict_New(), *out = NULL;
    PyObject *last = NULL, *last_trace = NULL, *last_conv = NULL; /* borrowed: the run of the previous span */
    if (!index || !order || !convs)
        goto done;
    Py_ssize_t count = PyList_GET_SIZE(entries);
    /* each trace's one conversation id in the request (Py_Ellipsis: several), for its spans that carry none */
    for (Py_ssize_t n = 0; n < count; n++) {
        PyObject *e = PyList_GET_ITEM(entries, n);
        if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) != 7) {
            PyErr_SetString(PyExc_TypeError, "runs(entries): a list of SpanEntry");
            goto done;
        }
        PyObject *trace = PyTuple_GET_ITEM(e, 0), *conv = PyTuple_GET_ITEM(e, 4);
        if (conv == Py_None || !valid_id(trace, 32))
            continue;
        PyObject *have = PyDict_GetItemWithError(convs, trace);
        if (!have && PyErr_Occurred())
            goto done;
        int same = have ? (have == Py_Ellipsis ? 1 : PyObject_RichCompareBool(have, conv, Py_EQ)) : 0;
        if (same < 0 || (!same && PyDict_SetItem(convs, trace, have ? Py_Ellipsis : conv) < 0))
            goto done;
    }
    for (Py_ssize_t n = 0; n < count; n++) {
        PyObject *e = PyList_GET_ITEM(entries, n);
        PyObject *trace = PyTuple_GET_ITEM(e, 0), *parent = PyTuple_GET_ITEM(e, 2), *conv = PyTuple_GET_ITEM(e, 4);
        if (conv == Py_None) {
            PyObject *one = valid_id(trace, 32) ? PyDict_GetItemWithError(convs, trace) : NULL;
            if (!one && PyErr_Occurred())
                goto done;
            if (one && one != Py_Ellipsis)
                conv = one;
        }
        if (!valid_id(trace, 32) || !valid_id(PyTuple_GET_ITEM(e, 1), 16) ||
            (parent != Py_None && !(PyUnicode_CheckExact(parent) && PyUnicode_GET_LENGTH(parent) == 16))) {
            Py_CLEAR(order);
            out = Py_NewRef(Py_None);
            goto done;
        }
        PyObject *run = NULL;
        if (last) {
            int same = PyObject_RichCompareBool(trace, last_trace, Py_EQ);
            if (same < 0)
                goto done;
            if (same) {
                same = PyObject_RichCompareBool(conv, last_conv, Py_EQ);
                if (same < 0)
                    goto done;
            }
            if (same)
                run = last;
        }
        if (!run) {
            PyObject *key = PyTuple_Pack(2, trace, conv);
            if (!key)
                goto done;
            run = PyDict_GetItemWithError(index, key);
            if (!run) {
                if (PyErr_Occurred()) {
                    Py_DECREF(key);
                    goto done;
                }
                PyObject *ords = PyList_New(0), *roots = PyList_New(0), *marks = PyList_New(0);
                run = (ords && roots && marks) ? PyList_New(6) : NULL;
                if (!run) {
                    Py_XDECREF(ords);
                    Py_XDECREF(roots);
                    Py_XDECREF(marks);
                    Py_DECREF(key);
                    goto done;
                }
                PyList_SET_ITEM(run, 0, Py_NewRef(trace));
                PyList_SET_ITEM(run, 1, Py_NewRef(conv));
                PyList_SET_ITEM(run, 2, ords);
                PyList_SET_ITEM(run, 3, roots);
                PyList_SET_ITEM(run, 4, marks);
                PyList_SET_ITEM(run, 5, Py_NewRef(Py_False));
                int rc = PyDict_SetItem(index, key, run) < 0 || PyList_Append(order, run) < 0;
                Py_DECREF(run); /* index and order hold it */
                if (rc) {
                    Py_DECREF(key);
                    goto done;
                }
            }
            Py_DECREF(key);
        }
        last = run;
        last_trace = trace;
        last_conv = conv;
        PyObject *ordinal = PyLong_FromSsize_t(n);
        if (!ordinal || PyList_Append(PyList_GET_ITEM(run, 2), ordinal) < 0) {
            Py_XDECREF(ordinal);
            goto done;
        }
        if (parent == Py_None) {
            PyObject *root = PyTuple_Pack(2, ordinal, PyTuple_GET_ITEM(e, 5));
            int rc = !root || PyList_Append(PyList_GET_ITEM(run, 3), root) < 0;
            Py_XDECREF(root);
            if (rc) {
                Py_DECREF(ordinal);
                goto done;
            }
        }
        Py_DECREF(ordinal);
        PyObject *marks = PyTuple_GET_ITEM(e, 6);
        if (PyTuple_Check(marks) && PyTuple_GET_SIZE(marks)) {
            PyObject *all = PyList_GET_ITEM(run, 4);
            if (PyList_SetSlice(all, PY_SSIZE_T_MAX, PY_SSIZE_T_MAX, marks) < 0)
                goto done;
        }
        if (PyObject_IsTrue(PyTuple_GET_ITEM(e, 3)) == 1)
            PyList_SetItem(run, 5, Py_NewRef(Py_True));
    }
    out = PyList_New(PyList_GET_SIZE(order));
    if (!out)
        goto done;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(order); i++) {
        PyObject *run = PyList_GET_ITEM(order, i);
        PyObject *roots = PyList_AsTuple(PyList_GET_ITEM(run, 3)), *marks = PyList_AsTuple(PyList_GET_ITEM(run, 4));
        PyObject *t = (roots && marks) ? PyTuple_Pack(6, PyList_GET_ITEM(run, 0), PyList_GET_ITEM(run, 1),
                                                      PyList_GET_ITEM(run, 2), roots, marks, PyList_GET_ITEM(run, 5))
                                       : NULL;
        Py_XDECREF(roots);
        Py_XDECREF(marks);
        if (!t) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, i, t);
    }
done:
    Py_XDECREF(index);
    Py_XDECREF(order);
    Py_XDECREF(convs);
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
    {"runs", runs, METH_O, "runs(entries) -> the spans of each trace and conversation id (see runs_python)."},
    {"configure", (PyCFunction)(void (*)(void))configure, METH_VARARGS | METH_KEYWORDS,
     "configure(...): the key tables, the entry type, the error class and the value resolver."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_spanindex", "The native span index (see wt_otel/ingest/spanindex.py).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__spanindex(void) { return PyModule_Create(&module); }
