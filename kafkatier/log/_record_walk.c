/* The record walk of kafkatier.log.log_validator._walk, compiled.
 *
 * walk(buf, pos, end, count, base_ts) walks `count` record-format-v2 records in buf[pos:end] and returns
 * (min timestamp, its index, max timestamp, its index, [indexes of records without a key]) exactly as the
 * Python walk does for a batch it accepts. For anything the Python walk refuses, and for the rare inputs this
 * code does not handle itself (a 10-byte varlong wider than 64 bits, a timestamp outside int64), it returns
 * None and the caller runs the Python walk, which raises the error. So this module never decides an error
 * message: it only accepts, and it accepts exactly what the Python walk accepts.
 *
 * Optional: setup.py builds it when a compiler is there; without it the pure-Python walk runs.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* A zigzag varint at *p (bounded by lim), at most up to shift max_shift as the Python _varint reads it.
 * 0 on success, -1 when the Python walk would refuse or the value needs more than 64 bits (bail). */
static int read_varint(const unsigned char *buf, Py_ssize_t *p, Py_ssize_t lim, int max_shift, int64_t *out)
{
    Py_ssize_t q = *p;
    if (q >= lim)
        return -1;
    unsigned char b = buf[q++];
    uint64_t v = b & 0x7F;
    int shift = 0;
    while (b >= 0x80) {
        shift += 7;
        if (shift > max_shift)
            return -1;
        if (q >= lim)
            return -1;
        b = buf[q++];
        if (shift == 63 && (b & 0x7F) > 1)
            return -1; /* wider than 64 bits: leave it to the Python walk */
        v |= (uint64_t)(b & 0x7F) << shift;
    }
    *p = q;
    *out = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
    return 0;
}

/* The record length varint of the Python walk: continuation bytes up to shift 28. */
static int read_length(const unsigned char *buf, Py_ssize_t *p, Py_ssize_t lim, int64_t *out)
{
    return read_varint(buf, p, lim, 28, out);
}

static PyObject *walk(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos, end;
    long long count_ll, base_ts_ll;
    if (!PyArg_ParseTuple(args, "y*nnLL", &view, &pos, &end, &count_ll, &base_ts_ll))
        return NULL;
    const unsigned char *buf = (const unsigned char *)view.buf;
    PyObject *keyless = PyList_New(0);
    if (keyless == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    int64_t base_ts = (int64_t)base_ts_ll;
    int64_t min_ts = 0, max_ts = 0;
    long long min_i = 0, max_i = 0;
    int have_ts = 0;
    long long i = 0;
    if (pos < 0 || end > view.len || pos > end)
        goto bail;
    while (i < count_ll) {
        if (pos >= end)
            goto bail;
        int64_t length;
        Py_ssize_t p = pos;
        if (read_length(buf, &p, end, &length) < 0)
            goto bail;
        pos = p;
        if (length < 1 || length > end - pos)
            goto bail;
        Py_ssize_t rec_end = pos + (Py_ssize_t)length;
        if (buf[pos])
            goto bail; /* attributes must be 0 */
        p = pos + 1;
        int64_t ts_delta, off_delta, klen, vlen;
        if (read_varint(buf, &p, rec_end, 63, &ts_delta) < 0)
            goto bail;
        if (read_varint(buf, &p, rec_end, 28, &off_delta) < 0 || off_delta != i)
            goto bail;
        if (read_varint(buf, &p, rec_end, 28, &klen) < 0)
            goto bail;
        if (klen >= 0) {
            if (klen > rec_end - p)
                goto bail;
            p += (Py_ssize_t)klen;
        } else if (klen == -1) {
            PyObject *idx = PyLong_FromLongLong(i);
            if (idx == NULL || PyList_Append(keyless, idx) < 0) {
                Py_XDECREF(idx);
                goto fail;
            }
            Py_DECREF(idx);
        } else {
            goto bail;
        }
        if (read_varint(buf, &p, rec_end, 28, &vlen) < 0)
            goto bail;
        if (vlen >= 0) {
            if (vlen > rec_end - p)
                goto bail;
            p += (Py_ssize_t)vlen;
        } else if (vlen < -1) {
            goto bail;
        }
        if (p >= rec_end)
            goto bail;
        if (buf[p] == 0) {
            p += 1;
        } else {
            int64_t nheaders;
            if (read_varint(buf, &p, rec_end, 28, &nheaders) < 0 || nheaders < 0)
                goto bail;
            for (int64_t h = 0; h < nheaders; h++) {
                int64_t hk, hv;
                if (p >= rec_end)
                    goto bail;
                if (read_varint(buf, &p, rec_end, 28, &hk) < 0 || hk < 0 || hk > rec_end - p)
                    goto bail;
                PyObject *key = PyUnicode_DecodeUTF8((const char *)buf + p, (Py_ssize_t)hk, "strict");
                if (key == NULL) {
                    PyErr_Clear();
                    goto bail;
                }
                Py_DECREF(key);
                p += (Py_ssize_t)hk;
                if (read_varint(buf, &p, rec_end, 28, &hv) < 0 || hv < -1)
                    goto bail;
                if (hv > 0) {
                    if (hv > rec_end - p)
                        goto bail;
                    p += (Py_ssize_t)hv;
                }
            }
        }
        if (p != rec_end)
            goto bail;
        int64_t ts;
        if (__builtin_add_overflow(base_ts, ts_delta, &ts))
            goto bail;
        if (!have_ts) {
            min_ts = max_ts = ts;
            have_ts = 1;
        } else if (ts < min_ts) {
            min_ts = ts;
            min_i = i;
        } else if (ts > max_ts) {
            max_ts = ts;
            max_i = i;
        }
        pos = rec_end;
        i++;
    }
    if (pos != end)
        goto bail;
    if (!have_ts)
        min_ts = max_ts = base_ts;
    PyBuffer_Release(&view);
    PyObject *res = Py_BuildValue("(LLLLN)", (long long)min_ts, min_i, (long long)max_ts, max_i, keyless);
    return res;
bail:
    PyBuffer_Release(&view);
    Py_DECREF(keyless);
    Py_RETURN_NONE;
fail:
    PyBuffer_Release(&view);
    Py_DECREF(keyless);
    return NULL;
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS,
     "walk(buf, pos, end, count, base_ts) -> (min_ts, min_i, max_ts, max_i, keyless) or None (run the Python "
     "walk for its error)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_record_walk", NULL, -1, methods};

PyMODINIT_FUNC PyInit__record_walk(void)
{
    return PyModule_Create(&module);
}
