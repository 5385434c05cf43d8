/* The record walk of kafkatier.log.log_validator._walk, compiled.
 *
 * walk(buf, pos, end, count, base_ts) walks `count` record-format-v2 records in buf[pos:end] and returns
 * (min timestamp, its index, max timestamp, its index, [indexes of records without a key]) exactly as the
 * Python walk does for a batch it accepts. For anything the Python walk refuses, and for the rare inputs this
 * code does not handle itself (a 10-byte varlong wider than 64 bits, a timestamp outside int64), it returns
 * None and the caller runs the Python walk, which raises the error. So this module never decides an error
 * message: it only accepts, and it accepts exactly what the Python walk accepts.
 *
 * leader_append(records, next_offset, leader_epoch, now_ms, max_message_bytes, before_max_ms, after_max_ms,
 * compacted, crc32c) is the whole leader validation of log_validator.validate_leader_append in one pass: the
 * batch checks of record_batch.validate_and_assign_offsets (sizes, magic, CRC-32C through the crc32c function it
 * is given, the client append rules, header timestamps), the record walk and validate_records' checks (keyless
 * records of a compacted topic, record timestamps), then the offsets and leader epoch written into a copy. Same
 * contract: it accepts only what the Python path accepts, with the same result, and returns None for everything
 * else (compressed batches and trailing partial batches included), so the Python path raises the error.
 *
 * Optional: setup.py builds it when a compiler is there; without it the pure-Python walk runs.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
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

/* The walk itself over buf[pos:end]: 1 accepted (results set; every keyless index appended to `keyless` when it
 * is not NULL, counted in *nkeyless), 0 refused or not handled here (the Python walk decides), -1 a Python error. */
