#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <vips/vips.h>
#include "CVips.h"

// libvips and the hundred libraries it needs (GLib, librsvg, poppler, OpenEXR…) are loaded at the first picture,
// not when Foyer starts: mapping and linking them was most of a start-up that uploads nothing, and 17 MB of every
// instance's memory. Every function of it used below goes through `lib`, filled by `load` from the library itself.
#define VIPS_FUNCTIONS(X) \
    X(vips_init) \
    X(vips_version) \
    X(vips_error_buffer) \
    X(vips_error_clear) \
    X(g_log_set_handler) \
    X(vips_block_untrusted_set) \
    X(vips_cache_set_max) \
    X(vips_cache_set_max_mem) \
    X(vips_concurrency_set) \
    X(vips_foreign_find_load_buffer) \
    X(vips_image_new_from_buffer) \
    X(vips_image_get_width) \
    X(vips_image_get_height) \
    X(vips_image_get_page_height) \
    X(vips_image_get_bands) \
    X(vips_image_get_format) \
    X(vips_image_hasalpha) \
    X(g_object_ref) \
    X(g_object_unref) \
    X(g_free) \
    X(vips_colourspace) \
    X(vips_array_double_newv) \
    X(vips_flatten) \
    X(vips_area_unref) \
    X(vips_cast_uchar) \
    X(vips_image_write_to_memory) \
    X(vips_image_new_from_memory_copy) \
    X(vips_jpegsave_buffer) \
    X(vips_webpsave_buffer) \
    X(vips_thumbnail_buffer) \
    X(vips_resize) \
    X(vips_thread_shutdown)

static struct {
#define FIELD(name) __typeof__(name) *name;
    VIPS_FUNCTIONS(FIELD)
#undef FIELD
} lib;

