/*
 * The two hot loops of frames.py's FrameReader, in C (optional: frames.py works without it).
 *
 * Python spends ~1-2 us per frame on the header arithmetic, the slicing and the unmasking;
 * a pipelining client sends tens of thousands of small frames a second, and a fragmenting
 * one a 4 MiB message as 65,536 frames of 64 bytes. Each function below consumes a run of
 * the common frames only and stops at the first frame it does not handle (or that is not
 * complete yet), leaving it to the Python reader, which owns every rule and every error:
 *
 *   texts(source, offset, max_frame, events, Message) -> offset
 *       final, masked, unfragmented text frames (first byte 0x81) of at most max_frame
 *       bytes whose payload is ASCII: appends Message(payload, True) to events.
 *   continuations(source, offset, max_frame, budget) -> (payload, offset)
 *       non-final, masked continuation frames (first byte 0x00) of at most max_frame bytes
 *       and together at most budget bytes: returns their unmasked payloads joined.
 *
 * and two helpers for a large frame received into a buffer of its own:
 *
 *   unmask_in_place(buffer, mask) -> whether the unmasked payload is ASCII
 *   isascii(buffer) -> bool
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* One masked frame's header at buf[pos..] (mask key included), or 0 if it is not complete. */
static int parse_header(const unsigned char *buf, Py_ssize_t pos, Py_ssize_t size,
                        Py_ssize_t *payload_at, uint64_t *length) {
    if (size - pos < 2) return 0;
    unsigned char second = buf[pos + 1];
    uint64_t len = second & 0x7F;
    Py_ssize_t at = pos + 2;
    if (len == 126) {
        if (size - at < 2) return 0;
        len = ((uint64_t)buf[at] << 8) | buf[at + 1];
        at += 2;
    } else if (len == 127) {
        if (size - at < 8) return 0;
        len = 0;
        for (int i = 0; i < 8; i++) len = (len << 8) | buf[at + i];
        at += 8;
    }
    if (size - at < 4) return 0; /* the mask key */
    *payload_at = at + 4;
    *length = len;
    return 1;
}

/* dst[i] = src[i] ^ mask[i % 4], eight bytes at a time. */
static void unmask(unsigned char *dst, const unsigned char *src, Py_ssize_t n,
                   const unsigned char *mask) {
    uint32_t m32;
    memcpy(&m32, mask, 4);
    uint64_t m64 = ((uint64_t)m32 << 32) | m32;
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t word;
        memcpy(&word, src + i, 8);
        word ^= m64;
        memcpy(dst + i, &word, 8);
    }
    for (; i < n; i++) dst[i] = src[i] ^ mask[i & 3];
}

static int is_ascii(const unsigned char *data, Py_ssize_t n) {
    uint64_t acc = 0;
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t word;
        memcpy(&word, data + i, 8);
        acc |= word;
    }
    for (; i < n; i++) acc |= data[i];
    return (acc & 0x8080808080808080ULL) == 0;
}

static PyObject *texts(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t offset, max_frame;
    PyObject *events, *message_type;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*nnO!O!", &view, &offset, &max_frame, &PyList_Type, &events,
                          &PyType_Type, &message_type))
        return NULL;
    PyTypeObject *type = (PyTypeObject *)message_type;
    if (!PyType_IsSubtype(type, &PyTuple_Type)) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_TypeError, "Message must be a tuple type");
        return NULL;
    }
    const unsigned char *buf = view.buf;
    Py_ssize_t size = view.len;
    while (offset >= 0 && offset < size && buf[offset] == 0x81) {
        Py_ssize_t at;
        uint64_t length;
        if (!parse_header(buf, offset, size, &at, &length)) break;
        if (!(buf[offset + 1] & 0x80) || length > (uint64_t)max_frame) break;
        if ((uint64_t)(size - at) < length) break;
        PyObject *payload = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)length);
        if (payload == NULL) goto error;
        unsigned char *out = (unsigned char *)PyBytes_AS_STRING(payload);
        unmask(out, buf + at, (Py_ssize_t)length, buf + at - 4);
        if (!is_ascii(out, (Py_ssize_t)length)) {
            Py_DECREF(payload);
            break; /* the Python reader validates UTF-8 */
        }
        PyObject *message = type->tp_alloc(type, 2);
        if (message == NULL) {
            Py_DECREF(payload);
            goto error;
        }
        PyTuple_SET_ITEM(message, 0, payload);
        Py_INCREF(Py_True);
        PyTuple_SET_ITEM(message, 1, Py_True);
        int failed = PyList_Append(events, message);
        Py_DECREF(message);
        if (failed) goto error;
        offset = at + (Py_ssize_t)length;
    }
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(offset);
error:
    PyBuffer_Release(&view);
    return NULL;
}

static PyObject *continuations(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t offset, max_frame, budget;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*nnn", &view, &offset, &max_frame, &budget)) return NULL;
    const unsigned char *buf = view.buf;
    Py_ssize_t size = view.len;
    /* First pass: how many frames, how many payload bytes. */
    Py_ssize_t end = offset, total = 0;
    while (end >= 0 && end < size && buf[end] == 0x00) {
        Py_ssize_t at;
        uint64_t length;
        if (!parse_header(buf, end, size, &at, &length)) break;
        if (!(buf[end + 1] & 0x80) || length > (uint64_t)max_frame) break;
        if ((uint64_t)(budget - total) < length || (uint64_t)(size - at) < length) break;
        total += (Py_ssize_t)length;
        end = at + (Py_ssize_t)length;
    }
    PyObject *payload = PyBytes_FromStringAndSize(NULL, total);
    if (payload == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(payload);
    Py_ssize_t pos = offset;
    while (pos < end) {
        Py_ssize_t at;
        uint64_t length;
        parse_header(buf, pos, size, &at, &length);
        unmask(out, buf + at, (Py_ssize_t)length, buf + at - 4);
        out += length;
        pos = at + (Py_ssize_t)length;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(Nn)", payload, end);
}

static PyObject *unmask_in_place(PyObject *self, PyObject *args) {
    Py_buffer view, mask;
    (void)self;
    if (!PyArg_ParseTuple(args, "w*y*", &view, &mask)) return NULL;
    if (mask.len != 4) {
        PyBuffer_Release(&view);
        PyBuffer_Release(&mask);
        PyErr_SetString(PyExc_ValueError, "the mask key has 4 bytes");
        return NULL;
    }
    unsigned char key[4];
    memcpy(key, mask.buf, 4);
    unmask(view.buf, view.buf, view.len, key);
    int ascii = is_ascii(view.buf, view.len);
    PyBuffer_Release(&view);
    PyBuffer_Release(&mask);
    return PyBool_FromLong(ascii);
}

static PyObject *py_isascii(PyObject *self, PyObject *args) {
    Py_buffer view;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*", &view)) return NULL;
    int ascii = is_ascii(view.buf, view.len);
    PyBuffer_Release(&view);
    return PyBool_FromLong(ascii);
}

static PyMethodDef methods[] = {
    {"unmask_in_place", unmask_in_place, METH_VARARGS,
     "XOR a writable buffer with a 4-byte mask key in place; whether the result is ASCII."},
    {"isascii", py_isascii, METH_VARARGS, "Whether a buffer holds ASCII only."},
    {"texts", texts, METH_VARARGS, "Consume complete final masked ASCII text frames."},
    {"continuations", continuations, METH_VARARGS,
     "Consume complete non-final masked continuation frames; their payloads joined."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "executor.transports._frames",
    "C loops of the WebSocket frame reader (optional)", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__frames(void) { return PyModule_Create(&module); }
