/* Small assertion helpers for the C consumer tests (tests/c_api.rs builds and runs them). */
#ifndef OMEGA_TEST_CHECK_H
#define OMEGA_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "omega.h"

static int check_failures = 0;

#define CHECK(cond)                                                                                     \
    do {                                                                                                \
        if (!(cond)) {                                                                                  \
            fprintf(stderr, "%s:%d: CHECK failed: %s (last error: \"%s\")\n", __FILE__, __LINE__, #cond, \
                    omega_gpu_session_last_error());                                                    \
            check_failures++;                                                                           \
        }                                                                                               \
    } while (0)

/* The last error starts with `prefix` (the stage and the start of its text). */
#define CHECK_ERROR(prefix)                                                                             \
    do {                                                                                                \
        const char *e_ = omega_gpu_session_last_error();                                                \
        if (strncmp(e_, (prefix), strlen(prefix)) != 0) {                                               \
            fprintf(stderr, "%s:%d: last error \"%s\" does not start with \"%s\"\n", __FILE__, __LINE__, \
                    e_, (prefix));                                                                      \
            check_failures++;                                                                           \
        }                                                                                               \
    } while (0)

/* The last error contains `part`. */
#define CHECK_ERROR_HAS(part)                                                                           \
    do {                                                                                                \
        const char *e_ = omega_gpu_session_last_error();                                                \
        if (strstr(e_, (part)) == NULL) {                                                               \
            fprintf(stderr, "%s:%d: last error \"%s\" does not contain \"%s\"\n", __FILE__, __LINE__,   \
                    e_, (part));                                                                        \
            check_failures++;                                                                           \
        }                                                                                               \
    } while (0)

static int check_done(const char *name) {
    if (check_failures) {
        fprintf(stderr, "%s: %d check(s) failed\n", name, check_failures);
        return 1;
    }
    printf("%s: ok\n", name);
    return 0;
}

/* The two argument words of a 64-bit GPU address: low word first. */
static void put_va(uint32_t *words, uint64_t va) {
    words[0] = (uint32_t)va;
    words[1] = (uint32_t)(va >> 32);
}

#endif
