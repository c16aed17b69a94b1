/* dtype.h - the weight element types live in formats/dtype.h (below both
 * io and kernels); this name stays for the readers that include it. */
#ifndef RF_IO_DTYPE_H
#define RF_IO_DTYPE_H
#include "formats/dtype.h"
#endif