static int walk_core(const unsigned char *buf, Py_ssize_t buflen, Py_ssize_t pos, Py_ssize_t end, long long count_ll,
                     int64_t base_ts, PyObject *keyless, long long *nkeyless, int64_t *min_out, long long *min_i_out,
                     int64_t *max_out, long long *max_i_out)
{
    int64_t min_ts = 0, max_ts = 0;
    long long min_i = 0, max_i = 0;
    int have_ts = 0;
    long long i = 0;
    *nkeyless = 0;
    if (pos < 0 || end > buflen || pos > end)
        return 0;
    while (i < count_ll) {
        if (pos >= end)
            return 0;
        int64_t length;
        Py_ssize_t p = pos;
        if (read_length(buf, &p, end, &length) < 0)
            return 0;
        pos = p;
        if (length < 1 || length > end - pos)
            return 0;
        Py_ssize_t rec_end = pos + (Py_ssize_t)length;
        if (buf[pos])
            return 0; /* attributes must be 0 */
        p = pos + 1;
        int64_t ts_delta, off_delta, klen, vlen;
        if (read_varint(buf, &p, rec_end, 63, &ts_delta) < 0)
            return 0;
        if (read_varint(buf, &p, rec_end, 28, &off_delta) < 0 || off_delta != i)
            return 0;
        if (read_varint(buf, &p, rec_end, 28, &klen) < 0)
            return 0;
        if (klen >= 0) {
            if (klen > rec_end - p)
                return 0;
            p += (Py_ssize_t)klen;
        } else if (klen == -1) {
            (*nkeyless)++;
            if (keyless != NULL) {
                PyObject *idx = PyLong_FromLongLong(i);
                if (idx == NULL || PyList_Append(keyless, idx) < 0) {
                    Py_XDECREF(idx);
                    return -1;
                }
                Py_DECREF(idx);
            }
        } else {
            return 0;
        }
        if (read_varint(buf, &p, rec_end, 28, &vlen) < 0)
            return 0;
        if (vlen >= 0) {
            if (vlen > rec_end - p)
                return 0;
            p += (Py_ssize_t)vlen;
        } else if (vlen < -1) {
            return 0;
        }
        if (p >= rec_end)
            return 0;
        if (buf[p] == 0) {
            p += 1;
        } else {
            int64_t nheaders;
            if (read_varint(buf, &p, rec_end, 28, &nheaders) < 0 || nheaders < 0)
                return 0;
            for (int64_t h = 0; h < nheaders; h++) {
                int64_t hk, hv;
                if (p >= rec_end)
                    return 0;
                if (read_varint(buf, &p, rec_end, 28, &hk) < 0 || hk < 0 || hk > rec_end - p)
                    return 0;
                PyObject *key = PyUnicode_DecodeUTF8((const char *)buf + p, (Py_ssize_t)hk, "strict");
                if (key == NULL) {
                    PyErr_Clear();
                    return 0;
                }
                Py_DECREF(key);
                p += (Py_ssize_t)hk;
                if (read_varint(buf, &p, rec_end, 28, &hv) < 0 || hv < -1)
                    return 0;
                if (hv > 0) {
                    if (hv > rec_end - p)
                        return 0;
                    p += (Py_ssize_t)hv;
                }
            }
        }
        if (p != rec_end)
            return 0;
        int64_t ts;
        if (__builtin_add_overflow(base_ts, ts_delta, &ts))
            return 0;
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
        return 0;
    if (!have_ts)
        min_ts = max_ts = base_ts;
    *min_out = min_ts;
    *min_i_out = min_i;
    *max_out = max_ts;
    *max_i_out = max_i;
    return 1;
}

static PyObject *walk(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos, end;
    long long count_ll, base_ts_ll;
    if (!PyArg_ParseTuple(args, "y*nnLL", &view, &pos, &end, &count_ll, &base_ts_ll))
        return NULL;
    PyObject *keyless = PyList_New(0);
    if (keyless == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    int64_t min_ts, max_ts;
    long long min_i, max_i, nkeyless;
    int r = walk_core((const unsigned char *)view.buf, view.len, pos, end, count_ll, (int64_t)base_ts_ll, keyless,
                      &nkeyless, &min_ts, &min_i, &max_ts, &max_i);
    PyBuffer_Release(&view);
    if (r < 0) {
        Py_DECREF(keyless);
        return NULL;
    }
    if (r == 0) {
        Py_DECREF(keyless);
        Py_RETURN_NONE;
    }
    return Py_BuildValue("(LLLLN)", (long long)min_ts, min_i, (long long)max_ts, max_i, keyless);
}


static inline int64_t be64(const unsigned char *b)
{
    uint64_t v = 0;
    for (int k = 0; k < 8; k++)
        v = (v << 8) | b[k];
    return (int64_t)v;
}

static inline int32_t be32(const unsigned char *b)
{
    return (int32_t)(((uint32_t)b[0] << 24) | ((uint32_t)b[1] << 16) | ((uint32_t)b[2] << 8) | (uint32_t)b[3]);
}

static inline int16_t be16(const unsigned char *b)
{
    return (int16_t)(((uint16_t)b[0] << 8) | (uint16_t)b[1]);
}

static inline void put_be64(unsigned char *b, int64_t v)
{
    uint64_t u = (uint64_t)v;
    for (int k = 7; k >= 0; k--) {
        b[k] = (unsigned char)(u & 0xFF);
        u >>= 8;
    }
}

static inline void put_be32(unsigned char *b, int32_t v)
{
    uint32_t u = (uint32_t)v;
    b[0] = (unsigned char)(u >> 24);
    b[1] = (unsigned char)(u >> 16);
    b[2] = (unsigned char)(u >> 8);
    b[3] = (unsigned char)u;
}

/* An optional int argument: None -> *has = 0. 0 on success, -1 on a Python error. */
static int opt_int(PyObject *o, int *has, long long *out)
{
    if (o == Py_None) {
        *has = 0;
        return 0;
    }
    *has = 1;
    *out = PyLong_AsLongLong(o);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* Header field offsets of a v2 batch (record_batch.py's HEADER). */
#define H_LENGTH 8
#define H_MAGIC 16
#define H_CRC 17
#define H_ATTRIBUTES 21
#define H_LAST_DELTA 23
#define H_BASE_TS 27
#define H_MAX_TS 35
#define H_PRODUCER_ID 43
#define H_BASE_SEQUENCE 53
#define H_COUNT 57
#define H_SIZE 61
#define LOG_OVERHEAD 12

/* The result of a leader append that passed every check. */
typedef struct {
    long long first_offset, last_offset, max_ts, offset_of_max_ts, num_batches, num_records;
    Py_ssize_t valid_bytes;
    PyObject *records; /* the copy with offsets and leader epoch written (a new reference) */
} append_result;

/* leader_append's work on an acquired buffer: 1 accepted (*res filled), 0 refused or not handled here (the
 * Python path decides), -1 a Python error. */
static int leader_append_core(Py_buffer *view, long long next_offset, long long leader_epoch, long long now_ms,
                              PyObject *max_bytes_o, PyObject *before_o, PyObject *after_o, int compacted,
                              PyObject *crc_fn, PyObject *in_place, append_result *res)
{
    const unsigned char *buf = (const unsigned char *)view->buf;
    Py_ssize_t total = view->len, pos = 0;
    int has_max, has_before, has_after;
    long long max_bytes = 0, before = 0, after = 0;
    if (opt_int(max_bytes_o, &has_max, &max_bytes) < 0 || opt_int(before_o, &has_before, &before) < 0 ||
        opt_int(after_o, &has_after, &after) < 0 || leader_epoch < INT32_MIN || leader_epoch > INT32_MAX) {
        if (PyErr_Occurred())
            PyErr_Clear();
        return 0;
    }
    __int128 lo = (__int128)now_ms - before, hi = (__int128)now_ms + after;
    long long first_offset = next_offset, num_batches = 0, num_records = 0;
    int64_t max_ts = -1;
    long long offset_of_max_ts = -1;
    while (total - pos >= LOG_OVERHEAD) {
        const unsigned char *b = buf + pos;
        long long size = (long long)be32(b + H_LENGTH) + LOG_OVERHEAD;
        if (size < H_SIZE || total - pos <= H_MAGIC || b[H_MAGIC] != 2)
            return 0;
        if ((has_max && size > max_bytes) || size > total - pos)
            return 0;
        int16_t attributes = be16(b + H_ATTRIBUTES);
        int32_t last_delta = be32(b + H_LAST_DELTA), count = be32(b + H_COUNT);
        int64_t base_ts = be64(b + H_BASE_TS), batch_max_ts = be64(b + H_MAX_TS);
        if (be64(b) != 0 || last_delta < 0 || count <= 0 || (long long)last_delta + 1 != count)
            return 0;
        if ((attributes & 0x20) || (attributes & 0x07))
            return 0; /* a control batch (refused from clients), a compressed one (the Python path inflates) */
        if (be64(b + H_PRODUCER_ID) > -1 && be32(b + H_BASE_SEQUENCE) < 0)
            return 0;
        if (has_before && base_ts != -1 && (__int128)now_ms - base_ts > before)
            return 0;
        if (has_after && (__int128)batch_max_ts - now_ms > after)
            return 0;
        /* the CRC-32C of attributes..end, by the crc32c module the Python path uses */
        PyObject *mv = PyMemoryView_FromMemory((char *)b + H_ATTRIBUTES, (Py_ssize_t)size - H_ATTRIBUTES, PyBUF_READ);
        if (mv == NULL)
            return -1;
        PyObject *crc = PyObject_CallOneArg(crc_fn, mv);
        Py_DECREF(mv);
        if (crc == NULL)
            return -1;
        unsigned long computed = PyLong_AsUnsignedLong(crc);
        Py_DECREF(crc);
        if (computed == (unsigned long)-1 && PyErr_Occurred())
            return -1;
        if (computed != (uint32_t)be32(b + H_CRC))
            return 0;
        int64_t rmin, rmax;
        long long rmin_i, rmax_i, nkeyless;
        int r = walk_core(buf, total, pos + H_SIZE, pos + (Py_ssize_t)size, count, base_ts, NULL, &nkeyless, &rmin,
                          &rmin_i, &rmax, &rmax_i);
        if (r < 0)
            return -1;
        if (r == 0 || (compacted && nkeyless))
            return 0;
        if (base_ts != -1 && ((has_before && rmin < lo) || (has_after && rmax > hi)))
            return 0;
        long long last_offset;
        if (__builtin_add_overflow(next_offset, (long long)last_delta, &last_offset) || last_offset == LLONG_MAX)
            return 0;
        if (batch_max_ts > max_ts) {
            max_ts = batch_max_ts;
            offset_of_max_ts = last_offset;
        }
        num_batches++;
        num_records += count;
        next_offset = last_offset + 1;
        pos += (Py_ssize_t)size;
    }
    if (num_batches == 0 || pos != total)
        return 0;
    /* Every check passed: the offsets and leader epoch (outside the CRC) are written into a copy, or, for a
     * writable memoryview (a Produce request's records, a view of the frame the request owns: protocol/
     * produce_codec.py), into the view itself, as Kafka assigns offsets in the request's buffer. */
    PyObject *out = NULL;
    unsigned char *o = NULL;
    if (in_place != NULL && PyMemoryView_Check(in_place)) {
        Py_buffer wv;
        if (PyObject_GetBuffer(in_place, &wv, PyBUF_WRITABLE) == 0) {
            if (wv.buf == view->buf && wv.len == total) {
                o = (unsigned char *)wv.buf;
                out = in_place;
                Py_INCREF(out);
            }
            PyBuffer_Release(&wv);   /* the memoryview (kept by the caller and returned) holds the memory */
        } else {
            PyErr_Clear();   /* read-only: the copy below */
        }
    }
    if (out == NULL) {
        out = PyBytes_FromStringAndSize((const char *)buf, total);
        if (out == NULL)
            return -1;
        o = (unsigned char *)PyBytes_AS_STRING(out);
    }
    long long off = first_offset;
    for (Py_ssize_t q = 0; q < total;) {
        long long size = (long long)be32(o + q + H_LENGTH) + LOG_OVERHEAD;
        put_be64(o + q, off);
        put_be32(o + q + 12, (int32_t)leader_epoch);
        off += (long long)be32(o + q + H_LAST_DELTA) + 1;
        q += (Py_ssize_t)size;
    }
    res->first_offset = first_offset;
    res->last_offset = next_offset - 1;
    res->max_ts = (long long)max_ts;
    res->offset_of_max_ts = offset_of_max_ts;
    res->num_batches = num_batches;
    res->num_records = num_records;
    res->valid_bytes = total;
    res->records = out;
    return 1;
}

static PyObject *leader_append(PyObject *self, PyObject *args)
{
    Py_buffer view;
    long long next_offset, leader_epoch, now_ms;
    PyObject *max_bytes_o, *before_o, *after_o, *crc_fn;
    int compacted;
    if (!PyArg_ParseTuple(args, "y*LLLOOOpO", &view, &next_offset, &leader_epoch, &now_ms, &max_bytes_o, &before_o,
                          &after_o, &compacted, &crc_fn))
        return NULL;
    append_result res;
    int r = leader_append_core(&view, next_offset, leader_epoch, now_ms, max_bytes_o, before_o, after_o, compacted,
                               crc_fn, NULL, &res);
    PyBuffer_Release(&view);
    if (r < 0)
        return NULL;
    if (r == 0)
        Py_RETURN_NONE;
    return Py_BuildValue("(LLLLLLnN)", res.first_offset, res.last_offset, res.max_ts, res.offset_of_max_ts,
                         res.num_batches, res.num_records, res.valid_bytes, res.records);
}

/* leader_append_info: leader_append with its result built as an instance of `cls` (log.record_batch.AppendInfo, a
 * slotted attrs class) whose fields are `names` in order: the eight results, then log_append_time (-1),
 * log_start_offset and epoch_starts (()). The fields are set as object.__setattr__ sets them (the generic
 * setattr, past the frozen class's __setattr__), without the Python-level __init__, which cost more than the
 * validation itself. Only for a type the caller has checked (record_batch builds it the same way when this
 * module is missing). */
static PyObject *leader_append_info(PyObject *self, PyObject *args)
{
    Py_buffer view;
    long long next_offset, leader_epoch, now_ms, log_start_offset;
    PyObject *max_bytes_o, *before_o, *after_o, *crc_fn, *cls, *names;
    int compacted;
    if (!PyArg_ParseTuple(args, "y*LLLOOOpOO!O!L", &view, &next_offset, &leader_epoch, &now_ms, &max_bytes_o,
                          &before_o, &after_o, &compacted, &crc_fn, &PyType_Type, &cls, &PyTuple_Type, &names,
                          &log_start_offset))
        return NULL;
    if (PyTuple_GET_SIZE(names) != 11) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "names must hold the 11 AppendInfo fields");
        return NULL;
    }
    append_result res;
    int r = leader_append_core(&view, next_offset, leader_epoch, now_ms, max_bytes_o, before_o, after_o, compacted,
                               crc_fn, PyTuple_GET_ITEM(args, 0), &res);
    PyBuffer_Release(&view);
    if (r < 0)
        return NULL;
    if (r == 0)
        Py_RETURN_NONE;
    PyObject *values[11] = {PyLong_FromLongLong(res.first_offset), PyLong_FromLongLong(res.last_offset),
                            PyLong_FromLongLong(res.max_ts), PyLong_FromLongLong(res.offset_of_max_ts),
                            PyLong_FromLongLong(res.num_batches), PyLong_FromLongLong(res.num_records),
                            PyLong_FromSsize_t(res.valid_bytes), res.records, PyLong_FromLong(-1),
                            PyLong_FromLongLong(log_start_offset), PyTuple_New(0)};
    PyTypeObject *type = (PyTypeObject *)cls;
    PyObject *obj = NULL;
    for (int k = 0; k < 11; k++)
        if (values[k] == NULL)
            goto done;
    obj = type->tp_alloc(type, 0);
    if (obj == NULL)
        goto done;
    for (int k = 0; k < 11; k++) {
        if (PyObject_GenericSetAttr(obj, PyTuple_GET_ITEM(names, k), values[k]) < 0) {
            Py_CLEAR(obj);
            goto done;
        }
    }
done:
    for (int k = 0; k < 11; k++)
        Py_XDECREF(values[k]);
    return obj;
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS,
     "walk(buf, pos, end, count, base_ts) -> (min_ts, min_i, max_ts, max_i, keyless) or None (run the Python "
     "walk for its error)"},
    {"leader_append", leader_append, METH_VARARGS,
     "leader_append(records, next_offset, leader_epoch, now_ms, max_message_bytes, timestamp_before_max_ms, "
     "timestamp_after_max_ms, compacted, crc32c) -> (first_offset, last_offset, max_timestamp, "
     "offset_of_max_timestamp, num_batches, num_records, valid_bytes, records) or None (run the Python path for its "
     "error)"},
    {"leader_append_info", leader_append_info, METH_VARARGS,
     "leader_append_info(records, next_offset, leader_epoch, now_ms, max_message_bytes, timestamp_before_max_ms, "
     "timestamp_after_max_ms, compacted, crc32c, cls, field_names, log_start_offset) -> a cls instance or None; "
     "a writable memoryview's offsets are written in place (its records field is that view)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_record_walk", NULL, -1, methods};

PyMODINIT_FUNC PyInit__record_walk(void)
{
    return PyModule_Create(&module);
}
