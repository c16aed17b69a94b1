/* api_internal.h - for tests only (hidden: not exported from the .so). */
#ifndef RF_API_INTERNAL_H
#define RF_API_INTERNAL_H

#include "refusion.h"

/* Buffer allocations (KV cache, rows, run state) the session has made. */
size_t rf_session_allocs(const refusion_session *s);

#endif
