/* RS's compiled text handling: Criteo TSV lines in, CTR text out, each in one pass with the GIL
   released.

   parse(text, labels, dense, sparse, modulus) -> bool fills, from well-formed lines, ``labels``
   (int8, rows), ``dense`` (float32, rows x 13: max(x, 0) of the 13 integers, the caller takes the
   logarithm) and ``sparse`` (int64, rows x 26: each hex categorical modulo its table's rows,
   ``modulus``, 26 int64 in 1..2^32-1), and says whether they were well-formed: 40 tab-separated
   fields per line, every line ending in a newline but the last; integers ``-?[0-9]*`` of at most
   18 digits (empty: 0), categoricals of at most 8 hex digits (empty: 0). Anything else returns
   False with the buffers partly written, and the caller parses the text by the checked path, which
   gives the same values or says what is wrong (dlvirt.apps.rs).

   format_ctrs(ctr) -> bytes | None: float32 CTRs in [0, 1] as Python's f"{p:.6f}" joined by commas;
   None for anything else (NaN from a broken model), which the caller formats by Python's own.

   Why compiled: numpy operations over a sample's fields hold the GIL for part of each call, so two
   pre-processing threads parsed no faster than one and RS's E2E could not follow its inference
   from 1 to 2 cores (docs/measurement.md, "RS's parser: compiled"); the hashing, labels and CTR
   text were the Python-level work left around it ("RS's text handling: one pass"). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define DENSE 13
#define SPARSE 26
#define MAX_DECIMAL_DIGITS 18 /* within int64; longer integers take the checked path */
#define MAX_HEX_DIGITS 8

/* character code -> hex digit value, 0xFF for none (filled by the module's init) */
static unsigned char hex_value[256];

/* a mod d for 32-bit a and 1 <= d < 2^32 by one 128-bit product with M = ceil(2^64 / d)
   (Lemire, Kaser and Kurz, "Faster remainder by direct computation", 2019: exact for these widths) */
static inline uint32_t fast_mod(uint32_t a, uint64_t m, uint32_t d) {
    uint64_t low = m * a;
    return (uint32_t)(((__uint128_t)low * d) >> 64);
}

/* One decimal field at p: its value in *out and the byte after it; NULL where it is not
   ``-?[0-9]{0,18}``. The text ends in a NUL (a bytes object's), which no field holds. */
static const unsigned char *decimal(const unsigned char *p, int64_t *out) {
    int negative = *p == '-';
    p += negative;
    const unsigned char *digits = p;
    uint64_t value = 0;
    while (*p >= '0' && *p <= '9') {
        if (p - digits == MAX_DECIMAL_DIGITS) return NULL;
        value = value * 10 + (uint64_t)(*p++ - '0');
    }
    if (negative && p == digits) return NULL;
    *out = negative ? -(int64_t)value : (int64_t)value;
    return p;
}

/* 1 where the ``rows`` lines in [p, end) are well-formed (and written), else 0; *end is NUL. */
static int parse_rows(const unsigned char *p, const unsigned char *end, Py_ssize_t rows, int8_t *labels,
                      float *dense, int64_t *sparse, const uint32_t *divisor, const uint64_t *inverse) {
    for (Py_ssize_t row = 0; row < rows; row++) {
        int64_t value;
        if (!(p = decimal(p, &value)) || *p++ != '\t') return 0;
        labels[row] = (int8_t)value; /* as numpy's astype(int8): the low byte */
        for (int column = 0; column < DENSE; column++) {
            if (!(p = decimal(p, &value)) || *p++ != '\t') return 0;
            dense[row * DENSE + column] = value > 0 ? (float)value : 0.0f;
        }
        for (int column = 0; column < SPARSE; column++) {
            const unsigned char *digits = p;
            uint32_t hex = 0;
            unsigned char digit;
            while ((digit = hex_value[*p]) != 0xFF) {
                if (p - digits == MAX_HEX_DIGITS) return 0;
                hex = hex * 16 + digit;
                p++;
            }
            sparse[row * SPARSE + column] = fast_mod(hex, inverse[column], divisor[column]);
            if (column < SPARSE - 1) {
                if (*p++ != '\t') return 0;
            } else if (p < end) { /* the last line may end without a newline */
                if (*p++ != '\n') return 0;
            } else if (row != rows - 1) {
                return 0;
            }
        }
    }
    return p == end;
}

