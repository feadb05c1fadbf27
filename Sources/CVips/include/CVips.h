#ifndef FOYER_CVIPS_H
#define FOYER_CVIPS_H

#include <stddef.h>

// Pictures through libvips. Its options are passed to variadic C functions, which Swift cannot call: this shim
// makes the calls and hands back plain bytes. Every function is safe to call from several threads at once.

// Loads and starts libvips once: untrusted loaders (SVG, PDF, ImageMagick…) blocked, the operation cache off (every
// picture is new), `threads` worker threads per picture. 0 on success; else `error` says why. Call it before any
// other function here.
int foyer_vips_start(int threads, char *error, size_t error_size);

// The loader libvips would pick for these bytes (e.g. "VipsForeignLoadJpegBuffer"), or NULL.
const char *foyer_vips_loader(const void *bytes, size_t length);

// Width, height and page count from the header alone: nothing is decoded. 0 on success.
int foyer_vips_header(const void *bytes, size_t length, int *width, int *height, char *error, size_t error_size);

typedef struct {
    void *bytes;  // g_malloc'd: free with foyer_vips_free_variants
    size_t length;
    int width;
    int height;
} foyer_vips_file;

typedef struct {
    foyer_vips_file page_jpeg, page_webp, thumbnail_jpeg, thumbnail_webp;
} foyer_vips_variants;

// Decodes the picture once (a truncated file is an error), turns it upright by its orientation tag, converts it to
// sRGB, shrinks it to at most `page_side` and `thumbnail_side` pixels on its long side (never enlarges), and
// encodes each as JPEG and WebP with no metadata at all. 0 on success; else `error` says why.
int foyer_vips_variants_make(
    const void *bytes, size_t length, int page_side, int thumbnail_side, int jpeg_quality, int webp_quality,
    foyer_vips_variants *out, char *error, size_t error_size
);

void foyer_vips_variants_free(foyer_vips_variants *variants);

#endif
