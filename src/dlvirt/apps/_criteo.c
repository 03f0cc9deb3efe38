/* RS's parser of Criteo TSV lines, compiled: one pass over the bytes with the GIL released.

   parse(text, values, sparse) -> bool fills ``values`` (int64, rows x 14: the label and the 13
   integers) and ``sparse`` (int64, rows x 26: the hex categoricals) from well-formed lines and says
   whether they were: 40 tab-separated fields per line, every line ending in a newline but the
   last; integers ``-?[0-9]*`` of at most 18 digits (empty: 0), categoricals of at most 8 hex digits
   (empty: 0). Anything else returns False with the buffers partly written, and the caller parses
   the text by the checked path, which gives the same values or says what is wrong (dlvirt.apps.rs).

   Why compiled: numpy array operations over a sample's fields spend part of each call holding the
   GIL, so two pre-processing threads parsed no faster than one and RS's E2E could not follow its
   inference from 1 to 2 cores (docs/measurement.md, "RS's parser: compiled"). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define DECIMAL_COLUMNS 14 /* the label and 13 integer features */
#define SPARSE_COLUMNS 26
#define FIELDS (DECIMAL_COLUMNS + SPARSE_COLUMNS)
#define MAX_DECIMAL_DIGITS 18 /* within int64; longer integers take the checked path */
#define MAX_HEX_DIGITS 8

/* character code -> hex digit value, 0xFF for none (filled by the module's init) */
static unsigned char hex_value[256];

/* 1 where the ``rows`` lines in [p, end) are well-formed (and written), else 0. */
static int parse_rows(const unsigned char *p, const unsigned char *end, Py_ssize_t rows,
                      int64_t *values, int64_t *sparse) {
    for (Py_ssize_t row = 0; row < rows; row++) {
        for (int field = 0; field < FIELDS; field++) {
            if (field < DECIMAL_COLUMNS) {
                int negative = p < end && *p == '-';
                p += negative;
                const unsigned char *digits = p;
                uint64_t value = 0;
                while (p < end && *p >= '0' && *p <= '9') {
                    if (p - digits == MAX_DECIMAL_DIGITS) return 0;
                    value = value * 10 + (uint64_t)(*p++ - '0');
                }
                if (negative && p == digits) return 0;
                values[row * DECIMAL_COLUMNS + field] = negative ? -(int64_t)value : (int64_t)value;
            } else {
                const unsigned char *digits = p;
                uint64_t value = 0;
                unsigned char digit;
                while (p < end && (digit = hex_value[*p]) != 0xFF) {
                    if (p - digits == MAX_HEX_DIGITS) return 0;
                    value = value * 16 + digit;
                    p++;
                }
                sparse[row * SPARSE_COLUMNS + field - DECIMAL_COLUMNS] = (int64_t)value;
            }
            if (field < FIELDS - 1) {
                if (p == end || *p != '\t') return 0;
                p++;
            } else if (p < end) { /* the last line may end without a newline */
                if (*p != '\n') return 0;
                p++;
            } else if (row != rows - 1) {
                return 0;
            }
        }
    }
    return p == end;
}

static PyObject *parse(PyObject *module, PyObject *args) {
    Py_buffer text, values, sparse;
    if (!PyArg_ParseTuple(args, "y*w*w*:parse", &text, &values, &sparse)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t rows = values.len / (Py_ssize_t)(DECIMAL_COLUMNS * sizeof(int64_t));
    if (values.len != rows * (Py_ssize_t)(DECIMAL_COLUMNS * sizeof(int64_t))
        || sparse.len != rows * (Py_ssize_t)(SPARSE_COLUMNS * sizeof(int64_t))) {
        PyErr_SetString(PyExc_ValueError, "parse: values must hold rows x 14 and sparse rows x 26 int64");
    } else {
        int ok = 0;
        if (rows > 0 && text.len > 0) {
            Py_BEGIN_ALLOW_THREADS
            ok = parse_rows((const unsigned char *)text.buf, (const unsigned char *)text.buf + text.len, rows,
                            (int64_t *)values.buf, (int64_t *)sparse.buf);
            Py_END_ALLOW_THREADS
        }
        result = PyBool_FromLong(ok);
    }
    PyBuffer_Release(&text);
    PyBuffer_Release(&values);
    PyBuffer_Release(&sparse);
    return result;
}

static PyMethodDef methods[] = {
    {"parse", parse, METH_VARARGS,
     "parse(text, values, sparse) -> bool: well-formed Criteo TSV lines into int64 buffers of rows x 14 and "
     "rows x 26; False for anything else."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef criteo_module = {
    PyModuleDef_HEAD_INIT, "_criteo", "RS's compiled parser of Criteo TSV lines (see dlvirt.apps.rs).", -1, methods,
};

PyMODINIT_FUNC PyInit__criteo(void) {
    memset(hex_value, 0xFF, sizeof hex_value);
    for (int c = 0; c < 16; c++) {
        hex_value[(unsigned char)"0123456789abcdef"[c]] = (unsigned char)c;
        hex_value[(unsigned char)"0123456789ABCDEF"[c]] = (unsigned char)c;
    }
    return PyModule_Create(&criteo_module);
}
