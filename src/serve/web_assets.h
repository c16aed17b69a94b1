/* web_assets.h - the web page's files (web/ in the source tree), embedded
 * at build time by cmake/embed_web.cmake into the generated web_assets.c. */
#ifndef RF_SERVE_WEB_ASSETS_H
#define RF_SERVE_WEB_ASSETS_H

typedef struct {
    const char *name; /* the path under web/, e.g. "index.html" */
    const char *text; /* its bytes, NUL-terminated */
} rf_web_asset;

extern const rf_web_asset rf_web_assets[];
extern const int rf_web_n_assets;

#endif
