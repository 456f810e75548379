/*
 * The record walk of rt_appliance.log.scan, compiled: the per-record loop that
 * every reader, the push server, the push client and the sequencer run.
 *
 * walk(buf, start, limit, verify, decode, max_payload)
 *     -> (offsets, timestamps_ns, ids, end, failed)
 *
 * Walks whole records of buf from start (record layout: docs/LOG_FORMAT.md):
 * at most limit of them, stopping at the first record that does not lie wholly
 * in the buffer or whose length exceeds max_payload. With verify, it also stops
 * at the first record whose CRC-32 (zlib's) does not match or whose kind, flags
 * and reserved bytes are not all zero (a message record); failed is then True.
 * offsets are the records' offsets in buf, end is where the last one ends
 * (start if none). timestamps_ns and ids are lists with decode and verify,
 * None otherwise. Classifying where the walk stopped is left to the caller.
 *
 * columns(buf, start, limit, max_payload)
 *     -> (count, offsets, timestamps_ns, ids, value_offsets, data, end, failed)
 *
 * The same walk, always verifying, for columnar readers (the Spark source): the
 * records' offsets, timestamps and ids as packed native int64 arrays (bytes),
 * their payloads copied back to back into data, and value_offsets (count + 1
 * int32s) where each payload starts in data: Arrow's binary layout. Nothing is
 * built per record, so numpy and pyarrow take the columns without a copy.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <zlib.h>

#define RECORD_HEADER 28

static inline uint32_t le32(const unsigned char *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v; /* the format is little-endian, as is every platform this runs on */
}

static inline int64_t le64(const unsigned char *p) {
    int64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* One step of a walk: the payload length of the record at off, or -1 where the
 * walk stops (the record is not wholly in the buffer or is too long), or -2 where
 * it fails verification (CRC, or kind/flags/reserved not zero). */
static inline Py_ssize_t step(const unsigned char *buf, Py_ssize_t n, Py_ssize_t off, int verify,
                              Py_ssize_t max_payload) {
    if (off > n - RECORD_HEADER)
        return -1;
    const unsigned char *rec = buf + off;
    uint32_t length = le32(rec + 4);
    if ((Py_ssize_t)length > max_payload || (Py_ssize_t)length > n - off - RECORD_HEADER)
        return -1;
    if (verify) {
        uint32_t crc = (uint32_t)crc32(0L, rec + 4, (uInt)(RECORD_HEADER - 4 + length));
        if (crc != le32(rec) || le32(rec + 8) != 0)
            return -2;
    }
    return (Py_ssize_t)length;
}

static int append_int(PyObject *list, long long value) {
    PyObject *item = PyLong_FromLongLong(value);
    if (item == NULL)
        return -1;
    int rc = PyList_Append(list, item);
    Py_DECREF(item);
    return rc;
}

static PyObject *walk(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start, limit, max_payload;
    int verify, decode;
    if (!PyArg_ParseTuple(args, "y*nnppn", &view, &start, &limit, &verify, &decode, &max_payload))
        return NULL;
    const unsigned char *buf = view.buf;
    const Py_ssize_t n = view.len;
    int collect = verify && decode;
    PyObject *offsets = PyList_New(0);
    PyObject *stamps = collect ? PyList_New(0) : Py_NewRef(Py_None);
    PyObject *ids = collect ? PyList_New(0) : Py_NewRef(Py_None);
    if (offsets == NULL || stamps == NULL || ids == NULL)
        goto error;
    Py_ssize_t off = start < 0 ? 0 : start, count = 0;
    int failed = 0;
    while (count < limit) {
        Py_ssize_t length = step(buf, n, off, verify, max_payload);
        if (length < 0) {
            failed = length == -2;
            break;
        }
        if (collect && (append_int(stamps, le64(buf + off + 12)) < 0 ||
                        append_int(ids, le64(buf + off + 20)) < 0))
            goto error;
        if (append_int(offsets, off) < 0)
            goto error;
        off += RECORD_HEADER + length;
        count++;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(NNNnO)", offsets, stamps, ids, off, failed ? Py_True : Py_False);
error:
    PyBuffer_Release(&view);
    Py_XDECREF(offsets);
    Py_XDECREF(stamps);
    Py_XDECREF(ids);
    return NULL;
}

static PyObject *columns(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start, limit, max_payload;
    if (!PyArg_ParseTuple(args, "y*nnn", &view, &start, &limit, &max_payload))
        return NULL;
    const unsigned char *buf = view.buf;
    const Py_ssize_t n = view.len;
    /* Pass 1: walk and verify, counting records and payload bytes. */
    Py_ssize_t first = start < 0 ? 0 : start, off = first, count = 0, data_bytes = 0;
    int failed = 0;
    while (count < limit) {
        Py_ssize_t length = step(buf, n, off, 1, max_payload);
        if (length < 0) {
            failed = length == -2;
            break;
        }
        data_bytes += length;
        off += RECORD_HEADER + length;
        count++;
    }
    const Py_ssize_t end = off;
    if (data_bytes > INT32_MAX) { /* Arrow's binary offsets are int32: callers bound chunks */
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "payloads of one call exceed 2 GiB");
        return NULL;
    }
    PyObject *offsets = PyBytes_FromStringAndSize(NULL, count * 8);
    PyObject *stamps = PyBytes_FromStringAndSize(NULL, count * 8);
    PyObject *ids = PyBytes_FromStringAndSize(NULL, count * 8);
    PyObject *starts = PyBytes_FromStringAndSize(NULL, (count + 1) * 4);
    PyObject *data = PyBytes_FromStringAndSize(NULL, data_bytes);
    if (!offsets || !stamps || !ids || !starts || !data) {
        Py_XDECREF(offsets);
        Py_XDECREF(stamps);
        Py_XDECREF(ids);
        Py_XDECREF(starts);
        Py_XDECREF(data);
        PyBuffer_Release(&view);
        return NULL;
    }
    /* Pass 2: the records are known good; copy their fields and payloads out. */
    int64_t *o = (int64_t *)PyBytes_AS_STRING(offsets);
    int64_t *t = (int64_t *)PyBytes_AS_STRING(stamps);
    int64_t *d = (int64_t *)PyBytes_AS_STRING(ids);
    int32_t *v = (int32_t *)PyBytes_AS_STRING(starts);
    char *out = PyBytes_AS_STRING(data);
    int32_t at = 0;
    off = first;
    for (Py_ssize_t i = 0; i < count; i++) {
        const unsigned char *rec = buf + off;
        uint32_t length = le32(rec + 4);
        o[i] = off;
        t[i] = le64(rec + 12);
        d[i] = le64(rec + 20);
        v[i] = at;
        memcpy(out + at, rec + RECORD_HEADER, length);
        at += (int32_t)length;
        off += RECORD_HEADER + (Py_ssize_t)length;
    }
    v[count] = at;
    PyBuffer_Release(&view);
    return Py_BuildValue("(nNNNNNnO)", count, offsets, stamps, ids, starts, data, end,
                         failed ? Py_True : Py_False);
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS, "Walk (and check) the whole records of a buffer."},
    {"columns", columns, METH_VARARGS, "Walk and check records; their fields as packed columns."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_walk", "Compiled record walk for rt_appliance.log.scan.", -1,
    methods,
};

PyMODINIT_FUNC PyInit__walk(void) { return PyModule_Create(&module); }
