/* Strict UTF-8 validation, shared by the two optional extensions (_wirecheck.c, _spanindex.c): what
 * PyUnicode_DecodeUTF8 and upb accept (RFC 3629: no overlongs, no surrogates, nothing past U+10FFFF).
 * No Python: both call it without the GIL. */
#ifndef WT_OTEL_UTF8_H
#define WT_OTEL_UTF8_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Strict UTF-8 (RFC 3629), eight ASCII bytes at a time where it can. */
static inline int utf8_valid(const uint8_t *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        if (i + 32 <= n) { /* most text is ASCII: four words, one branch */
            uint64_t w0, w1, w2, w3;
            memcpy(&w0, s + i, 8);
            memcpy(&w1, s + i + 8, 8);
            memcpy(&w2, s + i + 16, 8);
            memcpy(&w3, s + i + 24, 8);
            if (!((w0 | w1 | w2 | w3) & 0x8080808080808080ULL)) {
                i += 32;
                continue;
            }
        }
        if (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (!(w & 0x8080808080808080ULL)) {
                i += 8;
                continue;
            }
        }
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        Py_ssize_t len;
        uint8_t lo = 0x80, hi = 0xBF; /* the allowed range of the second byte */
        if (c >= 0xC2 && c <= 0xDF) {
            len = 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            if (c == 0xE0)
                lo = 0xA0; /* overlong */
            else if (c == 0xED)
                hi = 0x9F; /* surrogates */
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            if (c == 0xF0)
                lo = 0x90; /* overlong */
            else if (c == 0xF4)
                hi = 0x8F; /* past U+10FFFF */
        } else {
            return 0;
        }
        if (i + len > n || s[i + 1] < lo || s[i + 1] > hi)
            return 0;
        for (Py_ssize_t k = 2; k < len; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xBF)
                return 0;
        i += len;
    }
    return 1;
}

#endif