static int load(char *error, size_t error_size) {
    // libvips 8's soname since 8.0.
    void *handle = dlopen("libvips.so.42", RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        snprintf(error, error_size, "%s", dlerror());
        return -1;
    }
#define LOAD(name) \
    if (!(lib.name = dlsym(handle, #name))) { \
        snprintf(error, error_size, "libvips has no %s", #name); \
        return -1; \
    }
    VIPS_FUNCTIONS(LOAD)
#undef LOAD
    return 0;
}

static void take_error(char *error, size_t error_size) {
    const char *message = lib.vips_error_buffer();
    snprintf(error, error_size, "%s", message && *message ? message : "libvips failed");
    // The buffer is shared by every thread: clear it so the next picture starts clean.
    lib.vips_error_clear();
}

// A refused upload is answered to its sender; libvips' own warnings about it need not fill the server's log.
static void ignore_warning(const gchar *domain, GLogLevelFlags level, const gchar *message, gpointer data) {}

int foyer_vips_start(int threads, char *error, size_t error_size) {
    if (load(error, error_size)) return -1;
    // What VIPS_INIT checks: the library loaded is the one these headers describe.
    if (lib.vips_version(0) != VIPS_MAJOR_VERSION || lib.vips_init("foyer")) {
        snprintf(error, error_size, "libvips %d.%d could not be started", lib.vips_version(0), lib.vips_version(1));
        return -1;
    }
    lib.g_log_set_handler("VIPS", G_LOG_LEVEL_WARNING, ignore_warning, NULL);
    lib.vips_block_untrusted_set(TRUE);
    lib.vips_cache_set_max(0);
    lib.vips_cache_set_max_mem(0);
    lib.vips_concurrency_set(threads);
    return 0;
}

const char *foyer_vips_loader(const void *bytes, size_t length) {
    const char *loader = lib.vips_foreign_find_load_buffer(bytes, length);
    if (!loader) lib.vips_error_clear();
    return loader;
}

int foyer_vips_header(const void *bytes, size_t length, int *width, int *height, char *error, size_t error_size) {
    VipsImage *image = lib.vips_image_new_from_buffer(bytes, length, "", "access", VIPS_ACCESS_SEQUENTIAL, NULL);
    if (!image) {
        take_error(error, error_size);
        return -1;
    }
    *width = lib.vips_image_get_width(image);
    *height = lib.vips_image_get_page_height(image);
    lib.g_object_unref(image);
    return 0;
}

// `image` as sRGB with no alpha (JPEG has none; a transparent area becomes white), 8 bits a band.
static int flattened_srgb(VipsImage *image, VipsImage **out) {
    VipsImage *srgb = NULL;
    if (lib.vips_colourspace(image, &srgb, VIPS_INTERPRETATION_sRGB, NULL)) return -1;
    if (lib.vips_image_hasalpha(srgb)) {
        VipsArrayDouble *white = lib.vips_array_double_newv(3, 255.0, 255.0, 255.0);
        int failed = lib.vips_flatten(srgb, out, "background", white, NULL);
        lib.vips_area_unref(VIPS_AREA(white));
        lib.g_object_unref(srgb);
        return failed;
    }
    *out = srgb;
    return 0;
}

// A new image of `image`'s pixels and nothing else: no EXIF, XMP, IPTC, ICC profile or any other field to leak
// (libvips 8.14's webpsave keeps EXIF even when told to strip).
static VipsImage *pixels_only(VipsImage *image) {
    VipsImage *bytes = NULL;
    if (lib.vips_image_get_format(image) != VIPS_FORMAT_UCHAR) {
        if (lib.vips_cast_uchar(image, &bytes, NULL)) return NULL;
    } else {
        bytes = image;
        (lib.g_object_ref)(bytes);
    }
    size_t size = 0;
    void *pixels = lib.vips_image_write_to_memory(bytes, &size);
    VipsImage *bare = pixels ? lib.vips_image_new_from_memory_copy(pixels, size, lib.vips_image_get_width(bytes),
                                                                lib.vips_image_get_height(bytes), lib.vips_image_get_bands(bytes),
                                                                VIPS_FORMAT_UCHAR)
                             : NULL;
    lib.g_free(pixels);
    lib.g_object_unref(bytes);
    return bare;
}

static int encode(VipsImage *image, int jpeg_quality, int webp_quality, foyer_vips_file *jpeg, foyer_vips_file *webp) {
    jpeg->width = webp->width = lib.vips_image_get_width(image);
    jpeg->height = webp->height = lib.vips_image_get_height(image);
    if (lib.vips_jpegsave_buffer(image, &jpeg->bytes, &jpeg->length, "Q", jpeg_quality, "strip", TRUE,
                             "optimize_coding", TRUE, "interlace", TRUE, NULL)) return -1;
    // effort 2, not libvips' 4: a 1600 px page took 80 ms instead of 190 (the largest part of an upload), and came
    // out no larger on a photo and on a drawing.
    if (lib.vips_webpsave_buffer(image, &webp->bytes, &webp->length, "Q", webp_quality, "strip", TRUE, "effort", 2, NULL)) return -1;
    return 0;
}

int foyer_vips_variants_make(
    const void *bytes, size_t length, int page_side, int thumbnail_side, int jpeg_quality, int webp_quality,
    foyer_vips_variants *out, char *error, size_t error_size
) {
    memset(out, 0, sizeof(*out));
    VipsImage *shrunk = NULL, *flat = NULL, *page = NULL, *thumbnail = NULL;
    int failed = -1;
    // Shrink-on-load where the format has it (JPEG, WebP, HEIF): a 48-megapixel photo is never whole in memory.
    // Orientation is applied, an embedded colour profile turned into sRGB. A truncated file fails (8.14's
    // thumbnail takes `fail_on` only through the loader's option string).
    if (lib.vips_thumbnail_buffer((void *)bytes, length, &shrunk, page_side, "height", page_side, "size", VIPS_SIZE_DOWN,
                              "option_string", "fail_on=truncated", NULL)) goto done;
    if (flattened_srgb(shrunk, &flat)) goto done;
    // Decoded once, into memory: both formats and the thumbnail are made from these pixels alone.
    page = pixels_only(flat);
    if (!page) goto done;
    if (encode(page, jpeg_quality, webp_quality, &out->page_jpeg, &out->page_webp)) goto done;
    int side = lib.vips_image_get_width(page) > lib.vips_image_get_height(page) ? lib.vips_image_get_width(page) : lib.vips_image_get_height(page);
    if (side > thumbnail_side) {
        if (lib.vips_resize(page, &thumbnail, (double)thumbnail_side / side, NULL)) goto done;
    } else {
        thumbnail = page;
        (lib.g_object_ref)(thumbnail);
    }
    if (encode(thumbnail, jpeg_quality, webp_quality, &out->thumbnail_jpeg, &out->thumbnail_webp)) goto done;
    failed = 0;
done:
    if (failed) {
        take_error(error, error_size);
        foyer_vips_variants_free(out);
    }
    if (thumbnail) lib.g_object_unref(thumbnail);
    if (page) lib.g_object_unref(page);
    if (flat) lib.g_object_unref(flat);
    if (shrunk) lib.g_object_unref(shrunk);
    // Per-thread buffers libvips keeps for the work just done.
    lib.vips_thread_shutdown();
    return failed;
}

void foyer_vips_variants_free(foyer_vips_variants *variants) {
    foyer_vips_file *files[] = {&variants->page_jpeg, &variants->page_webp, &variants->thumbnail_jpeg, &variants->thumbnail_webp};
    for (int i = 0; i < 4; i++) {
        lib.g_free(files[i]->bytes);
        files[i]->bytes = NULL;
        files[i]->length = 0;
    }
}
