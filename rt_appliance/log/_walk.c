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
    while (count < limit && off <= n - RECORD_HEADER) {
        const unsigned char *rec = buf + off;
        uint32_t length = le32(rec + 4);
        if ((Py_ssize_t)length > max_payload || (Py_ssize_t)length > n - off - RECORD_HEADER)
            break;
        if (verify) {
            uint32_t crc = (uint32_t)crc32(0L, rec + 4, (uInt)(RECORD_HEADER - 4 + length));
            if (crc != le32(rec) || le32(rec + 8) != 0) {
                failed = 1;
                break;
            }
            if (collect && (append_int(stamps, le64(rec + 12)) < 0 ||
                            append_int(ids, le64(rec + 20)) < 0))
                goto error;
        }
        if (append_int(offsets, off) < 0)
            goto error;
        off += RECORD_HEADER + (Py_ssize_t)length;
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

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS, "Walk (and check) the whole records of a buffer."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_walk", "Compiled record walk for rt_appliance.log.scan.", -1,
    methods,
};

PyMODINIT_FUNC PyInit__walk(void) { return PyModule_Create(&module); }
