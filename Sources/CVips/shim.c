#include <string.h>
#include <vips/vips.h>
#include "CVips.h"

static void take_error(char *error, size_t error_size) {
    const char *message = vips_error_buffer();
    snprintf(error, error_size, "%s", message && *message ? message : "libvips failed");
    // The buffer is shared by every thread: clear it so the next picture starts clean.
    vips_error_clear();
}

// A refused upload is answered to its sender; libvips' own warnings about it need not fill the server's log.
static void ignore_warning(const gchar *domain, GLogLevelFlags level, const gchar *message, gpointer data) {}

int foyer_vips_start(int threads) {
    if (VIPS_INIT("foyer")) return -1;
    g_log_set_handler("VIPS", G_LOG_LEVEL_WARNING, ignore_warning, NULL);
    vips_block_untrusted_set(TRUE);
    vips_cache_set_max(0);
    vips_cache_set_max_mem(0);
    vips_concurrency_set(threads);
    return 0;
}

const char *foyer_vips_loader(const void *bytes, size_t length) {
    const char *loader = vips_foreign_find_load_buffer(bytes, length);
    if (!loader) vips_error_clear();
    return loader;
}

int foyer_vips_header(const void *bytes, size_t length, int *width, int *height, char *error, size_t error_size) {
    VipsImage *image = vips_image_new_from_buffer(bytes, length, "", "access", VIPS_ACCESS_SEQUENTIAL, NULL);
    if (!image) {
        take_error(error, error_size);
        return -1;
    }
    *width = vips_image_get_width(image);
    *height = vips_image_get_page_height(image);
    g_object_unref(image);
    return 0;
}

// `image` as sRGB with no alpha (JPEG has none; a transparent area becomes white), 8 bits a band.
static int flattened_srgb(VipsImage *image, VipsImage **out) {
    VipsImage *srgb = NULL;
    if (vips_colourspace(image, &srgb, VIPS_INTERPRETATION_sRGB, NULL)) return -1;
    if (vips_image_hasalpha(srgb)) {
        VipsArrayDouble *white = vips_array_double_newv(3, 255.0, 255.0, 255.0);
        int failed = vips_flatten(srgb, out, "background", white, NULL);
        vips_area_unref(VIPS_AREA(white));
        g_object_unref(srgb);
        return failed;
    }
    *out = srgb;
    return 0;
}

// A new image of `image`'s pixels and nothing else: no EXIF, XMP, IPTC, ICC profile or any other field to leak
// (libvips 8.14's webpsave keeps EXIF even when told to strip).
static VipsImage *pixels_only(VipsImage *image) {
    VipsImage *bytes = NULL;
    if (vips_image_get_format(image) != VIPS_FORMAT_UCHAR) {
        if (vips_cast_uchar(image, &bytes, NULL)) return NULL;
    } else {
        bytes = image;
        g_object_ref(bytes);
    }
    size_t size = 0;
    void *pixels = vips_image_write_to_memory(bytes, &size);
    VipsImage *bare = pixels ? vips_image_new_from_memory_copy(pixels, size, vips_image_get_width(bytes),
                                                                vips_image_get_height(bytes), vips_image_get_bands(bytes),
                                                                VIPS_FORMAT_UCHAR)
                             : NULL;
    g_free(pixels);
    g_object_unref(bytes);
    return bare;
}

static int encode(VipsImage *image, int jpeg_quality, int webp_quality, foyer_vips_file *jpeg, foyer_vips_file *webp) {
    jpeg->width = webp->width = vips_image_get_width(image);
    jpeg->height = webp->height = vips_image_get_height(image);
    if (vips_jpegsave_buffer(image, &jpeg->bytes, &jpeg->length, "Q", jpeg_quality, "strip", TRUE,
                             "optimize_coding", TRUE, "interlace", TRUE, NULL)) return -1;
    // effort 2, not libvips' 4: a 1600 px page took 80 ms instead of 190 (the largest part of an upload), and came
    // out no larger on a photo and on a drawing.
    if (vips_webpsave_buffer(image, &webp->bytes, &webp->length, "Q", webp_quality, "strip", TRUE, "effort", 2, NULL)) return -1;
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
    if (vips_thumbnail_buffer((void *)bytes, length, &shrunk, page_side, "height", page_side, "size", VIPS_SIZE_DOWN,
                              "option_string", "fail_on=truncated", NULL)) goto done;
    if (flattened_srgb(shrunk, &flat)) goto done;
    // Decoded once, into memory: both formats and the thumbnail are made from these pixels alone.
    page = pixels_only(flat);
    if (!page) goto done;
    if (encode(page, jpeg_quality, webp_quality, &out->page_jpeg, &out->page_webp)) goto done;
    int side = vips_image_get_width(page) > vips_image_get_height(page) ? vips_image_get_width(page) : vips_image_get_height(page);
    if (side > thumbnail_side) {
        if (vips_resize(page, &thumbnail, (double)thumbnail_side / side, NULL)) goto done;
    } else {
        thumbnail = page;
        g_object_ref(thumbnail);
    }
    if (encode(thumbnail, jpeg_quality, webp_quality, &out->thumbnail_jpeg, &out->thumbnail_webp)) goto done;
    failed = 0;
done:
    if (failed) {
        take_error(error, error_size);
        foyer_vips_variants_free(out);
    }
    if (thumbnail) g_object_unref(thumbnail);
    if (page) g_object_unref(page);
    if (flat) g_object_unref(flat);
    if (shrunk) g_object_unref(shrunk);
    // Per-thread buffers libvips keeps for the work just done.
    vips_thread_shutdown();
    return failed;
}

void foyer_vips_variants_free(foyer_vips_variants *variants) {
    foyer_vips_file *files[] = {&variants->page_jpeg, &variants->page_webp, &variants->thumbnail_jpeg, &variants->thumbnail_webp};
    for (int i = 0; i < 4; i++) {
        g_free(files[i]->bytes);
        files[i]->bytes = NULL;
        files[i]->length = 0;
    }
}
