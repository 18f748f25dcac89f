/* Tiny assertion helpers shared by the C API tests. */
#ifndef PDCX_TEST_CHECK_H
#define PDCX_TEST_CHECK_H
#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "FAILED %s:%d: %s\n", __FILE__, __LINE__, #cond);         \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

#define CHECK_OK(call) CHECK((call) == SUCCEED)
#define CHECK_ID(call) CHECK((call) != 0)
#endif
