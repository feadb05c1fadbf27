// zlib (Debian's zlib1g-dev), for gzip answers put together from pieces deflated ahead (crc32 and crc32_combine).
#include <zlib.h>
