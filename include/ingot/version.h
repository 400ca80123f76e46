/*
 * ingot version macros.
 *
 * ABI policy: releases with the same INGOT_VERSION_MAJOR are ABI compatible
 * (a program built against x.y.z runs with any x.y'.z' where y' >= y).
 * A caller can detect a header/library mismatch at run time:
 *
 *     if (ingot_version_number() / 10000 != INGOT_VERSION_MAJOR) ... mismatch
 *
 * Before 1.0.0 every minor release may break the ABI.
 */
#ifndef INGOT_VERSION_H
#define INGOT_VERSION_H

#define INGOT_VERSION_MAJOR 0
#define INGOT_VERSION_MINOR 1
#define INGOT_VERSION_PATCH 0

/* MAJOR * 10000 + MINOR * 100 + PATCH, e.g. 0.1.0 -> 100 */
#define INGOT_VERSION_NUMBER \
  (INGOT_VERSION_MAJOR * 10000 + INGOT_VERSION_MINOR * 100 + INGOT_VERSION_PATCH)

#define INGOT_VERSION_STRINGIFY_(x) #x
#define INGOT_VERSION_STRINGIFY(x) INGOT_VERSION_STRINGIFY_(x)
#define INGOT_VERSION_STRING                                                   \
  INGOT_VERSION_STRINGIFY(INGOT_VERSION_MAJOR) "." INGOT_VERSION_STRINGIFY(    \
      INGOT_VERSION_MINOR) "." INGOT_VERSION_STRINGIFY(INGOT_VERSION_PATCH)

#endif /* INGOT_VERSION_H */