static PyObject *parse(PyObject *module, PyObject *args) {
    PyObject *text;
    Py_buffer labels, dense, sparse, modulus;
    if (!PyArg_ParseTuple(args, "Sw*w*w*y*:parse", &text, &labels, &dense, &sparse, &modulus)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t rows = labels.len;
    uint32_t divisor[SPARSE];
    uint64_t inverse[SPARSE];
    int moduli_ok = modulus.len == (Py_ssize_t)(SPARSE * sizeof(int64_t));
    for (int column = 0; moduli_ok && column < SPARSE; column++) {
        int64_t d;
        memcpy(&d, (const char *)modulus.buf + column * sizeof d, sizeof d);
        moduli_ok = d >= 1 && d <= (int64_t)UINT32_MAX;
        divisor[column] = (uint32_t)d;
        inverse[column] = moduli_ok ? UINT64_MAX / (uint64_t)d + 1 : 0;
    }
    if (dense.len != rows * (Py_ssize_t)(DENSE * sizeof(float))
        || sparse.len != rows * (Py_ssize_t)(SPARSE * sizeof(int64_t))) {
        PyErr_SetString(PyExc_ValueError,
                        "parse: labels must hold rows int8, dense rows x 13 float32, sparse rows x 26 int64");
    } else if (!moduli_ok) {
        PyErr_SetString(PyExc_ValueError, "parse: modulus must hold 26 int64 in 1..2^32-1");
    } else {
        int ok = 0;
        const unsigned char *start = (const unsigned char *)PyBytes_AS_STRING(text);
        Py_ssize_t size = PyBytes_GET_SIZE(text);
        if (rows > 0 && size > 0) {
            Py_BEGIN_ALLOW_THREADS
            ok = parse_rows(start, start + size, rows, (int8_t *)labels.buf, (float *)dense.buf,
                            (int64_t *)sparse.buf, divisor, inverse);
            Py_END_ALLOW_THREADS
        }
        result = PyBool_FromLong(ok);
    }
    PyBuffer_Release(&labels);
    PyBuffer_Release(&dense);
    PyBuffer_Release(&sparse);
    PyBuffer_Release(&modulus);
    return result;
}

static PyObject *format_ctrs(PyObject *module, PyObject *args) {
    Py_buffer ctr;
    if (!PyArg_ParseTuple(args, "y*:format_ctrs", &ctr)) return NULL;
    Py_ssize_t count = ctr.len / (Py_ssize_t)sizeof(float);
    PyObject *text = NULL;
    if (ctr.len != count * (Py_ssize_t)sizeof(float)) {
        PyErr_SetString(PyExc_ValueError, "format_ctrs: ctr must hold float32");
    } else if (count > 0 && (text = PyBytes_FromStringAndSize(NULL, count * 9 - 1))) {
        int ok = 1;
        Py_BEGIN_ALLOW_THREADS
        char *out = PyBytes_AS_STRING(text);
        for (Py_ssize_t i = 0; ok && i < count; i++, out += 9) {
            float p;
            memcpy(&p, (const char *)ctr.buf + i * sizeof p, sizeof p);
            ok = p >= 0.0f && p <= 1.0f; /* not NaN either */
            /* exact: a float32 times 10^6 fits a double's mantissa; nearbyint rounds half to
               even, as Python's formatting rounds the exact value */
            int64_t millionths = ok ? (int64_t)nearbyint((double)p * 1e6) : 0;
            out[0] = (char)('0' + millionths / 1000000);
            out[1] = '.';
            for (int place = 7; place >= 2; place--, millionths /= 10) out[place] = (char)('0' + millionths % 10);
            if (i < count - 1) out[8] = ',';
        }
        Py_END_ALLOW_THREADS
        if (!ok) Py_CLEAR(text);
    }
    PyBuffer_Release(&ctr);
    if (text == NULL && !PyErr_Occurred()) Py_RETURN_NONE;
    return text;
}

static PyMethodDef methods[] = {
    {"parse", parse, METH_VARARGS,
     "parse(text, labels, dense, sparse, modulus) -> bool: well-formed Criteo TSV lines into rows int8 labels, "
     "rows x 13 float32 max(x, 0) and rows x 26 int64 categoricals modulo their tables' rows; False for anything "
     "else."},
    {"format_ctrs", format_ctrs, METH_VARARGS,
     "format_ctrs(ctr) -> bytes | None: float32 CTRs in [0, 1] as f'{p:.6f}' joined by commas; None otherwise."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef criteo_module = {
    PyModuleDef_HEAD_INIT, "_criteo", "RS's compiled Criteo parser and CTR formatter (see dlvirt.apps.rs).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__criteo(void) {
    memset(hex_value, 0xFF, sizeof hex_value);
    for (int c = 0; c < 16; c++) {
        hex_value[(unsigned char)"0123456789abcdef"[c]] = (unsigned char)c;
        hex_value[(unsigned char)"0123456789ABCDEF"[c]] = (unsigned char)c;
    }
    return PyModule_Create(&criteo_module);
}
