/* pdcx extension PDCXsite_pull / PDCXsite_push (pdcx_ext.h): pulls a region of
 * "xs/a" from the linked site "cloud" under the name "xs/a-part", pushes local object
 * "xs/local" there (filed as "hpc/xs/local"), and checks that bad calls fail (the test
 * reads both sites afterwards). */
#include "pdcx_ext.h"
#include "check.h"
#include <stdio.h>

int main(void)
{
    pdcid_t pdc = PDCinit("pdc");
    CHECK_ID(pdc);
    CHECK_OK(PDCXsite_pull("cloud:xs/a", "2:5,:", "xs/a-part"));
    CHECK_OK(PDCXsite_push("xs/local", "cloud", NULL));
    CHECK(PDCXsite_pull("no-separator", NULL, NULL) == FAIL);
    CHECK(PDCXsite_pull("nowhere:xs/a", NULL, NULL) == FAIL);
    CHECK(PDCXsite_pull("cloud:xs/a", "0:99,:", NULL) == FAIL);
    CHECK(PDCXsite_push(NULL, "cloud", NULL) == FAIL);
    CHECK_OK(PDCclose(pdc));
    printf("xsite: ok\n");
    return 0;
}
